"""Plan: the pending records read in two passes, several at a time: the first (``usable``, a run's
listing) picks the usable ones, newest per source, in groups of one text, and drops (and counts) the others:
corrupt, superseded, or whose source was deleted or changed since; the second (``build_records``) reads
each group again and spools its records to disk, built once per text for the chunks still wanted; then the
records are split into jobs within the limits (``jobs_of``), quoted, confirmed, and the run's state made
with each job's input written (``new_state``). No document's text stays in memory after its records are
built. A sharded run plans each shard with ``usable`` and ``build_records`` (``shards.py``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.options import Summary
from contextual_kb.deferred.phases.settle import parse_pending
from contextual_kb.deferred.phases.store import spans_hash
from contextual_kb.deferred.phases.work import Callbacks, Clients, Costs, Objects, PlanWork
from contextual_kb.deferred.records import build, count_tokens, record_ids, split_jobs
from contextual_kb.deferred.spool import Spool, Spooled
from contextual_kb.deferred.state import RunState
from contextual_kb.runtime.pending import PendingDocument

# A pending record deleted, or rewritten unreadable, between the plan's two passes.
GONE, BROKEN = "gone", "broken"


@dataclass(frozen=True, slots=True)
class Glance:
    key: str
    source: str
    recorded_at: str
    text: tuple[
        str, str
    ]  # the remembered-contexts key and the spans' hash: records of one text, chunked alike


class Planning(Clients, Callbacks, Objects, Costs, PlanWork, Protocol):
    """The plan's services."""


def plan(run: str, work: Planning, leave_out: set[str] | None = None) -> RunState:
    """Two passes over the pending records, several at a time: the first picks the usable ones (keeping
    their keys alone), the second reads each again and spools its records to disk; no document's text
    stays in memory after its records are built. ``leave_out``: pending record keys not planned."""
    options = work.options
    summary = Summary(run=run, estimated=options.dry_run)
    chosen, dropped = work._usable(leave_out or set())
    with Spool() as spool:
        documents, known = work._build(chosen, spool, summary, dropped)
        planned = spool.records
        summary.dropped = dict(dropped)
        summary.records = len(planned)
        on_demand, jobs = work._jobs(planned)
        summary.jobs = len(jobs)
        summary.on_demand_records = len(on_demand)
        if on_demand:
            summary.notes.append(
                f"{len(on_demand)} record(s) below a job's minimum of {options.limits.min_records}: run "
                "on demand instead"
            )
        summary.floor_usd = work._floor(planned, documents)
        if options.dry_run:
            work._estimate(summary, planned, on_demand)
        elif work.confirm is not None and planned:
            quote = replace(summary, estimated=True, notes=list(summary.notes), priced_on_demand=[])
            work._estimate(quote, planned, on_demand)
            work.confirm(quote)
        if not options.dry_run:
            # Still this run's (a prompt may have waited past the lease), before anything is uploaded.
            work.claim.renew(force=True)
        if summary.awaiting_reingestion:
            summary.notes.append(
                f"{summary.awaiting_reingestion} document(s) with contexts made by an earlier run await "
                "re-ingestion: marked again at the end (no model cost)"
            )
        state = work._new_state(run, summary, spool, jobs, on_demand)
    state.documents = known
    # Re-ingested at the end whatever this run gives them: their earlier contexts are not in the index.
    state.touched.update({key: info["source"] for key, info in known.items() if info["awaiting"]})
    return state


def build_records(
    usable: list[list[str]],
    spool: Spool,
    summary: Summary,
    dropped: Counter[str],
    work: Planning,
    ids: Iterator[str] | None = None,
) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """The second pass: each group of records of one text read again, and records built (spooled) for
    the chunks any of them still wants, from the first; every record of the group known to the run
    (each source is re-ingested, each record settled). Returns (pending record key -> its document's
    tokens, for the records built from; pending record key -> what the run must know of it)."""
    options = work.options
    ids = ids or record_ids()  # a shard's own (``shards.py``): unique across the run's shards
    documents: dict[str, int] = {}
    known: dict[str, dict[str, Any]] = {}
    group_of = {key: n for n, keys in enumerate(usable) for key in keys}
    first: PendingDocument | None = None  # the group's first record, to build from
    members: list[tuple[str, dict[str, Any], list[int]]] = []

    def plan_group() -> None:
        wanted = sorted({i for _, _, asked in members for i in asked})
        if first is None or not wanted:
            for key, info, _ in members:
                if info["awaiting"]:  # its contexts are made: it is only to be re-ingested
                    known[key] = info
                    summary.awaiting_reingestion += 1
                else:
                    dropped["resolved"] += 1
                    work._drop(key)
            return
        builder = members[0][0]
        for record in build(builder, first, wanted, options.group_size, ids):
            spool.add(record)
        documents[builder] = count_tokens(first.text)
        for key, info, asked in members:
            known[key] = {**info, **({"copy_of": builder} if key != builder else {})}
            summary.documents += 1
            summary.chunks += info["chunks"]
            summary.pending_before += len(asked)
            summary.awaiting_reingestion += info["awaiting"]
        summary.same_text += len(members) - 1

    ordered = (key for keys in usable for key in keys)
    for key, (document, wanted) in in_order(lambda key: with_wanted(key, work), ordered):
        if not options.dry_run:
            work.claim.renew()  # a quarter of the lease gone: a long plan keeps the run
        if members and group_of[members[0][0]] != group_of[key]:
            plan_group()
            first, members = None, []
        if isinstance(document, str):  # changed since the first pass read it
            if document == BROKEN:  # a deleted one (another run settled it) needs nothing more
                dropped["corrupt"] += 1
                work._drop(key)
            continue
        info = {
            "source": document.source,
            "chunks": len(document.spans),
            "with_text": sum(1 for i in range(len(document.spans)) if document.chunk(i).strip()),
            "spans": spans_hash(document),  # a record rewritten with other chunks is not stored into
            "memory": document.memory_key,
            "awaiting": bool(document.awaiting_reingestion),
        }
        if members and info["spans"] != members[0][1]["spans"]:
            continue  # recorded again since the first pass, chunked otherwise: left to the next run
        if first is None:
            first = document
        members.append((key, info, wanted))
    if members:
        plan_group()
    return documents, known


def usable(
    leave_out: set[str], work: Planning, among: Iterable[str] | None = None
) -> tuple[list[list[str]], Counter[str]]:
    """The keys of the pending records worth contextualizing, newest per source, in groups of one text
    (the same remembered contexts and chunks); the others dropped (deleted, unless a dry run) and
    counted by reason. ``among``: these keys only (a shard's), instead of every pending record."""
    dropped: Counter[str] = Counter()
    newest: dict[str, Glance] = {}
    listed = work._pending_keys() if among is None else among
    keys = (key for key in listed if key not in leave_out)
    for key, glance in in_order(lambda key: glance_at(key, work), keys):
        if glance is None:
            dropped["corrupt"] += 1
            work._drop(key)
            continue
        previous = newest.get(glance.source)
        if previous is None:
            newest[glance.source] = glance
            continue
        older, newer = sorted([previous, glance], key=lambda g: g.recorded_at)
        dropped["superseded"] += 1  # a newer ingestion of that source recorded its own
        work._drop(older.key)
        newest[glance.source] = newer
    chosen = sorted(newest.values(), key=lambda g: g.key)
    by_text: dict[tuple[str, str], list[str]] = {}
    for glance, state in in_order(lambda g: work.source_state(g.source, g.recorded_at), chosen):
        if state in {"deleted", "changed"}:
            dropped[state] += 1  # never written under another text's key: that one is ingested anew
            work._drop(glance.key)
        else:
            by_text.setdefault(glance.text, []).append(glance.key)
    # Each source of one text has its record (a copied file): asked once, stored once, each re-ingested.
    return list(by_text.values()), dropped


def glance_at(key: str, work: Planning) -> Glance | None:
    """What choosing among the records needs of one (None: gone, or its text no longer hashes)."""
    document = work._read(key)
    if document is None or not document.intact():
        return None
    return Glance(key, document.source, document.recorded_at, (document.memory_key, spans_hash(document)))


def with_wanted(key: str, work: Planning) -> tuple[PendingDocument | str, list[int]]:
    """The record and its chunks still wanted; ``GONE`` or ``BROKEN`` in its place."""
    got = work._get_versioned(key)
    if got is None:
        return GONE, []
    document = parse_pending(got[0])
    if document is None or not document.intact():
        return BROKEN, []
    return document, work._still_wanted(document)


def new_state(
    run: str,
    summary: Summary,
    spool: Spool,
    jobs: list[list[int]],
    on_demand: list[int],
    work: Planning,
) -> RunState:
    """The run's state; unless a dry run, each job's JSONL input written now (the state holds none)."""
    prefix = f"{work.options.batch_prefix}{run}/"
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
    state = RunState(
        run,
        "planned",
        records=records,
        jobs=[],
        on_demand={
            "input": f"{prefix}input/on-demand.jsonl",
            "records": [planned[i].record_id for i in on_demand],
        },
        touched={},  # pending record key -> source URI, of documents given contexts
        summary=asdict(summary),
    )
    for n, job in enumerate(jobs, 1):
        name = f"ckb-{run}-{n}"
        records_of = [planned[i].record_id for i in job]
        entry = {"name": name, "input": f"{prefix}input/{name}.jsonl", "records": records_of}
        state.jobs.append({**entry, "arn": "", "status": "", "stored": False, "message": ""})
    if not work.options.dry_run:
        bucket = work.options.bucket
        for job, indices in zip(state.jobs, jobs, strict=True):
            spool.upload(work.s3, bucket, job["input"], indices)
        if on_demand:
            spool.upload(work.s3, bucket, state.on_demand["input"], on_demand)
    return state


def jobs_of(planned: Sequence[Spooled], work: Planning) -> tuple[list[int], list[list[int]]]:
    """(records to run on demand, jobs): per model, split within the limits; too few for a job, on
    demand."""
    limits = work.options.limits
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
