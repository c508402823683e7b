"""``ckb contextualize --status``: where the deferred loop stands, read from its single source of truth (the
claim and the run's state object in the intermediate bucket), and, with ``autoContextualize``, the stack's
workflow executions; ``ckb contextualize --workflow`` starts one.

Read-only: nothing is claimed, nothing written. The run shown is the one the claim names (under way), or,
when none is, the latest run's state (runs are named by the time they were planned, so they sort).
"""

from __future__ import annotations

import json
from typing import Any

from contextual_kb.deferred.claim import Claim
from contextual_kb.deferred.options import CURRENT
from contextual_kb.deferred.state import RunState, state_key

BATCH_PREFIX = "contextual-kb/batch/"
SHOWN_EXECUTIONS = 10


def run_status(s3: Any, bucket: str, batch_prefix: str = BATCH_PREFIX) -> dict[str, Any]:
    """The run under way (or the latest), who holds it, its phase, jobs and figures so far."""
    claim = Claim(s3, bucket, batch_prefix + CURRENT)
    seen = claim.peek()
    run, holder, age = "", "", None
    if seen is not None:
        body, _, age = seen
        run, owner = str(body["run"]), str(body.get("owner", ""))
        holder = (
            "none (resumed by the next look or ckb contextualize)"
            if not owner
            else "the stack's workflow"
            if owner.startswith("workflow:")
            else "a ckb contextualize process"
        )
    run = run or _latest_run(s3, bucket, batch_prefix)
    out: dict[str, Any] = {"run": run, "under_way": seen is not None, "held_by": holder}
    if age is not None:
        out["claim_age_seconds"] = round(max(age, 0.0), 1)
    if not run:
        return {**out, "phase": "none"}
    state = _state(s3, bucket, state_key(batch_prefix, run))
    if state is None:
        return {**out, "phase": "planning"}  # claimed, no plan saved yet
    summary = state.get("summary", {})
    jobs = state.get("jobs", [])
    floor = float(summary.get("floor_usd", 0.0))
    cost = float(summary.get("cost_usd", 0.0))
    # A sharded run's records are its shards' (its summary counts them); its jobs are stored by the shards,
    # all once the run is done.
    sharded = bool(state.get("sharded"))
    done = state.get("phase") == "done"
    return {
        **out,
        "phase": state.get("phase", ""),
        "shards": int(state.get("shards", 0)),
        "pending": int(summary.get("pending_before", 0)),
        "documents": int(summary.get("documents", 0)),
        "records": int(summary.get("records", 0)) if sharded else len(state.get("records", {})),
        "jobs": [
            {
                "name": j["name"],
                "status": j.get("status") or "planned",
                "records": int(j.get("count", len(j.get("records", [])))),
            }
            for j in jobs
        ],
        "jobs_submitted": sum(1 for j in jobs if j.get("arn")),
        "jobs_stored": sum(1 for j in jobs if j.get("stored") or (sharded and done and j.get("arn"))),
        "contexts_stored": int(summary.get("contexts_stored", 0)),
        "failed_records": int(summary.get("failed_records", 0)),
        "reingested_documents": int(summary.get("reingested_documents", 0)),
        "cost_usd": round(cost, 6),
        "floor_usd": round(floor, 6),
        "cost_vs_floor": round(cost / floor, 3) if floor else None,
    }


def workflow_runs(states: Any, machine_arn: str, limit: int = SHOWN_EXECUTIONS) -> list[dict[str, Any]]:
    """The workflow's latest executions: when, how each ended, and what its look found."""
    listed = states.list_executions(stateMachineArn=machine_arn, maxResults=limit).get("executions", [])
    out = []
    for execution in listed:
        entry: dict[str, Any] = {
            "name": execution["name"],
            "status": execution["status"],
            "started": _iso(execution.get("startDate")),
            "stopped": _iso(execution.get("stopDate")),
            "outcome": "",
            "run": "",
        }
        if execution["status"] == "SUCCEEDED":
            described = states.describe_execution(executionArn=execution["executionArn"])
            try:
                result = json.loads(described.get("output") or "{}")
            except ValueError:
                result = {}
            entry["outcome"] = str(result.get("outcome", ""))
            entry["run"] = str(result.get("run", ""))
        out.append(entry)
    return out


def start_workflow(states: Any, machine_arn: str) -> str:
    """One look that may plan a new run (``mode: start``); the execution's ARN."""
    started = states.start_execution(stateMachineArn=machine_arn, input=json.dumps({"mode": "start"}))
    return str(started["executionArn"])


def _latest_run(s3: Any, bucket: str, batch_prefix: str) -> str:
    runs: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=batch_prefix, Delimiter="/"
    ):
        runs += [p["Prefix"][len(batch_prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
    return max(runs, default="")


def _state(s3: Any, bucket: str, key: str) -> RunState | dict[str, Any] | None:
    """The run's state, as the run reads it (``state.RunState``); one it would refuse says so."""
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
            return None
        raise
    try:
        return RunState.from_json(body)
    except (ValueError, TypeError):
        return {"phase": "unreadable state"}


def _iso(value: Any) -> str:
    return value.isoformat(timespec="seconds") if hasattr(value, "isoformat") else ""
