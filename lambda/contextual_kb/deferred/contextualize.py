"""``ckb contextualize``'s services (``Contextualizer``), and what its run does: the pending documents'
missing contexts, made by Bedrock batch inference at half the on-demand price, stored where the Lambda
reads them, then the documents ingested again. The phases are ``phases/``' (their order ``sequence.py``'s).

The run is claimed before it plans (``claim.py``: an S3 conditional write), so two at once never pay for the
same chunks; its state is an object in the intermediate bucket, and a run whose process stopped is resumed.
Phases, each resumable and idempotent:

1. **plan**: read the pending records; drop (and count) those that cannot be used: corrupt (their text no
   longer hashes to what was recorded), superseded (a newer record for the same source), or whose source
   was deleted or changed since (``source_state``); leave out chunks whose context is remembered by now;
   group the records of one text (each source of a copied file has its own), build the records
   (``records.build``) once per text and split them into jobs within the limits.
2. **submit**: write each job's JSONL input and create its model invocation job (idempotent by client
   token). Fewer records than a job's minimum: they are run on demand instead, and the summary says so.
3. **collect**: follow the jobs to their end; read every output file, charging every line with usage;
   match output records by ``recordId``; a failed, malformed, missing or duplicated record is counted, and
   its chunks stay pending (or, with ``on_demand_retry``, are asked again on demand). A job that fails or
   expires leaves all its chunks pending, with its error in one line.
4. **store**: each accepted context is written to the document's remembered contexts (the key the Lambda
   recorded), and each pending record keeps only what is still missing; a record whose document got
   contexts is kept, awaiting re-ingestion.
5. **re-ingest**: the caller's ``reingest`` makes the Knowledge Base run the transformation again on the
   documents that got contexts (``reingest.py``: ``ckb sync --reprocess``'s mechanism, or the handler
   offline); a record is dropped once its source is marked (or deleted), and kept, counted, when it cannot
   be.

Nothing is lost: every pending chunk ends with a model context or still pending, and every document given
contexts re-ingested (marked) or still recorded, counted; without a ``reingest`` (``--no-reingest``) the
caller re-ingests them, and the summary says how many.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from typing import Any

from botocore.exceptions import ClientError

from contextual_kb.deferred import costs, sequence
from contextual_kb.deferred.batch_files import ENDED, USABLE, as_output_line, lines, parse_outputs
from contextual_kb.deferred.claim import Claim, ContextualizeError
from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.options import (
    CURRENT,
    NOTHING_PENDING,
    OnDemand,
    Options,
    Reingest,
    SourceState,
    Summary,
)
from contextual_kb.deferred.phases.follow import checkpoint, follow, follow_job, job_outputs, still_fitting
from contextual_kb.deferred.phases.plan import build_records, jobs_of, new_state, plan, usable
from contextual_kb.deferred.phases.reingest import reingest as reingest_phase
from contextual_kb.deferred.phases.settle import after_reingestion, settle
from contextual_kb.deferred.phases.settle import parse_pending as _parse_pending
from contextual_kb.deferred.phases.store import store
from contextual_kb.deferred.phases.submit import submit
from contextual_kb.deferred.records import (
    Output,
    Planned,
)
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.deferred.spool import Spool, Spooled
from contextual_kb.deferred.state import RunState, state_key
from contextual_kb.runtime.context.claude.memory import ContextMemory, place_key
from contextual_kb.runtime.pending import PendingDocument

# On-demand answers are kept in S3 this many records at a time: an interrupted run loses at most one slice.
ON_DEMAND_SLICE = 50


__all__ = [
    "CURRENT",
    "ENDED",
    "NOTHING_PENDING",
    "USABLE",
    "ContextualizeError",
    "Contextualizer",
    "OnDemand",
    "Options",
    "Reingest",
    "SourceState",
    "Summary",
]


class Contextualizer:
    """A run's services (``phases/work.py``'s Protocols, every one): its AWS clients, options, claim and
    callbacks, its S3 reads and writes, and each phase's work as a method through which another phase (or a
    test replacing it on an instance) reaches it. The phases' order is ``sequence.py``'s."""

    def __init__(
        self,
        s3: Any,
        bedrock: Any,
        options: Options,
        *,
        source_state: SourceState | None = None,
        on_demand: OnDemand | None = None,
        log: Callable[[str], None] = lambda _: None,
        progress: Callable[[str, int, int], None] = lambda *_: None,
        sleep: Callable[[float], None] = time.sleep,
        confirm: Callable[[Summary], None] | None = None,
        owner: str = "",
        start_ingestion: Callable[[], tuple[str, int | None]] | None = None,
    ) -> None:
        self.s3 = s3
        # Shown the plan's estimate before anything is submitted (a new run, not a dry one); raises to stop.
        self.confirm = confirm
        self.bedrock = bedrock
        self.options = options
        self.source_state = source_state or (lambda _uri, _at: "unknown")
        # A sharded run marks its documents shard by shard (``reingest``, marking only), then starts one
        # ingestion job with this; None: ``reingest`` alone, per shard.
        self.start_ingestion = start_ingestion
        self.on_demand = on_demand
        self.log = log
        self.progress = progress
        self.sleep = sleep
        self.memory = ContextMemory(s3)
        # Which run is under way, held by this process while it works (``claim.py``).
        self.claim = Claim(s3, options.bucket, options.batch_prefix + CURRENT, owner=owner)

    @property
    def s3(self) -> Any:
        return self._s3

    @s3.setter
    def s3(self, client: Any) -> None:  # tests swap the client: the claim and memory follow it
        self._s3 = client
        if hasattr(self, "claim"):
            self.claim.s3 = client
            self.memory = ContextMemory(client)

    # --- the run, for the tests' and callers' convenience: ``sequence.run``, the CLI's sequencer ---
    def run(self, reingest: Reingest | None = None, *, plan: bool = True) -> Summary:
        return sequence.run(self, reingest, plan=plan)

    def _reingest(self, reingest: Reingest, sources: list[str]) -> Reingested:
        return reingest_phase(sources, reingest, self.start_ingestion)

    # --- plan ---
    def _plan(self, run: str, leave_out: set[str] | None = None) -> RunState:
        return plan(run, self, leave_out)

    def _build(
        self,
        usable: list[list[str]],
        spool: Spool,
        summary: Summary,
        dropped: Counter[str],
        ids: Iterator[str] | None = None,
    ) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
        return build_records(usable, spool, summary, dropped, self, ids)

    def _usable(
        self, leave_out: set[str], among: Iterable[str] | None = None
    ) -> tuple[list[list[str]], Counter[str]]:
        return usable(leave_out, self, among)

    def _new_state(
        self, run: str, summary: Summary, spool: Spool, jobs: list[list[int]], on_demand: list[int]
    ) -> RunState:
        return new_state(run, summary, spool, jobs, on_demand, self)

    def _still_wanted(self, document: PendingDocument) -> list[int]:
        """The recorded chunks still without a remembered context (a later sync may have made some)."""
        remembered = self.memory.load(self.options.bucket, document.memory_key)  # an S3 error stops the run
        counts = Counter(document.chunk(index) for index in range(len(document.spans)))
        out = []
        for index in document.pending:
            if index >= len(document.spans):
                continue
            chunk = document.chunk(index)
            if remembered.get(chunk, document.spans[index][0], unique=counts[chunk] == 1):
                continue
            out.append(index)
        return out

    def _jobs(self, planned: Sequence[Spooled]) -> tuple[list[int], list[list[int]]]:
        return jobs_of(planned, self)

    # --- costs (``costs.py``), at the options' prices ---
    def _floor(self, planned: Sequence[Spooled], documents: dict[str, int]) -> float:
        return costs.floor(planned, documents, self.options.model_prices)

    def _estimate(self, summary: Summary, planned: Sequence[Spooled], on_demand: list[int]) -> None:
        options = self.options
        costs.estimate(
            summary, planned, on_demand, batch_prices=options.batch_prices, model_prices=options.model_prices
        )

    def _charge(
        self, summary: Summary, model_id: str, input_tokens: int, output_tokens: int, *, batch: bool
    ) -> None:
        options = self.options
        costs.charge(
            summary,
            model_id,
            input_tokens,
            output_tokens,
            batch=batch,
            batch_prices=options.batch_prices,
            model_prices=options.model_prices,
        )

    def _floor_output(self, summary: Summary, model_id: str, output_tokens: int) -> None:
        costs.floor_output(summary, model_id, output_tokens, self.options.model_prices)

    # --- submit ---
    def _submit(self, state: RunState) -> None:
        submit(state, self)

    # --- collect and store ---
    def _collect_and_store(self, state: RunState) -> int:
        return follow(state, self)

    def _follow(self, state: RunState, job: dict[str, Any], summary: Summary, rejected: Counter[str]) -> None:
        follow_job(state, job, summary, rejected, self)

    def _still_fitting(self, state: RunState, record_ids_: list[str]) -> list[str]:
        return still_fitting(state, record_ids_, self)

    def _charge_line(
        self, state: RunState, summary: Summary, *, batch: bool, model: str = ""
    ) -> Callable[[Output], None]:
        """Charges an output line with usage: its record's model (``model`` for an id the run never asked)."""

        def charge(output: Output) -> None:
            if output.input_tokens or output.output_tokens:
                asked = state.records.get(output.record_id, {}).get("model") or model
                self._charge(summary, asked, output.input_tokens, output.output_tokens, batch=batch)

        return charge

    def _checkpoint(self, state: RunState, summary: Summary, rejected: Counter[str]) -> None:
        checkpoint(state, summary, rejected, self)

    def _on_demand_outputs(
        self, state: RunState, record_ids_: list[str], name: str, charge: Callable[[Output], None]
    ) -> dict[str, Output]:
        """The records' answers on demand, kept in S3 (as job output files, ``ON_DEMAND_SLICE`` records
        each) as they come: a resume reads back the slices answered and asks only for the others (a slice
        answered but not yet kept when the run stopped is asked again). Every answer is charged, read back
        or new: the step's summary is saved with the step, so none is counted twice."""
        prefix = f"{self.options.batch_prefix}{state.run}/output/{name}-"
        slices = [
            record_ids_[at : at + ON_DEMAND_SLICE] for at in range(0, len(record_ids_), ON_DEMAND_SLICE)
        ]
        outputs: dict[str, Output] = {}
        missing: list[tuple[str, list[str]]] = []
        for number, ids in enumerate(slices):
            key = f"{prefix}{number:05d}.jsonl.out"
            kept = self._get(key)
            if kept is None:
                missing.append((key, ids))
            else:
                outputs.update(parse_outputs(kept.split(b"\n"), charge=charge))
        if not missing or self.on_demand is None:
            return outputs
        planned = self._planned(state, {rid for _, ids in missing for rid in ids})
        for key, ids in missing:
            self.claim.renew(force=True)  # paid: only while this process holds the run
            answered = self.on_demand([planned[rid] for rid in ids if rid in planned])
            lines = [json.dumps(as_output_line(output), ensure_ascii=True) for output in answered.values()]
            self._put(key, ("\n".join(lines) + "\n").encode("ascii"))
            for output in answered.values():
                charge(output)
            outputs.update(answered)
        return outputs

    def _outputs(self, described: dict[str, Any], charge: Callable[[Output], None]) -> dict[str, Output]:
        return job_outputs(described, charge, self)

    def _planned(self, state: RunState, wanted: set[str]) -> dict[str, Planned]:
        """The records' requests, read back (once) from the inputs written at planning."""
        wanted = set(wanted)
        # Only the input files that hold some of them (a job's input can be a gigabyte).
        inputs = [step["input"] for step in (state.on_demand, *state.jobs) if wanted & set(step["records"])]
        planned: dict[str, Planned] = {}
        for key in inputs:
            if not wanted:
                break
            response = self._get_object(key)
            if response is None:
                continue
            with closing(response["Body"]) as body:
                for line in lines(body):  # streamed: a job's input can be a gigabyte
                    if not line.strip():
                        continue
                    rid = json.loads(line).get("recordId")
                    if rid not in wanted:
                        continue
                    wanted.discard(rid)
                    info = state.records[rid]
                    planned[rid] = Planned(
                        rid,
                        info["document"],
                        info["model"],
                        info["unit"],
                        tuple(info["chunks"]),
                        line + b"\n",
                        0,
                    )
                    if not wanted:
                        break
        return planned

    def _store(
        self,
        state: RunState,
        record_ids_: list[str],
        outputs: dict[str, Output],
        summary: Summary,
        rejected: Counter[str],
    ) -> list[str]:
        return store(state, record_ids_, outputs, summary, rejected, self)

    def _settle(self, state: RunState) -> dict[str, int]:
        return settle(state, self)

    def _after_reingestion(self, state: RunState, reingested: Reingested, summary: Summary) -> None:
        after_reingestion(state, reingested, summary, self)

    def _remember(self, document: PendingDocument, learned: dict[int, str]) -> None:
        """``learned`` merged into what the document has remembered. A read that fails stops the run (it is
        resumable) rather than overwrite the remembered contexts with this run's alone; format-1 entries move
        to their place where their text is unique, as the function migrates them."""
        bucket = self.options.bucket
        remembered = self.memory.load(bucket, document.memory_key)  # a missing object is an empty one
        merged = (
            remembered.migrated([(document.chunk(i), start) for i, (start, _) in enumerate(document.spans)])
            if remembered.by_text  # format 1: moved to their places (each chunk's text listed only then)
            else dict(remembered.by_place)
        )
        for index, context in learned.items():
            merged[place_key(document.chunk(index), document.spans[index][0])] = context
        self.memory.save(bucket, document.memory_key, merged, read=remembered)

    # --- S3 ---
    def _pending_keys(self) -> Iterator[str]:
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.options.bucket, Prefix=self.options.pending_prefix
        ):
            for item in page.get("Contents", []):
                if item["Key"].endswith(".json"):
                    yield item["Key"]

    def _pending_chunks(self) -> int:
        def chunks(key: str) -> int:
            document = self._read(key)
            return len(document.pending) if document is not None else 0

        return sum(count for _, count in in_order(chunks, self._pending_keys()))

    def _read(self, key: str) -> PendingDocument | None:
        """The pending record at ``key``; None when it is gone or cannot be read as one. Any other S3 error
        stops the run (resumable): a throttled read must not pass for a deleted record."""
        got = self._get_versioned(key)
        return _parse_pending(got[0]) if got is not None else None

    def _get(self, key: str) -> bytes | None:
        """The object's body, or None when there is none (any other error raises)."""
        got = self._get_versioned(key)
        return got[0] if got is not None else None

    def _get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The object's body and ETag, or None when there is none (any other error raises)."""
        response = self._get_object(key)
        if response is None:
            return None
        return bytes(response["Body"].read()), str(response.get("ETag", ""))

    def _get_object(self, key: str) -> dict[str, Any] | None:
        """GetObject's response (its body still to read), or None when there is no such object (any other
        error raises: a throttled read must not pass for a missing object)."""
        try:
            response: dict[str, Any] = self.s3.get_object(Bucket=self.options.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise
        return response

    def _put(self, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=self.options.bucket, Key=key, Body=body, ContentType="application/jsonl")

    def _write(self, key: str, document: PendingDocument, *, if_match: str = "") -> None:
        condition = {"IfMatch": if_match} if if_match else {}
        self.s3.put_object(
            Bucket=self.options.bucket,
            Key=key,
            Body=document.dump(),
            ContentType="application/json",
            **condition,
        )

    def _drop(self, key: str, *, if_match: str = "") -> None:
        if not self.options.dry_run:
            self._delete(key, if_match=if_match)

    def _delete(self, key: str, *, if_match: str = "") -> None:
        condition = {"IfMatch": if_match} if if_match else {}
        self.s3.delete_object(Bucket=self.options.bucket, Key=key, **condition)

    def _load(self, run: str) -> RunState | None:
        """Run ``run``'s state; None when it has none (it never saved a plan). Any other S3 error is raised
        (after the SDK's retries), never taken as "no run"; a state that cannot be read stops in one line."""
        key = state_key(self.options.batch_prefix, run)
        body = self._get(key)
        if body is None:
            return None
        try:
            state = RunState.from_json(body)
        except (ValueError, TypeError) as exc:
            where = f"s3://{self.options.bucket}/"
            raise ContextualizeError(
                f"run {run}'s state {where}{key} cannot be read ({exc}): restore an earlier version of it, "
                f"or delete {where}{self.options.batch_prefix}{CURRENT} to plan a new run (what run {run} "
                "submitted is then not collected: its chunks stay pending and are planned again)"
            ) from None
        return state

    def _save(self, state: RunState) -> None:
        if self.options.dry_run:
            return
        self.claim.renew(force=True)  # never a state over the run of a process that took it over
        key = state_key(self.options.batch_prefix, state.run)
        self.s3.put_object(Bucket=self.options.bucket, Key=key, Body=state.to_json())
