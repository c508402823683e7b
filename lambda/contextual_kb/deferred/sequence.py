"""The run's order: each phase of a run (in one piece, or in shards) as one step over its ``RunState``, and
what both sequencers share around them: the claim taken and released, the run begun (resumed, planned or
listed), the steps done until one stops. The two sequencers are ``run`` (``ckb contextualize``, and the
offline run: the phases to the end in this process) and ``workflow.look`` (one look of the Step Functions
workflow: the phases until one waits for its jobs or fans out to the shards).

A step does its phase (``phases/``, ``shards.py``; through the services where a test replaces one:
``work._settle``, not ``settle.settle``), moves the state to the next phase and saves it; it returns None
when the run goes on, or the run's ``Summary`` when it stops there (jobs still running and not followed,
shards to run elsewhere, or the run done). Each can be run alone on a state in its phase (``advance``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, replace
from datetime import UTC, datetime

from contextual_kb.deferred import shards as sharded
from contextual_kb.deferred.claim import LEASE_SECONDS
from contextual_kb.deferred.options import NOTHING_PENDING, Reingest, Summary
from contextual_kb.deferred.phases.reingest import finish
from contextual_kb.deferred.phases.work import RunWork
from contextual_kb.deferred.state import RunState

NO_RUN = "no run under way: nothing to resume"


Step = Callable[[RunState, RunWork, Reingest | None], Summary | None]


# --- the sequencers' common parts ---
def new_run() -> str:
    # UTC: the name says when it was planned wherever it was (the workflow's stuck alarm reads it).
    return datetime.now(UTC).strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:6]


def unfinished(work: RunWork) -> RunState | None:
    """The state of the run the claim names, when it is unfinished; None when no run is under way."""
    seen = work.claim.peek()
    state = work._load(seen[0]["run"]) if seen is not None else None
    return state if state is not None and state.phase != "done" else None


def claimed(work: RunWork, body: Callable[[str], Summary]) -> Summary:
    """``body`` over the run the claim gives (``claim.py``: a new one, or one to resume), so that two at once
    never plan the same pending chunks. Not followed to the end, the claim is released (the next look, by
    any process, resumes it); stopped for its shards to run elsewhere, kept for them to join
    (``Claim.join``); stopped on an error or an interrupt, released: the next run resumes at once (a release
    that fails hides nothing: the claim then lapses, and the error raised is the run's own)."""
    run = work.claim.take(new_run())
    try:
        summary = body(run)
        if summary.jobs_running and not summary.fan_out:
            work.claim.release()
        return summary
    except BaseException:
        with suppress(Exception):
            work.claim.release()
        raise


def begin(work: RunWork, run: str) -> RunState | Summary:
    """Run ``run``'s state to go on from; a new run's when it has none or is done: listed when runs are
    sharded, planned otherwise (its summary, when nothing is pending: the run is then over)."""
    state = work._load(run)
    if state is not None and state.phase != "done":
        if not state.sharded:
            work.log(f"resuming run {state.run} ({state.phase})")
        return state
    # A claim whose run never saved a plan (stopped while planning) or finished: a run of its own (what
    # that one may have uploaded is never read).
    run = new_run()
    work.claim.renew(run=run)
    if work.options.shard_documents:
        state = sharded.new_state(run)
        work._save(state)
        return state
    state = work._plan(run)
    if not state.records and not state.touched:
        summary = Summary(**state.summary)
        summary.notes.append(NOTHING_PENDING)
        work.claim.release(finished=True)
        return summary
    if not state.records:  # only documents awaiting re-ingestion: nothing to ask
        state.phase = "stored"
    work._save(state)
    return state


def advance(state: RunState, work: RunWork, reingest: Reingest | None) -> Summary | None:
    """The phase ``state`` is in, done (see the module's docstring)."""
    steps = SHARDED if state.sharded else ONE_PIECE
    return steps[state.phase](state, work, reingest)


def until_stopped(work: RunWork, run: str, reingest: Reingest | None) -> Summary:
    """Run ``run`` begun, then its phases one after the other until one stops."""
    state = begin(work, run)
    while isinstance(state, RunState):
        state = advance(state, work, reingest) or state
    return state


# --- the CLI's sequencer ---
def run(work: RunWork, reingest: Reingest | None = None, *, plan: bool = True) -> Summary:
    """``ckb contextualize``: the run to its end (claimed: ``claimed``); an unfinished one whose process
    stopped is resumed. A dry run claims nothing and writes nothing. ``plan`` false: only an unfinished run
    is resumed, none planned."""
    if work.options.dry_run:
        return dry_run(work)
    if not plan and unfinished(work) is None:
        return Summary(notes=[NO_RUN])
    return claimed(work, lambda run: until_stopped(work, run, reingest))


def dry_run(work: RunWork) -> Summary:
    """The plan's quote; an unfinished run's documents are left out of it (resuming it pays for them), and
    said so."""
    seen = work.claim.peek()
    state = work._load(seen[0]["run"]) if seen is not None else None
    live = seen is not None and bool(seen[0].get("owner")) and seen[2] < LEASE_SECONDS
    if state is None or state.phase == "done":
        summary = Summary(**work._plan(new_run()).summary)
        if live and state is None:
            summary.notes.append(
                "another ckb contextualize is planning a run (a confirmation may be waiting): what it "
                "plans is quoted here too"
            )
        return summary
    held = " (under way in another ckb contextualize)" if live else ""
    documents, records = set(state.documents), len(state.records)
    if state.sharded:  # its records are its shards': those listed, and what the shards planned
        documents = sharded.listed(state, work)
        records = int(state.summary.get("records", 0))
    summary = Summary(**work._plan(new_run(), leave_out=documents).summary)
    summary.notes.append(
        f"run {state.run} is unfinished{held}: its {len(documents)} document(s) and "
        f"{records} record(s) are not quoted here; ckb contextualize resumes it"
    )
    return summary


# --- a run in one piece ---
def submitted(state: RunState, work: RunWork, _reingest: Reingest | None) -> Summary | None:
    work._submit(state)
    state.phase = "submitted"
    work._save(state)
    return None


def followed(state: RunState, work: RunWork, _reingest: Reingest | None) -> Summary | None:
    running = work._collect_and_store(state)
    if running:
        summary = Summary(**state.summary)
        summary.jobs_running = running
        return summary
    state.phase = "stored"
    work._save(state)
    return None


def settled(state: RunState, work: RunWork, _reingest: Reingest | None) -> Summary | None:
    # Records keep what is still wanted, and those given contexts are kept, awaiting re-ingestion, until
    # their source is marked: a run stopped from here re-ingests them when resumed.
    state.still = work._settle(state)
    state.phase = "settled"
    work._save(state)
    return None


def finished(state: RunState, work: RunWork, reingest: Reingest | None) -> Summary | None:
    summary = Summary(**state.summary)
    finish(state, summary, reingest, work)
    return summary


# The step each phase of a run in one piece is in, to its next: planned, submitted, stored, settled, done.
ONE_PIECE: dict[str, Step] = {
    "planned": submitted,
    "submitted": followed,
    "stored": settled,
    "settled": finished,
}


# --- a run in shards (``shards.py``) ---
def sharded_plan(state: RunState, work: RunWork, _reingest: Reingest | None) -> Summary | None:
    """Listed (once), each shard planned (here, or by the workflow's Map: ``Options.fan_out``), the shards'
    files cut into jobs, quoted and confirmed."""
    if not state.listed:
        sharded.list_shards(state, work)
        state.listed = True
        work._save(state)
    missing = [n for n, got in sharded.each(state, "summary.json", work) if got is None]
    if missing and work.options.fan_out:
        return Summary(run=state.run, fan_out=sharded.PLAN, shards=state.shards or 0)
    for n in missing:
        sharded.plan_shard(state.run, n, work)
    sharded.cut(state, work)
    planned = Summary(**state.summary)
    if not planned.records and not planned.awaiting_reingestion:
        planned.notes.append(NOTHING_PENDING)
        planned.shards = state.shards or 0
        state.summary, state.phase = asdict(planned), sharded.DONE
        work._save(state)
        work.claim.release(finished=True)
        return planned
    if work.confirm is not None and planned.records:
        quote = replace(planned, estimated=True, notes=list(planned.notes), priced_on_demand=[])
        quote.cost_usd = state.quote_usd or 0.0
        work.confirm(quote)
        work.claim.renew(force=True)  # still this run's after the prompt, before anything is paid
    work._save(state)
    return None


def sharded_submit(state: RunState, work: RunWork, _reingest: Reingest | None) -> Summary | None:
    work._submit(state)
    state.phase = sharded.SUBMITTED
    work._save(state)
    return None


def sharded_collect(state: RunState, work: RunWork, _reingest: Reingest | None) -> Summary | None:
    """Each job looked at until all ended (once, when not followed: ``Options.follow``)."""
    while True:
        running = sharded.collect(state, work)
        work._save(state)
        if not running:
            state.phase = sharded.COLLECTED
            work._save(state)
            return None
        if not work.options.follow:
            return Summary(
                run=state.run, jobs=len(state.jobs), jobs_running=running, shards=state.shards or 0
            )
        work.claim.renew()
        work.sleep(work.options.poll_seconds)


def sharded_store(state: RunState, work: RunWork, reingest: Reingest | None) -> Summary | None:
    """Each shard stored (here, or by the workflow's Map), their results added up, one ingestion started
    when any document was marked, the run done."""
    missing = [n for n, got in sharded.each(state, "result.json", work) if got is None]
    if missing and work.options.fan_out:
        return Summary(run=state.run, fan_out=sharded.STORE, shards=state.shards or 0)
    for n in missing:
        sharded.store_shard(state.run, n, reingest, work)
    summary = sharded.finish(state, work.start_ingestion, work)
    summary.shards = state.shards or 0
    state.summary, state.phase = asdict(summary), sharded.DONE
    work._save(state)
    work.claim.release(finished=True)
    return summary


# The step each phase of a sharded run is in, to its next: listed, planned, submitted, collected, done.
SHARDED: dict[str, Step] = {
    sharded.LISTED: sharded_plan,
    sharded.PLANNED: sharded_submit,
    sharded.SUBMITTED: sharded_collect,
    sharded.COLLECTED: sharded_store,
}
