"""The services the phases of a run need, one base Protocol a service, each signature stated here once: a
phase's Protocol (``plan.Planning``, ``follow.Following``, ``shards.RunWork``...) is the bases it uses,
composed by inheritance. ``contextualize.Contextualizer`` is every one of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from contextual_kb.deferred.claim import Claim
from contextual_kb.deferred.options import OnDemand, Options, Reingest, SourceState, Summary
from contextual_kb.deferred.records import Output
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.deferred.spool import Spool, Spooled
from contextual_kb.deferred.state import RunState
from contextual_kb.runtime.pending import PendingDocument


class Clients(Protocol):
    """AWS and the run's settings and claim."""

    s3: Any
    bedrock: Any
    options: Options
    claim: Claim


class Callbacks(Protocol):
    """What the caller gives: its log and progress, its clock, and what it asks of AWS besides S3."""

    log: Callable[[str], None]
    progress: Callable[[str, int, int], None]
    sleep: Callable[[float], None]
    confirm: Callable[[Summary], None] | None
    on_demand: OnDemand | None
    source_state: SourceState
    start_ingestion: Callable[[], tuple[str, int | None]] | None


class Objects(Protocol):
    """The intermediate bucket's objects: the run's files and state, the pending records, the remembered
    contexts."""

    def _get(self, key: str) -> bytes | None: ...
    def _get_versioned(self, key: str) -> tuple[bytes, str] | None: ...
    def _put(self, key: str, body: bytes) -> None: ...
    def _load(self, run: str) -> RunState | None: ...
    def _save(self, state: RunState) -> None: ...
    def _pending_keys(self) -> Iterator[str]: ...
    def _pending_chunks(self) -> int: ...
    def _read(self, key: str) -> PendingDocument | None: ...
    def _write(self, key: str, document: PendingDocument, *, if_match: str = "") -> None: ...
    def _drop(self, key: str, *, if_match: str = "") -> None: ...
    def _still_wanted(self, document: PendingDocument) -> list[int]: ...
    def _remember(self, document: PendingDocument, learned: dict[int, str]) -> None: ...


class Costs(Protocol):
    """What records and answers cost, and the floor."""

    def _floor(self, planned: Sequence[Spooled], documents: dict[str, int]) -> float: ...
    def _estimate(self, summary: Summary, planned: Sequence[Spooled], on_demand: list[int]) -> None: ...
    def _floor_output(self, summary: Summary, model_id: str, output_tokens: int) -> None: ...
    def _charge_line(
        self, state: RunState, summary: Summary, *, batch: bool, model: str = ""
    ) -> Callable[[Output], None]: ...


class PlanWork(Protocol):
    """The plan's parts, replaceable one by one (a test; a shard plans with the first two)."""

    def _usable(
        self, leave_out: set[str], among: Iterable[str] | None = None
    ) -> tuple[list[list[str]], Counter[str]]: ...
    def _build(
        self,
        usable: list[list[str]],
        spool: Spool,
        summary: Summary,
        dropped: Counter[str],
        ids: Iterator[str] | None = None,
    ) -> tuple[dict[str, int], dict[str, dict[str, Any]]]: ...
    def _jobs(self, planned: Sequence[Spooled]) -> tuple[list[int], list[list[int]]]: ...
    def _new_state(
        self, run: str, summary: Summary, spool: Spool, jobs: list[list[int]], on_demand: list[int]
    ) -> RunState: ...
    def _plan(self, run: str, leave_out: set[str] | None = None) -> RunState: ...


class AnswerWork(Protocol):
    """Submitting, following and storing: the answers asked, read and kept."""

    def _submit(self, state: RunState) -> None: ...
    def _collect_and_store(self, state: RunState) -> int: ...
    def _on_demand_outputs(
        self, state: RunState, record_ids_: list[str], name: str, charge: Callable[[Output], None]
    ) -> dict[str, Output]: ...
    def _still_fitting(self, state: RunState, record_ids_: list[str]) -> list[str]: ...
    def _store(
        self,
        state: RunState,
        record_ids_: list[str],
        outputs: dict[str, Output],
        summary: Summary,
        rejected: Counter[str],
    ) -> list[str]: ...


class SettleWork(Protocol):
    """The pending records settled, and the documents re-ingested."""

    def _settle(self, state: RunState) -> dict[str, int]: ...
    def _reingest(self, reingest: Reingest, sources: list[str]) -> Reingested: ...
    def _after_reingestion(self, state: RunState, reingested: Reingested, summary: Summary) -> None: ...


class RunWork(Clients, Callbacks, Objects, Costs, PlanWork, AnswerWork, SettleWork, Protocol):
    """A whole run's services: what its sequencers (``sequence.py``) and a shard (``shards.py``) need."""
