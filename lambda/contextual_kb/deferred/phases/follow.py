"""Follow: the run's jobs looked at until they end (or once, when not followed: ``Options.follow``), each
ended job's output files read, every line charged, and its answers stored (``store.py``); the on-demand
records asked and stored first, and the records that failed in batch asked again on demand
(``Options.on_demand_retry``). Checkpointed a step at a time: a resume repeats at most the step it stopped
in, whose writes are idempotent."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict
from typing import Any, Protocol

from contextual_kb.deferred.batch_files import ENDED, USABLE, lines, parse_outputs
from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.options import Summary
from contextual_kb.deferred.phases.store import spans_hash
from contextual_kb.deferred.phases.work import AnswerWork, Callbacks, Clients, Costs, Objects
from contextual_kb.deferred.records import Output
from contextual_kb.deferred.state import RunState


class Following(Clients, Callbacks, Objects, Costs, AnswerWork, Protocol):
    """Following's services."""


def follow(state: RunState, work: Following) -> int:
    """Each step's outputs stored, then the state saved with what it stored and what failed: a resume
    repeats at most the step it stopped in, whose writes are idempotent (remembered contexts merged by
    place; pending records settled only at the end, from the remembered contexts themselves), and
    whose on-demand answers were kept in S3 a slice at a time (a resume asks again at most the slice
    it stopped in). Returns the jobs still running when not followed to the end (``Options.follow``),
    nothing after them done yet; 0 once every job is stored."""
    summary = Summary(**state.summary)
    rejected: Counter[str] = Counter(summary.answers_rejected)
    on_demand = state.on_demand
    if on_demand["records"] and not on_demand.get("stored"):
        outputs = work._on_demand_outputs(
            state, on_demand["records"], "on-demand", work._charge_line(state, summary, batch=False)
        )
        on_demand["failed"] = work._store(state, on_demand["records"], outputs, summary, rejected)
        on_demand["stored"] = True
        checkpoint(state, summary, rejected, work)
    pending_jobs = [job for job in state.jobs if job["arn"] and not job["stored"]]
    while pending_jobs:
        for job in pending_jobs:
            follow_job(state, job, summary, rejected, work)
        pending_jobs = [job for job in state.jobs if job["arn"] and not job["stored"]]
        if pending_jobs and not work.options.follow:
            return len(pending_jobs)
        if pending_jobs:
            work.claim.renew()
            work.sleep(work.options.poll_seconds)
    for job in state.jobs:  # never created: their chunks stay pending, counted
        if job.get("status") == "NotCreated" and not job["stored"]:
            job["failed"] = list(job["records"])
            summary.jobs_failed += 1
            job["stored"] = True
    failed = [rid for job in state.jobs for rid in job.get("failed", [])]
    if state.retry is None:
        state.retry = {"records": [], "failed": [], "stored": False}
    retry = state.retry
    if failed and work.options.on_demand_retry and work.on_demand is not None and not retry["stored"]:
        if "planned" not in retry:  # chosen once and saved: a resume asks for the same records
            retry["records"], retry["planned"] = still_fitting(state, failed, work), True
            checkpoint(state, summary, rejected, work)
        again = retry["records"]
        if again:
            work.log(f"{len(again)} record(s) failed in batch: asked again on demand")
            outputs = work._on_demand_outputs(
                state, again, "retry", work._charge_line(state, summary, batch=False)
            )
            retry["failed"] = work._store(state, again, outputs, summary, rejected)
        retry["stored"] = True
    # Failed for good: what the retry did not answer (or every failure, without one), and on demand's.
    final = set(retry["failed"]) | (set(failed) - set(retry["records"])) | set(on_demand.get("failed", []))
    summary.failed_records = len(final)
    checkpoint(state, summary, rejected, work)
    return 0


def follow_job(
    state: RunState, job: dict[str, Any], summary: Summary, rejected: Counter[str], work: Following
) -> None:
    """One look at a job; once it has ended, its outputs charged (every line) and stored."""
    described = work.bedrock.get_model_invocation_job(jobIdentifier=job["arn"])
    job["status"] = described["status"]
    work.progress(job["name"], int(described.get("processedRecordCount", 0)), len(job["records"]))
    if job["status"] not in ENDED:
        return
    if job["status"] in USABLE:
        model = state.records[job["records"][0]]["model"]
        outputs = job_outputs(described, work._charge_line(state, summary, batch=True, model=model), work)
    else:
        job["message"] = str(described.get("message", ""))
        summary.jobs_failed += 1
        why = job["message"] or "no reason given"
        work.log(f"job {job['name']} {job['status']}: {why}; its chunks stay pending")
        outputs = {}
    job["failed"] = work._store(state, job["records"], outputs, summary, rejected)
    job["stored"] = True
    checkpoint(state, summary, rejected, work)


def still_fitting(state: RunState, record_ids_: list[str], work: Following) -> list[str]:
    """The records whose document is still recorded as it was planned: answers for one recorded again
    during the run (a sync) would not fit it, so none of its records is worth asking again."""
    stale = {state.records[rid]["document"] for rid in state.stale or []}

    def fits(key: str) -> bool:
        document = work._read(key)
        return document is not None and spans_hash(document) == state.documents[key].get("spans")

    keys = sorted({state.records[rid]["document"] for rid in record_ids_} - stale)
    fitting = {key: ok for key, ok in in_order(fits, keys)}
    return [rid for rid in record_ids_ if fitting.get(state.records[rid]["document"], False)]


def checkpoint(state: RunState, summary: Summary, rejected: Counter[str], work: Following) -> None:
    summary.answers_rejected = dict(rejected)
    state.summary = asdict(summary)
    work._save(state)


def job_outputs(
    described: dict[str, Any], charge: Callable[[Output], None], work: Following
) -> dict[str, Output]:
    """Every output record of a job, by record id (the first valid one where one is repeated); every
    line charged as it is read."""
    job_id = str(described["jobArn"]).rsplit("/", 1)[-1]
    uri = described["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"].rstrip("/") + f"/{job_id}/"
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    found: dict[str, Output] = {}
    for page in work.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if not item["Key"].endswith(".jsonl.out"):
                continue
            # Streamed: an output file holds its records' inputs too, as large as the input file.
            with closing(work.s3.get_object(Bucket=bucket, Key=item["Key"])["Body"]) as body:
                parse_outputs(lines(body), into=found, charge=charge)
    return found
