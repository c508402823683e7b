"""The deferred loop as the stack's workflow runs it (``-c autoContextualize=...``,
``contextual_kb/cdk/deferred_workflow.py``): the Lambda step of an AWS Step Functions execution, running ``ckb
contextualize``'s own phases (``sequence.py``), never a copy of them: ``look`` is the workflow's sequencer
of them, as ``sequence.run`` is the CLI's.

One execution is one look: the run the claim names is resumed (or, started with ``mode: start``, a new one
planned when none is under way), its jobs submitted, looked at once, and those ended stored; once every job
is stored, the run is settled, its documents marked and one ingestion job started. A run whose jobs still
run is left unfinished, its claim released: the next look, by the workflow (on a job's end event, or its
schedule, since the events are best effort) or by ``ckb contextualize``, resumes it from the S3 state
object. So the CLI and the workflow finish each other's runs, and the claim keeps two from running at once:
a step that finds the claim held by a live process answers ``busy`` and does nothing.

The claim's owner is the execution's name: a step retried by Step Functions after a timeout (its process
gone without releasing) takes the claim back at once instead of waiting for the lease to lapse.

Every run the workflow plans is sharded (``shards.py``): a look that needs its shards planned or stored
ends ``plan`` or ``store`` with the manifest's S3 key, keeping the claim; the state machine's Distributed
Map then runs ``shard`` on each (an event with ``action``), and a look again goes on.

Outcomes (the state machine's Choice reads them): ``plan`` and ``store`` (a Map over the run's shards),
``done`` (a run finished), ``waiting`` (jobs still run),
``busy`` (another process holds the run), ``idle`` (nothing under way, or nothing pending), ``ingesting``
(an ingestion job runs: it may record pending documents while they are planned; the next look plans).
Errors are raised: Step Functions' retries and catches carry the failure policy.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from contextual_kb.deferred import sequence
from contextual_kb.deferred import shards as sharded
from contextual_kb.deferred.claim import BusyError, TakenOverError
from contextual_kb.deferred.contextualize import NOTHING_PENDING, Contextualizer, Options, Reingest, Summary
from contextual_kb.deferred.records import Limits
from contextual_kb.deferred.reingest import Reingested, reingest_s3
from contextual_kb.deferred.shards import PLAN, SHARD_DOCUMENTS, STORE

NAMESPACE = "ContextualKB"
SERVICE = "contextual-kb-deferred"
# An ingestion job already running when the documents are marked is waited for this long (Ingestion.start),
# within the step's 15 minutes; past it the step fails, and its retry marks and starts again.
INGESTION_WAIT_SECONDS = 600.0
MODES = ("start", "resume")
OWNER_PREFIX = "workflow:"  # the claim's owner is the execution: "workflow:<execution name>"
# A Map's child: one shard of a run, planned or stored (``shards.py``).
ACTIONS = {"plan-shard": PLAN, "store-shard": STORE}
TAKEN_OVER = "taken-over"  # a shard's outcome when its run was taken over from its execution


def options_from_environment(environ: dict[str, str] | None = None) -> Options:
    """The step's settings: the function's environment, set by the stack
    (``contextual_kb/cdk/deferred_workflow.py``)."""
    env = dict(os.environ if environ is None else environ)
    given = {
        attribute: int(env[name])
        for name, attribute in (
            ("CKB_BATCH_MIN_RECORDS", "min_records"),
            ("CKB_BATCH_MAX_RECORDS", "max_job_records"),
            ("CKB_BATCH_MAX_FILE_RECORDS", "max_file_records"),
            ("CKB_BATCH_MAX_FILE_BYTES", "max_file_bytes"),
            ("CKB_BATCH_MAX_JOB_BYTES", "max_job_bytes"),
        )
        if env.get(name)
    }
    limits = Limits(**given)
    return Options(
        bucket=env["INTERMEDIATE_BUCKET"],
        role_arn=env["BATCH_ROLE_ARN"],
        group_size=int(env.get("GROUP_SIZE") or 40),
        limits=limits,
        batch_prices=env.get("BATCH_PRICES", ""),
        model_prices=env.get("MODEL_PRICES", ""),
        on_demand_retry=env.get("ON_DEMAND_RETRY", "") == "true",
        follow=False,  # Step Functions waits, not the function
        # Every run the workflow plans is sharded; its shards run in the state machine's Distributed Maps.
        shard_documents=int(env.get("CKB_SHARD_DOCUMENTS") or SHARD_DOCUMENTS),
        fan_out=True,
    )


def step(
    event: dict[str, Any],
    contextualizer: Contextualizer,
    *,
    reingest: Reingest | None,
    ingestion_running: Callable[[], str] = lambda: "",
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """One look at the deferred loop (see the module's docstring). ``ingestion_running``: the id of an
    ingestion job running on the data source, or ""."""
    mode = str(event.get("mode") or "resume")
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    unfinished = sequence.unfinished(contextualizer)
    if unfinished is None and mode == "resume":
        return _result("idle", Summary(notes=[sequence.NO_RUN]))
    if unfinished is None:
        job = ingestion_running()
        if job:
            return _result(
                "ingesting",
                Summary(notes=[f"ingestion job {job} is running: planned at the next look, once it ends"]),
            )
    try:
        summary = look(contextualizer, reingest, plan=mode == "start")
    except BusyError as exc:
        return _result("busy", Summary(notes=[str(exc)]))
    if summary.fan_out:  # the state machine's Distributed Map runs the shards, then looks again
        result = _result(summary.fan_out, summary)
        result["bucket"] = contextualizer.options.bucket
        result["manifest"] = sharded.manifest_key(summary.run, contextualizer)
        # The claim's owner, for the Map's children to join: in the look's own result, so the Map's item
        # selector reads it from its input ($), not from a context object ($$), of which AWS's pages do not
        # say whose execution it names inside a Distributed Map.
        result["execution"] = contextualizer.claim.owner.removeprefix(OWNER_PREFIX)
        result["run_age_seconds"] = 0.0
        return result
    if summary.jobs_running:
        outcome = "waiting"
    elif not summary.run or NOTHING_PENDING in summary.notes:
        outcome = "idle"
    else:
        outcome = "done"
    result = _result(outcome, summary)
    started = (unfinished.run if unfinished is not None else "") or summary.run
    result["run_age_seconds"] = run_age_seconds(started, clock) if outcome == "waiting" else 0.0
    return result


def look(work: Contextualizer, reingest: Reingest | None, *, plan: bool) -> Summary:
    """The workflow's sequencer: under the claim, the run the claim names begun (or, with ``plan``, a new
    one planned when none is under way), then its phases one after the other (``sequence.advance``) until
    one stops: its jobs still run (Step Functions waits, not the function: ``Options.follow`` false), its
    shards are to be planned or stored by a Map (``Options.fan_out``), or the run is done."""
    if not plan and sequence.unfinished(work) is None:  # finished since the step looked
        return Summary(notes=[sequence.NO_RUN])
    return sequence.claimed(work, lambda run: sequence.until_stopped(work, run, reingest))


def shard(
    event: dict[str, Any], contextualizer: Contextualizer, *, reingest: Reingest | None
) -> dict[str, Any]:
    """One shard of a run, as a Distributed Map's child runs it: ``{"action": "plan-shard" | "store-shard",
    "run", "shard"}``. It works under the claim of the execution that fanned out (``Claim.join``: it stops
    when the run was taken over), and is idempotent (a retry, or a shard already done, repeats nothing).
    Returns a few figures (the shard's own objects in S3 hold the rest: Step Functions' 256 KB limit) and
    its outcome, ``done`` or ``taken-over`` (the run was taken over from this execution, by a ckb
    contextualize or a later execution, or finished: no error, so no retry and no page); a claim on the same
    run that another execution holds without having taken it from this one raises."""
    action = str(event.get("action", ""))
    if action not in ACTIONS:
        raise ValueError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    run, number = str(event["run"]), int(event["shard"])
    try:
        contextualizer.claim.join(run)
        if ACTIONS[action] == PLAN:
            done = sharded.plan_shard(run, number, contextualizer)
        else:
            done = sharded.store_shard(run, number, reingest, contextualizer)
    except TakenOverError as exc:
        if (
            exc.run == run
            and exc.holder.startswith(OWNER_PREFIX)
            and exc.taken_from != contextualizer.claim.owner
        ):
            # The run held by an execution that did not take it from this one: the Map given the wrong
            # owner (or a chain of takeovers). Raised: retried, then the dead end, which pages.
            raise
        # Taken over once this execution's claim lapsed (by a ckb contextualize, or by a later execution of
        # the workflow, which runs the run's shards itself), released, finished or replaced by a new run:
        # nothing is wrong and the run goes on elsewhere. What this shard wrote before is idempotent. It
        # ends quietly; the look after the Map answers busy, idle, or resumes a run left resumable.
        contextualizer.log(
            f"shard {number} of run {run} stopped, the run is no longer this execution's: {exc}"
        )
        return {"action": action, "run": run, "shard": number, "records": 0, "contexts_stored": 0,
                "outcome": TAKEN_OVER}  # fmt: skip
    figures = done["summary"]
    return {
        "action": action,
        "run": run,
        "shard": number,
        "records": figures.get("records", 0),
        "contexts_stored": figures.get("contexts_stored", 0),
        "outcome": "done",
    }


def run_age_seconds(run: str, clock: Callable[[], float] = time.time) -> float:
    """How long ago run ``run`` was planned: its name starts with its UTC time (``YYYYmmddHHMMSS``), whoever
    planned it (the workflow or ``ckb contextualize``)."""
    try:
        planned = datetime.strptime(run[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return 0.0
    return max(0.0, clock() - planned.timestamp())


def metrics_line(result: dict[str, Any]) -> str:
    """The step's figures as one CloudWatch embedded-metric-format line: the dashboard and alarms read them
    (a run's age while it waits; failed records, contexts stored and cost when a run ends)."""
    summary = result["summary"]
    values = {"RunAgeSeconds": float(result.get("run_age_seconds", 0.0))}
    if result["outcome"] == "done":
        values.update(
            {
                "FailedRecords": float(summary.get("failed_records", 0)),
                "ContextsStored": float(summary.get("contexts_stored", 0)),
                "CostUsd": float(summary.get("cost_usd", 0.0)),
                "FloorUsd": float(summary.get("floor_usd", 0.0)),
                # What a run cost above its floor (0 when at or under it): the alarm's own figure.
                "CostAboveFloorUsd": max(
                    0.0, float(summary.get("cost_usd", 0.0)) - float(summary.get("floor_usd", 0.0))
                ),
                "AwaitingReingestion": float(summary.get("awaiting_reingestion", 0)),
            }
        )
    units = {"RunAgeSeconds": "Seconds"}
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(time.time() * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": NAMESPACE,
                        "Dimensions": [["service"]],
                        "Metrics": [{"Name": name, "Unit": units.get(name, "None")} for name in values],
                    }
                ],
            },
            "service": SERVICE,
            "outcome": result["outcome"],
            "run": summary.get("run", ""),
            **values,
        }
    )


def _result(outcome: str, summary: Summary) -> dict[str, Any]:
    # Small: Step Functions' payload limit is 256 KB, and a summary is a few hundred bytes (not the records).
    return {
        "outcome": outcome,
        "run": summary.run,
        "jobs_running": summary.jobs_running,
        "summary": summary.as_dict(),
    }


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry point: AWS clients from the function's environment and role."""
    from contextual_kb.deferred import services
    from contextual_kb.deferred.concurrency import S3_CONNECTIONS
    from contextual_kb.query import aws_clients
    from contextual_kb.query.ingestion import Ingestion
    from contextual_kb.runtime.context.claude.client import ClaudeClient

    region = os.environ.get("AWS_REGION", "")
    s3 = aws_clients.client("s3", region, connections=S3_CONNECTIONS)
    ingestion = Ingestion(os.environ["KNOWLEDGE_BASE_ID"], os.environ["DATA_SOURCE_ID"], region)
    execution = str(event.get("execution") or getattr(context, "aws_request_id", ""))

    def start_job() -> tuple[str, int | None]:
        job = ingestion.start(fresh=True, wait_seconds=INGESTION_WAIT_SECONDS, notify=print)
        return f"{job.job_id} {job.status}", None  # not followed: the ingestion runs on its own

    def reingest(sources: list[str]) -> Reingested:  # marks only: one job is started once all are marked
        return reingest_s3(s3, sources, None, print)

    contextualizer = Contextualizer(
        s3,
        aws_clients.client("bedrock", region),
        options_from_environment(),
        source_state=services.source_state(s3),
        on_demand=services.on_demand(
            ClaudeClient(region=region, timeout_seconds=120, max_retries=4, max_connections=8)
        ),
        log=print,
        owner=f"{OWNER_PREFIX}{execution}",
        start_ingestion=start_job,
    )
    if event.get("action"):  # a Distributed Map's child: one shard
        return shard(event, contextualizer, reingest=reingest)

    def running() -> str:
        job = ingestion.running()
        return job.job_id if job is not None else ""

    result = step(event, contextualizer, reingest=reingest, ingestion_running=running)
    print(metrics_line(result))
    return result
