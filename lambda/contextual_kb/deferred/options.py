"""What a run of the deferred path is given and what it says: its options, its summary, the signatures of
the services it is handed (a source's state, on-demand calls, the re-ingestion), the claim's file name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from contextual_kb.deferred.records import Limits, Output, Planned
from contextual_kb.deferred.reingest import Reingested

CURRENT = "current.json"
NOTHING_PENDING = "nothing pending: no job submitted"


@dataclass
class Options:
    bucket: str  # the intermediate bucket: pending records, remembered contexts, batch inputs and outputs
    role_arn: str  # the batch service role (the stack's BatchRoleArn output)
    pending_prefix: str = "contextual-kb/pending/"
    batch_prefix: str = "contextual-kb/batch/"
    # Chunks a record asks for. Larger than the Lambda's grouped default (20): batch inference has no prompt
    # cache, so each record reads its document again (measured: 40 costs 0.57x the floor, 20 costs 0.64x).
    group_size: int = 40
    limits: Limits = field(default_factory=Limits)
    batch_prices: str = ""  # JSON overrides, {"input": .., "output": ..}
    model_prices: str = ""
    on_demand_retry: bool = False
    dry_run: bool = False
    poll_seconds: float = 30.0
    timeout_hours: int = 24
    # False: one look at the jobs, and the run left unfinished (its claim released) while any still runs:
    # the workflow's steps, whose waits are Step Functions' (deferred/workflow.py). True: followed to the end.
    follow: bool = True
    # Pending records a shard plans and stores (``shards.py``): 0, a run in one piece (unless it resumes a
    # sharded one). The workflow shards every run; ckb contextualize when asked (--shard-documents).
    shard_documents: int = 0
    # True: a sharded run's shards are run elsewhere (the workflow's Distributed Maps): the run stops where
    # they are needed (``Summary.fan_out``), its claim kept for them. False: run here, one after the other.
    fan_out: bool = False


@dataclass
class Summary:
    run: str = ""
    documents: int = 0  # pending documents used
    chunks: int = 0  # chunks of those documents
    pending_before: int = 0  # chunks pending when the run planned
    records: int = 0
    jobs: int = 0
    jobs_failed: int = 0
    jobs_running: int = 0  # not ended at the last look (a run not followed to the end: Options.follow)
    on_demand_records: int = 0
    model_contexts: int = 0  # chunks of these documents with a model context once the run is over
    contexts_stored: int = 0  # of which made by this run
    pending_after: int = 0
    failed_records: int = 0
    answers_rejected: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # pending records not used, by reason
    same_text: int = 0  # records of a text another record has (a copied file): asked once, each re-ingested
    # Documents with contexts made but not re-ingested (not marked: why, by source); records kept.
    awaiting_reingestion: int = 0
    not_reingested: dict[str, str] = field(default_factory=dict)
    reingest_missing: int = 0  # sources deleted since recorded: not marked, records dropped
    model_calls_during_reingest: int | None = None
    reingested_documents: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    floor_usd: float = 0.0
    estimated: bool = False  # a dry run: tokens and costs are estimates
    # Models without batch prices (not in the table, none given): priced at their on-demand prices, an upper
    # bound (Bedrock's batch is about half), never at $0.
    priced_on_demand: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # A sharded run stopped for its shards to run elsewhere (Options.fan_out): "plan" or "store"; and how
    # many shards the run has.
    fan_out: str = ""
    shards: int = 0

    @property
    def cost_vs_floor(self) -> float | None:
        return round(self.cost_usd / self.floor_usd, 3) if self.floor_usd else None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cost_usd"] = round(self.cost_usd, 6)
        out["floor_usd"] = round(self.floor_usd, 6)
        out["cost_vs_floor"] = self.cost_vs_floor
        return out


SourceState = Callable[[str, str], str]  # (source URI, recorded at) -> ok | deleted | changed | unknown
OnDemand = Callable[[list[Planned]], dict[str, Output]]
# Source URIs -> what was re-ingested (an int or None: every source was, with that many model calls made).
Reingest = Callable[[list[str]], Reingested | int | None]
