"""``ckb contextualize``: the pending documents' missing contexts, made by Bedrock batch inference at half the
on-demand price, stored where the Lambda reads them, then the documents ingested again.

Phases, each resumable (the run's state is an object in the intermediate bucket; a second run picks up an
unfinished one) and idempotent:

1. **plan**: read the pending records; drop (and count) those that cannot be used: corrupt (their text no
   longer hashes to what was recorded), superseded (a newer record for the same source), or whose source
   was deleted or changed since (``source_state``); leave out chunks whose context is remembered by now;
   build the records (``records.build``) and split them into jobs within the limits.
2. **submit**: write each job's JSONL input and create its model invocation job (idempotent by client
   token). Fewer records than a job's minimum: they are run on demand instead, and the summary says so.
3. **collect**: follow the jobs to their end; read every output file; match output records by
   ``recordId``; a failed, malformed, missing or duplicated record is counted, and its chunks stay
   pending (or, with ``on_demand_retry``, are asked again on demand). A job that fails or expires leaves
   all its chunks pending, with its error in one line.
4. **store**: each accepted context is written to the document's remembered contexts (the key the Lambda
   recorded), and the pending record keeps only what is still missing (deleted when nothing is).
5. **re-ingest**: the caller's ``reingest`` makes the Knowledge Base run the transformation again on the
   documents that got contexts (``ckb sync --reprocess``'s mechanism, or the handler offline).

Nothing is lost: every pending chunk ends with a model context or still pending, counted.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.records import (
    Accepted,
    Limits,
    Output,
    Planned,
    accept,
    build,
    count_tokens,
    parse_output,
    record_ids,
    split_jobs,
    unit_texts,
)
from contextual_kb.deferred.spool import Spool, Spooled
from contextual_kb.runtime.context.claude.answers import normalize
from contextual_kb.runtime.context.claude.memory import ContextMemory, place_key
from contextual_kb.runtime.context.claude.pricing import batch_prices_for, prices_for
from contextual_kb.runtime.pending import PendingDocument

ENDED = {"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"}
# A stopped job keeps the outputs of the records it processed (AWS: results appear from InProgress on).
USABLE = {"Completed", "PartiallyCompleted", "Stopped"}
# On-demand answers are kept in S3 this many records at a time: an interrupted run loses at most one slice.
ON_DEMAND_SLICE = 50
# A conditional write or delete refused: the object changed (412), a concurrent write won (409), or is gone.
CHANGED_MEANWHILE = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}
CURRENT = "current.json"
# A pending record deleted, or rewritten unreadable, between the plan's two passes.
GONE, BROKEN = "gone", "broken"
# When nothing is known of a document's context length, an output's estimate (dry run): measured on the
# codebase corpus, 74 output tokens a chunk (docs/BENCHMARKS.md, "Contextualizing with Claude").
ESTIMATED_OUTPUT_TOKENS_PER_CHUNK = 74


class ContextualizeError(Exception):
    """The run cannot go on; the message says why and what to do."""


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


@dataclass
class Summary:
    run: str = ""
    documents: int = 0  # pending documents used
    chunks: int = 0  # chunks of those documents
    pending_before: int = 0  # chunks pending when the run planned
    records: int = 0
    jobs: int = 0
    jobs_failed: int = 0
    on_demand_records: int = 0
    model_contexts: int = 0  # chunks of these documents with a model context once the run is over
    contexts_stored: int = 0  # of which made by this run
    pending_after: int = 0
    failed_records: int = 0
    answers_rejected: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # pending records not used, by reason
    model_calls_during_reingest: int | None = None
    reingested_documents: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    floor_usd: float = 0.0
    estimated: bool = False  # a dry run: tokens and costs are estimates
    notes: list[str] = field(default_factory=list)

    @property
    def cost_vs_floor(self) -> float | None:
        return round(self.cost_usd / self.floor_usd, 3) if self.floor_usd else None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cost_usd"] = round(self.cost_usd, 6)
        out["floor_usd"] = round(self.floor_usd, 6)
        out["cost_vs_floor"] = self.cost_vs_floor
        return out


@dataclass(frozen=True, slots=True)
class _Glance:
    key: str
    source: str
    recorded_at: str


@dataclass
class _Stored:
    """What one document's outputs gave."""

    source: str
    contexts: dict[int, str] = field(default_factory=dict)
    rejected: Counter[str] = field(default_factory=Counter)


SourceState = Callable[[str, str], str]  # (source URI, recorded at) -> ok | deleted | changed | unknown
OnDemand = Callable[[list[Planned]], dict[str, Output]]
Reingest = Callable[[list[str]], int | None]  # source URIs -> model calls made while re-ingesting


class Contextualizer:
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
    ) -> None:
        self.s3 = s3
        # Shown the plan's estimate before anything is submitted (a new run, not a dry one); raises to stop.
        self.confirm = confirm
        self.bedrock = bedrock
        self.options = options
        self.source_state = source_state or (lambda _uri, _at: "unknown")
        self.on_demand = on_demand
        self.log = log
        self.progress = progress
        self.sleep = sleep
        self.memory = ContextMemory(s3)

    # --- the run ---
    def run(self, reingest: Reingest | None = None) -> Summary:
        state = self._resume()
        if state is None:
            state = self._plan()
            if self.options.dry_run or not state["records"]:
                summary = Summary(**state["summary"])
                if not state["records"] and not self.options.dry_run:
                    summary.notes.append("nothing pending: no job submitted")
                return summary
            self._save(state)
        else:
            self.log(f"resuming run {state['run']} ({state['phase']})")
        if state["phase"] == "planned":
            self._submit(state)
            state["phase"] = "submitted"
            self._save(state)
        if state["phase"] == "submitted":
            self._collect_and_store(state)
            state["phase"] = "stored"
            self._save(state)
        summary = Summary(**state["summary"])
        if state["phase"] == "stored":
            still = self._settle(state)
            sources = sorted(set(state["touched"].values()))
            if reingest is not None and sources:
                summary.model_calls_during_reingest = reingest(sources)
                summary.reingested_documents = len(sources)
            summary.pending_after = self._pending_chunks()
            # Every chunk with text of these documents has a model context, but those still pending.
            summary.model_contexts = sum(
                info["with_text"] - still.get(key, 0) for key, info in state["documents"].items()
            )
            state["summary"] = asdict(summary)
            state["phase"] = "done"
            self._save(state)
            self._delete(self.options.batch_prefix + CURRENT)
        return summary

    # --- plan ---
    def _plan(self) -> dict[str, Any]:
        """Two passes over the pending records, several at a time: the first picks the usable ones (keeping
        their keys alone), the second reads each again and spools its records to disk; no document's text
        stays in memory after its records are built."""
        options = self.options
        run = datetime.now().strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:6]
        summary = Summary(run=run, estimated=options.dry_run)
        usable, dropped = self._usable()
        ids = record_ids()
        documents: dict[str, int] = {}  # pending record key -> the document's tokens
        known: dict[str, dict[str, Any]] = {}  # pending record key -> what the run must know of it
        with Spool() as spool:
            for key, (document, wanted) in in_order(self._with_wanted, usable):
                if isinstance(document, str):  # changed since the first pass read it
                    if document == BROKEN:  # a deleted one (another run settled it) needs nothing more
                        dropped["corrupt"] += 1
                        self._drop(key)
                    continue
                if not wanted:
                    dropped["resolved"] += 1
                    self._drop(key)
                    continue
                for record in build(key, document, wanted, options.group_size, ids):
                    spool.add(record)
                documents[key] = count_tokens(document.text)
                known[key] = {
                    "source": document.source,
                    "with_text": sum(1 for i in range(len(document.spans)) if document.chunk(i).strip()),
                    "spans": _spans_hash(document),  # a record rewritten with other chunks is not stored into
                }
                summary.documents += 1
                summary.chunks += len(document.spans)
                summary.pending_before += len(wanted)
            planned = spool.records
            summary.dropped = dict(dropped)
            summary.records = len(planned)
            on_demand, jobs = self._jobs(planned)
            summary.jobs = len(jobs)
            summary.on_demand_records = len(on_demand)
            if on_demand:
                summary.notes.append(
                    f"{len(on_demand)} record(s) below a job's minimum of {options.limits.min_records}: run "
                    "on demand instead"
                )
            summary.floor_usd = self._floor(planned, documents)
            if options.dry_run:
                self._estimate(summary, planned, on_demand)
            elif self.confirm is not None and planned:
                quote = replace(summary, estimated=True, notes=list(summary.notes))
                self._estimate(quote, planned, on_demand)
                self.confirm(quote)
            state = self._new_state(run, summary, spool, jobs, on_demand)
        state["documents"] = known
        return state

    def _usable(self) -> tuple[list[str], Counter[str]]:
        """The keys of the pending records worth contextualizing, newest per source; the others dropped
        (deleted, unless a dry run) and counted by reason."""
        dropped: Counter[str] = Counter()
        newest: dict[str, _Glance] = {}
        for key, glance in in_order(self._glance, self._pending_keys()):
            if glance is None:
                dropped["corrupt"] += 1
                self._drop(key)
                continue
            previous = newest.get(glance.source)
            if previous is None:
                newest[glance.source] = glance
                continue
            older, newer = sorted([previous, glance], key=lambda g: g.recorded_at)
            dropped["superseded"] += 1  # a newer ingestion of that source recorded its own
            self._drop(older.key)
            newest[glance.source] = newer
        chosen = sorted(newest.values(), key=lambda g: g.key)
        usable = []
        for glance, state in in_order(lambda g: self.source_state(g.source, g.recorded_at), chosen):
            if state in {"deleted", "changed"}:
                dropped[state] += 1  # never written under another text's key: that one is ingested anew
                self._drop(glance.key)
            else:
                usable.append(glance.key)
        return usable, dropped

    def _glance(self, key: str) -> _Glance | None:
        """What choosing among the records needs of one (None: gone, or its text no longer hashes)."""
        document = self._read(key)
        if document is None or not document.intact():
            return None
        return _Glance(key, document.source, document.recorded_at)

    def _with_wanted(self, key: str) -> tuple[PendingDocument | str, list[int]]:
        """The record and its chunks still wanted; ``GONE`` or ``BROKEN`` in its place."""
        got = self._get_versioned(key)
        if got is None:
            return GONE, []
        document = _parse_pending(got[0])
        if document is None or not document.intact():
            return BROKEN, []
        return document, self._still_wanted(document)

    def _new_state(
        self,
        run: str,
        summary: Summary,
        spool: Spool,
        jobs: list[list[int]],
        on_demand: list[int],
    ) -> dict[str, Any]:
        """The run's state; unless a dry run, each job's JSONL input written now (the state holds none)."""
        prefix = f"{self.options.batch_prefix}{run}/"
        planned = [spooled.record for spooled in spool.records]
        records = {
            p.record_id: {
                "document": p.document,
                "unit": p.unit,
                "chunks": list(p.chunks),
                "model": p.model_id,
            }
            for p in planned
        }
        state: dict[str, Any] = {
            "run": run,
            "phase": "planned",
            "records": records,
            "jobs": [],
            "on_demand": {
                "input": f"{prefix}input/on-demand.jsonl",
                "records": [planned[i].record_id for i in on_demand],
            },
            "touched": {},  # pending record key -> source URI, of documents given contexts
            "summary": asdict(summary),
        }
        for n, job in enumerate(jobs, 1):
            name = f"ckb-{run}-{n}"
            records_of = [planned[i].record_id for i in job]
            entry = {"name": name, "input": f"{prefix}input/{name}.jsonl", "records": records_of}
            state["jobs"].append({**entry, "arn": "", "status": "", "stored": False, "message": ""})
        if not self.options.dry_run:
            bucket = self.options.bucket
            for job, indices in zip(state["jobs"], jobs, strict=True):
                spool.upload(self.s3, bucket, job["input"], indices)
            if on_demand:
                spool.upload(self.s3, bucket, state["on_demand"]["input"], on_demand)
        return state

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
        """(records to run on demand, jobs): per model, split within the limits; too few for a job, on
        demand."""
        limits = self.options.limits
        by_model: dict[str, list[int]] = {}
        for index, spooled in enumerate(planned):
            by_model.setdefault(spooled.record.model_id, []).append(index)
        on_demand: list[int] = []
        jobs: list[list[int]] = []
        for indices in by_model.values():
            for job in split_jobs([planned[i].size for i in indices], limits):
                chosen = [indices[i] for i in job]
                if len(chosen) >= limits.min_records:
                    jobs.append(chosen)
                else:
                    on_demand.extend(chosen)
        return on_demand, jobs

    def _floor(self, planned: Sequence[Spooled], documents: dict[str, int]) -> float:
        """Each document read once at the on-demand input price (its contexts at the on-demand output price
        are added as the outputs come back: ``_charge``)."""
        models = {p.record.document: p.record.model_id for p in planned}
        total = 0.0
        for key, tokens in documents.items():
            prices = prices_for(models.get(key, ""), self.options.model_prices)
            if prices is not None:
                total += tokens * prices.input / 1e6
        return total

    def _estimate(self, summary: Summary, planned: Sequence[Spooled], on_demand: list[int]) -> None:
        asked_on_demand = set(on_demand)
        for index, spooled in enumerate(planned):
            record = spooled.record
            output = ESTIMATED_OUTPUT_TOKENS_PER_CHUNK * len(record.chunks)
            summary.input_tokens += record.input_tokens
            summary.output_tokens += output
            self._charge(
                summary, record.model_id, record.input_tokens, output, batch=index not in asked_on_demand
            )

    def _charge(
        self, summary: Summary, model_id: str, input_tokens: int, output_tokens: int, *, batch: bool
    ) -> None:
        options = self.options
        on_demand = prices_for(model_id, options.model_prices)
        if on_demand is not None:
            summary.floor_usd += output_tokens * on_demand.output / 1e6
        if batch:
            prices = batch_prices_for(model_id, options.batch_prices)
            if prices is not None:
                summary.cost_usd += (input_tokens * prices.input + output_tokens * prices.output) / 1e6
        elif on_demand is not None:
            summary.cost_usd += (input_tokens * on_demand.input + output_tokens * on_demand.output) / 1e6

    # --- submit ---
    def _submit(self, state: dict[str, Any]) -> None:
        options = self.options
        prefix = f"{options.batch_prefix}{state['run']}/"
        for job in state["jobs"]:
            if job["arn"] or job["status"] == "NotCreated":
                continue
            key = job["input"]
            model_id = state["records"][job["records"][0]]["model"]
            try:
                created = self.bedrock.create_model_invocation_job(
                    jobName=job["name"],
                    roleArn=options.role_arn,
                    clientRequestToken=job["name"].replace("-", ""),
                    modelId=model_id,
                    inputDataConfig={
                        "s3InputDataConfig": {
                            "s3Uri": f"s3://{options.bucket}/{key}",
                            "s3InputFormat": "JSONL",
                        }
                    },
                    outputDataConfig={
                        "s3OutputDataConfig": {"s3Uri": f"s3://{options.bucket}/{prefix}output/"}
                    },
                    timeoutDurationInHours=options.timeout_hours,
                )
            except ClientError as exc:
                error = exc.response.get("Error", {})
                job["status"] = "NotCreated"
                job["message"] = f"{error.get('Code', 'Unknown')}: {error.get('Message', '')}"
                self.log(f"job {job['name']} not created: {job['message']}; its chunks stay pending")
                self._save(state)
                continue
            job["arn"] = created["jobArn"]
            job["status"] = "Submitted"
            self.log(f"submitted {job['name']}: {len(job['records'])} records, {model_id}")
            self._save(state)  # resumable: a second run does not submit it again

    # --- collect and store ---
    def _collect_and_store(self, state: dict[str, Any]) -> None:
        """Each step's outputs stored, then the state saved with what it stored and what failed: a resume
        repeats at most the step it stopped in, whose writes are idempotent (remembered contexts merged by
        place; pending records settled only at the end, from the remembered contexts themselves), and
        whose on-demand answers were kept in S3 first (never paid twice)."""
        summary = Summary(**state["summary"])
        rejected: Counter[str] = Counter(summary.answers_rejected)
        on_demand = state["on_demand"]
        if on_demand["records"] and not on_demand.get("stored"):
            outputs = self._on_demand_outputs(state, on_demand["records"], "on-demand")
            on_demand["failed"] = self._store(
                state, on_demand["records"], outputs, summary, rejected, batch=False
            )
            on_demand["stored"] = True
            self._checkpoint(state, summary, rejected)
        pending_jobs = [job for job in state["jobs"] if job["arn"] and not job["stored"]]
        while pending_jobs:
            for job in pending_jobs:
                described = self.bedrock.get_model_invocation_job(jobIdentifier=job["arn"])
                job["status"] = described["status"]
                self.progress(job["name"], int(described.get("processedRecordCount", 0)), len(job["records"]))
                if job["status"] not in ENDED:
                    continue
                if job["status"] in USABLE:
                    outputs = self._outputs(described)
                else:
                    job["message"] = str(described.get("message", ""))
                    summary.jobs_failed += 1
                    why = job["message"] or "no reason given"
                    self.log(f"job {job['name']} {job['status']}: {why}; its chunks stay pending")
                    outputs = {}
                job["failed"] = self._store(state, job["records"], outputs, summary, rejected, batch=True)
                job["stored"] = True
                self._checkpoint(state, summary, rejected)
            pending_jobs = [job for job in state["jobs"] if job["arn"] and not job["stored"]]
            if pending_jobs:
                self.sleep(self.options.poll_seconds)
        for job in state["jobs"]:  # never created: their chunks stay pending, counted
            if job.get("status") == "NotCreated" and not job["stored"]:
                job["failed"] = list(job["records"])
                summary.jobs_failed += 1
                job["stored"] = True
        failed = [rid for job in state["jobs"] for rid in job.get("failed", [])]
        retry = state.setdefault("retry", {"records": [], "failed": [], "stored": False})
        if failed and self.options.on_demand_retry and self.on_demand is not None and not retry["stored"]:
            if "planned" not in retry:  # chosen once and saved: a resume asks for the same records
                retry["records"], retry["planned"] = self._still_fitting(state, failed), True
                self._checkpoint(state, summary, rejected)
            again = retry["records"]
            if again:
                self.log(f"{len(again)} record(s) failed in batch: asked again on demand")
                outputs = self._on_demand_outputs(state, again, "retry")
                retry["failed"] = self._store(state, again, outputs, summary, rejected, batch=False)
            retry["stored"] = True
        # Failed for good: what the retry did not answer (or every failure, without one), and on demand's.
        final = (
            set(retry["failed"]) | (set(failed) - set(retry["records"])) | set(on_demand.get("failed", []))
        )
        summary.failed_records = len(final)
        self._checkpoint(state, summary, rejected)

    def _still_fitting(self, state: dict[str, Any], record_ids_: list[str]) -> list[str]:
        """The records whose document is still recorded as it was planned: answers for one recorded again
        during the run (a sync) would not fit it, so none of its records is worth asking again."""
        stale = {state["records"][rid]["document"] for rid in state.get("stale", [])}

        def fits(key: str) -> bool:
            document = self._read(key)
            return document is not None and _spans_hash(document) == state["documents"][key].get("spans")

        keys = sorted({state["records"][rid]["document"] for rid in record_ids_} - stale)
        fitting = {key: ok for key, ok in in_order(fits, keys)}
        return [rid for rid in record_ids_ if fitting.get(state["records"][rid]["document"], False)]

    def _checkpoint(self, state: dict[str, Any], summary: Summary, rejected: Counter[str]) -> None:
        summary.answers_rejected = dict(rejected)
        state["summary"] = asdict(summary)
        self._save(state)

    def _on_demand_outputs(
        self, state: dict[str, Any], record_ids_: list[str], name: str
    ) -> dict[str, Output]:
        """The records' answers on demand, kept in S3 (as job output files, ``ON_DEMAND_SLICE`` records
        each) as they come: a resume reads back the slices answered and pays only for the others."""
        prefix = f"{self.options.batch_prefix}{state['run']}/output/{name}-"
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
                outputs.update(_parse_outputs(kept.split(b"\n")))
        if not missing or self.on_demand is None:
            return outputs
        planned = self._planned(state, {rid for _, ids in missing for rid in ids})
        for key, ids in missing:
            answered = self.on_demand([planned[rid] for rid in ids if rid in planned])
            lines = [json.dumps(_as_output_line(output), ensure_ascii=True) for output in answered.values()]
            self._put(key, ("\n".join(lines) + "\n").encode("ascii"))
            outputs.update(answered)
        return outputs

    def _outputs(self, described: dict[str, Any]) -> dict[str, Output]:
        """Every output record of a job, by record id (the first valid one where one is repeated)."""
        job_id = str(described["jobArn"]).rsplit("/", 1)[-1]
        uri = described["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"].rstrip("/") + f"/{job_id}/"
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        found: dict[str, Output] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                if not item["Key"].endswith(".jsonl.out"):
                    continue
                # Streamed: an output file holds its records' inputs too, as large as the input file.
                with closing(self.s3.get_object(Bucket=bucket, Key=item["Key"])["Body"]) as body:
                    _parse_outputs(_lines(body), into=found)
        return found

    def _planned(self, state: dict[str, Any], wanted: set[str]) -> dict[str, Planned]:
        """The records' requests, read back (once) from the inputs written at planning."""
        wanted = set(wanted)
        # Only the input files that hold some of them (a job's input can be a gigabyte).
        inputs = [
            step["input"] for step in (state["on_demand"], *state["jobs"]) if wanted & set(step["records"])
        ]
        planned: dict[str, Planned] = {}
        for key in inputs:
            if not wanted:
                break
            response = self._get_object(key)
            if response is None:
                continue
            with closing(response["Body"]) as body:
                for line in _lines(body):  # streamed: a job's input can be a gigabyte
                    if not line.strip():
                        continue
                    rid = json.loads(line).get("recordId")
                    if rid not in wanted:
                        continue
                    wanted.discard(rid)
                    info = state["records"][rid]
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
        state: dict[str, Any],
        record_ids_: list[str],
        outputs: dict[str, Output],
        summary: Summary,
        rejected: Counter[str],
        *,
        batch: bool,
    ) -> list[str]:
        """Contexts from ``outputs`` merged into the remembered contexts of their documents; the records that
        failed (or are missing), returned. Pending records are left to ``_settle``."""
        failed: list[str] = []
        by_document: dict[str, list[tuple[str, Output | None]]] = {}
        for rid in record_ids_:
            by_document.setdefault(state["records"][rid]["document"], []).append((rid, outputs.get(rid)))

        def store_one(item: tuple[str, list[tuple[str, Output | None]]]) -> _Stored | None:
            """One document's accepted contexts, remembered (None: the answers no longer fit it)."""
            key, results = item
            document = self._read(key)
            if document is None or _spans_hash(document) != state["documents"].get(key, {}).get("spans"):
                return None
            units = {number: normalize(text) for number, _, text in unit_texts(document)}
            stored = _Stored(document.source)
            for rid, output in results:
                if output is None or output.error:
                    continue
                planned = state["records"][rid]
                accepted: Accepted = accept(document, units[planned["unit"]], planned["chunks"], output)
                stored.contexts.update(accepted.contexts)
                stored.rejected.update(accepted.rejected)
            if stored.contexts:
                self._remember(document, stored.contexts)
            return stored

        for (key, results), stored in in_order(store_one, list(by_document.items())):
            if stored is None:
                # Deleted meanwhile, or recorded again with other chunks (a sync during the run): these
                # answers no longer fit it. Counted as failed, never asked again (stale); the new record's
                # chunks stay pending for the next run.
                failed.extend(rid for rid, _ in results)
                state.setdefault("stale", []).extend(rid for rid, _ in results)
                continue
            for rid, output in results:
                if output is None or output.error:
                    failed.append(rid)
                    continue
                summary.input_tokens += output.input_tokens
                summary.output_tokens += output.output_tokens
                model = state["records"][rid]["model"]
                self._charge(summary, model, output.input_tokens, output.output_tokens, batch=batch)
            rejected.update(stored.rejected)
            if stored.contexts:
                summary.contexts_stored += len(stored.contexts)
                state["touched"][key] = stored.source
        return failed

    def _settle(self, state: dict[str, Any]) -> dict[str, int]:
        """Each pending record of this run keeps only the chunks still without a remembered context (deleted
        when none is left): read from the remembered contexts themselves, so it holds however the run went.
        Written or deleted only over the version read (S3 conditional requests): a record the function
        wrote again meanwhile (a sync) stands as it is. Returns, per record of this run, its chunks still
        without a remembered context."""
        still: dict[str, int] = {}

        def settle_one(key: str) -> int:
            got = self._get_versioned(key)
            document = _parse_pending(got[0]) if got is not None else None
            if got is None or document is None:
                return 0
            etag = got[1]
            wanted = self._still_wanted(document)
            try:
                if not wanted:
                    self._drop(key, if_match=etag)
                elif wanted != document.pending:
                    self._write(key, document.model_copy(update={"pending": wanted}), if_match=etag)
            except ClientError as exc:  # recorded again since it was read: the newer record stands as it is
                if exc.response.get("Error", {}).get("Code") not in CHANGED_MEANWHILE:
                    raise
            return len(wanted)

        for key, left in in_order(settle_one, list(state["documents"])):
            if left:
                still[key] = left
        return still

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

    def _resume(self) -> dict[str, Any] | None:
        if self.options.dry_run:
            return None
        try:
            pointer = json.loads(
                self.s3.get_object(Bucket=self.options.bucket, Key=self.options.batch_prefix + CURRENT)[
                    "Body"
                ].read()
            )
            body = self.s3.get_object(
                Bucket=self.options.bucket, Key=f"{self.options.batch_prefix}{pointer['run']}/state.json"
            )["Body"].read()
        except ClientError:
            return None
        state = json.loads(body)
        return state if state.get("phase") != "done" else None

    def _save(self, state: dict[str, Any]) -> None:
        if self.options.dry_run:
            return
        bucket, prefix = self.options.bucket, self.options.batch_prefix
        self.s3.put_object(
            Bucket=bucket, Key=f"{prefix}{state['run']}/state.json", Body=json.dumps(state).encode("utf-8")
        )
        if state["phase"] != "done":
            self.s3.put_object(
                Bucket=bucket, Key=prefix + CURRENT, Body=json.dumps({"run": state["run"]}).encode()
            )


def _parse_pending(body: bytes) -> PendingDocument | None:
    try:
        return PendingDocument.parse(body)
    except (ValueError, TypeError):
        return None


def _spans_hash(document: PendingDocument) -> str:
    return hashlib.sha256(json.dumps(document.spans).encode()).hexdigest()[:16]


def _lines(body: Any, piece_bytes: int = 1 << 20) -> Iterator[bytes]:
    """The lines of a streamed S3 body, without their newline, read a megabyte at a time. JSONL lines end at
    newlines only: a U+2028 in a text is text (``str.splitlines`` would cut there)."""
    rest = b""
    for piece in body.iter_chunks(piece_bytes):
        lines = (rest + piece).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def _parse_outputs(lines: Iterable[bytes], into: dict[str, Output] | None = None) -> dict[str, Output]:
    """Output records by id from JSONL lines (split at newlines only: a U+2028 in a context is text; added
    to ``into``), the first valid one where an id repeats."""
    found: dict[str, Output] = {} if into is None else into
    for raw in lines:
        if not raw.strip():
            continue
        output = parse_output(raw.decode("utf-8", "replace"))
        if output is not None and (
            output.record_id not in found or (found[output.record_id].error and not output.error)
        ):
            found[output.record_id] = output
    return found


def _as_output_line(output: Output) -> dict[str, Any]:
    """An on-demand answer in a batch output line's shape, so one reader reads both."""
    if output.error:
        return {"recordId": output.record_id, "error": {"errorCode": 0, "errorMessage": output.error}}
    return {
        "recordId": output.record_id,
        "modelOutput": {
            "content": [{"type": "text", "text": output.text}],
            "stop_reason": output.stop_reason,
            "usage": {"input_tokens": output.input_tokens, "output_tokens": output.output_tokens},
        },
    }
