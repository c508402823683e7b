"""A run in shards: planning and storing split so that each piece fits one Lambda invocation whatever the
corpus: the pieces the deferred workflow's Distributed Maps iterate (``cdk/deferred_workflow.py``), and
that ``ckb contextualize`` runs itself, one after the other, in its own process. The same functions
either way, each over the state and the services it needs (``RunWork``), as the phases of a run in one
piece are (``phases/``); ``sequence.py`` orders them. Every document's work is the phases' own (through
the services: ``_usable``, ``_build``, ``_store``, ``_settle``, ``_after_reingestion``), done on a shard's
part of the run.

The run's state object stays the one source of truth, and small: its phase, its jobs and which shards' files
each holds, and the run's summary once it is done. What grows with the corpus lives in one folder a shard
(``<batch prefix><run>/shards/<n>/``): its keys, its state (its records and documents, as a run's state
holds them), its batch input files (one a model), a small summary (the plan's figures, written last: the
shard's "planned" mark) and its result (the store's figures, written last: its "done" mark).

1. **list** (a look): the pending records' keys, listed, cut into shards of about ``shard_documents``
   records (never between two records of one text: they are planned together, asked once), each shard's
   keys written to its folder, and the list of shards (``plan/manifest.json``, the Map's item reader).
2. **plan a shard**: its usable records (newest per source within the shard; an older record of the same
   source in another shard is dropped as "changed" by its source's state, when that is known), their
   requests built and written as the shard's input files. Idempotent: a shard whose summary exists is not
   planned again.
3. **cut** (a look): the shards' input files packed, whole, into jobs within the per-job quotas (records,
   bytes), one folder of input files a job (a batch job reads every JSONL file of its folder and writes
   one output file for each); too few records of a model for a job, asked on demand by the store.
4. **submit, collect** (looks): ``phases/submit.py`` and one look at each job until all ended.
5. **store a shard**: its output files (``<job id>/<its input file>.out``) read and stored, its on-demand
   records asked, its pending records settled, its documents marked for re-ingestion. Idempotent: each
   job's part checkpointed in the shard's state, and a shard whose result exists is not stored again.
6. **finish** (a look): the shards' results added up, one ingestion job started when any document was
   marked, the run done and its claim released.

While shards run, the claim stays with the look's owner (a workflow execution, or the process): each shard
joins it (``Claim.join``) and renews it, and stops if it was taken over.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import asdict, fields
from typing import Any

from contextual_kb.deferred.batch_files import ENDED, USABLE, lines, parse_outputs
from contextual_kb.deferred.claim import ContextualizeError
from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.options import Reingest, Summary
from contextual_kb.deferred.phases.work import RunWork
from contextual_kb.deferred.records import RECORD_ID_LENGTH, Limits, Output, split_jobs
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.deferred.spool import Spool
from contextual_kb.deferred.state import STATE_FILE, RunState

# Records (pending documents) a shard plans and stores: measured at 13 ms (plan) and 23 ms (store) a
# document with 20 ms per S3 request (docs/BENCHMARKS.md), about 30 and 50 s a shard, far inside Lambda's
# 15 minutes even for documents many times the benchmark's, and on-demand records on top.
SHARD_DOCUMENTS = 2000
# Record ids: "S", the shard (4 digits), a counter (6): 11 characters, unique in the run.
MAX_SHARDS = 10_000
PLAN, STORE = "plan", "store"
# A run's phases, in order, when sharded.
LISTED, PLANNED, SUBMITTED, COLLECTED, DONE = "listed", "planned", "submitted", "collected", "done"


def shard_ids(shard: int) -> Iterator[str]:
    if not 0 <= shard < MAX_SHARDS:
        raise ContextualizeError(
            f"shard {shard} is past the {MAX_SHARDS:,} a run can have: raise the shard size"
        )
    number = 0
    while True:
        number += 1
        yield f"S{shard:04d}{number:0{RECORD_ID_LENGTH - 5}d}"


def new_state(run: str) -> RunState:
    """A sharded run's state: ``records`` and ``documents`` stay empty (they are the shards')."""
    return RunState(
        run,
        LISTED,
        sharded=True,
        shards=0,
        on_demand={"input": "", "records": [], "pieces": []},
        summary=asdict(Summary(run=run)),
    )


# --- where ---
def run_folder(run: str, work: RunWork) -> str:
    return f"{work.options.batch_prefix}{run}/"


def manifest_key(run: str, work: RunWork) -> str:
    return f"{run_folder(run, work)}plan/manifest.json"


def shard_folder(run: str, shard: int, work: RunWork) -> str:
    return f"{run_folder(run, work)}shards/{shard:05d}/"


# --- S3 helpers ---
def get_json(key: str, work: RunWork) -> Any:
    body = work._get(key)
    return None if body is None else json.loads(body)


def put_json(key: str, value: Any, work: RunWork) -> None:
    work.s3.put_object(
        Bucket=work.options.bucket,
        Key=key,
        Body=json.dumps(value).encode("utf-8"),
        ContentType="application/json",
    )


def shard_of(state: RunState) -> int:
    """A shard's number, from its state (a run's state has none)."""
    if state.shard is None:
        raise ContextualizeError(f"run {state.run}'s state is not a shard's")
    return state.shard


def save_shard(state: RunState, work: RunWork) -> None:
    work.claim.renew(force=True)  # never over a run another process took over
    work.s3.put_object(
        Bucket=work.options.bucket,
        Key=shard_folder(state.run, shard_of(state), work) + STATE_FILE,
        Body=state.to_json(),
        ContentType="application/json",
    )


def load_shard(run: str, shard: int, work: RunWork) -> RunState | None:
    body = work._get(shard_folder(run, shard, work) + STATE_FILE)
    return None if body is None else RunState.from_json(body)


# --- 1. list ---
def list_shards(state: RunState, work: RunWork) -> int:
    """The pending records' keys cut into shards (never between two records of one text: the keys of
    one text's records share their folder), each shard's keys written; the manifest last. Returns the
    count."""
    run, size = state.run, work.options.shard_documents or SHARD_DOCUMENTS
    count = 0
    waiting: list[tuple[int, list[str]]] = []

    def write(item: tuple[int, list[str]]) -> None:
        shard, keys = item
        work._put(shard_folder(run, shard, work) + "keys.txt", "\n".join(keys).encode("utf-8"))

    def flush() -> None:
        for _ in in_order(write, waiting):
            pass
        waiting.clear()
        work.claim.renew()

    current: list[str] = []
    text = ""
    for key in pending_keys(work):
        of = text_of(key, work)
        if len(current) >= size and of != text:
            waiting.append((count, current))
            count, current = count + 1, []
            if len(waiting) >= 64:
                flush()
        current.append(key)
        text = of
    if current:
        waiting.append((count, current))
        count += 1
    if count > MAX_SHARDS:
        raise ContextualizeError(
            f"{count:,} shards of {size:,} records: past the {MAX_SHARDS:,} a run can have; "
            "raise the shard size (CKB_SHARD_DOCUMENTS)"
        )
    flush()
    put_json(manifest_key(run, work), [{"run": run, "shard": n} for n in range(count)], work)
    state.shards = count
    return count


def text_of(key: str, work: RunWork) -> str:
    """What a pending record's key says of its text: ``<fingerprint>/<2 hex>/<text>/<source>.json``
    has its text's folder; an older key (``.../<text>.json``, no source) is its text."""
    parts = key.removeprefix(work.options.pending_prefix).split("/")
    return "/".join(parts[:3]) if len(parts) >= 4 else key


def pending_keys(work: RunWork) -> Iterator[str]:
    """Every pending record's key, in order, read a folder of two hex digits at a time
    (``<fingerprint>/<2 hex>/``: the keys' own layout, ``runtime/pending.py``), 16 folders side by side:
    ListObjectsV2 gives 1,000 keys a page, one page after the other, so one listing of 10 million keys
    would be 10,000 pages in a row. Keys of any other layout are listed too, after them."""
    prefix = work.options.pending_prefix
    bucket = work.options.bucket

    def listing(where: str, delimiter: str = "") -> Iterator[dict[str, Any]]:
        extra = {"Delimiter": delimiter} if delimiter else {}
        yield from work.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=where, **extra)

    folders: list[str] = []
    loose: list[str] = []
    for page in listing(prefix, "/"):
        loose += [item["Key"] for item in page.get("Contents", [])]
        for fingerprint in (p["Prefix"] for p in page.get("CommonPrefixes", [])):
            for inner in listing(fingerprint, "/"):
                loose += [item["Key"] for item in inner.get("Contents", [])]
                folders += [p["Prefix"] for p in inner.get("CommonPrefixes", [])]

    def keys_in(folder: str) -> list[str]:
        return [item["Key"] for page in listing(folder) for item in page.get("Contents", [])]

    for _, keys in in_order(keys_in, sorted(folders)):
        yield from (key for key in keys if key.endswith(".json"))
    yield from sorted(key for key in loose if key.endswith(".json"))


def listed(state: RunState, work: RunWork) -> set[str]:
    """The pending records' keys the run's shards were given (a dry run leaves them out of its quote)."""
    run = state.run

    def keys(shard: int) -> list[str]:
        body = work._get(shard_folder(run, shard, work) + "keys.txt")
        return [key for key in (body or b"").decode("utf-8").split("\n") if key]

    return {key for _, got in in_order(keys, range(state.shards or 0)) for key in got}


# --- 2. plan a shard ---
def plan_shard(run: str, shard: int, work: RunWork) -> dict[str, Any]:
    """Shard ``shard`` planned (see the module's docstring); its summary object, also when it already
    was."""
    folder = shard_folder(run, shard, work)
    done = get_json(folder + "summary.json", work)
    if done is not None:
        return dict(done)
    body = work._get(folder + "keys.txt")
    if body is None:
        raise ContextualizeError(
            f"run {run} has no shard {shard} (no s3://{work.options.bucket}/{folder}keys.txt)"
        )
    keys = [key for key in body.decode("utf-8").split("\n") if key]
    summary = Summary(run=run)
    usable, dropped = work._usable(set(), among=keys)
    with Spool() as spool:
        documents, known = work._build(usable, spool, summary, dropped, ids=shard_ids(shard))
        planned = spool.records
        summary.dropped = dict(dropped)
        summary.records = len(planned)
        summary.floor_usd = work._floor(planned, documents)
        quote = Summary(estimated=True)  # what asking these records would cost: the run's quote adds them
        work._estimate(quote, planned, [])
        # One input file a model (a job runs one model), within the per-file quotas.
        limits = work.options.limits
        per_file = Limits(
            min_records=1,
            max_job_records=limits.max_file_records,
            max_file_records=limits.max_file_records,
            max_file_bytes=limits.max_file_bytes,
            max_job_bytes=limits.max_file_bytes,
        )
        by_model: dict[str, list[int]] = {}
        for index, spooled in enumerate(planned):
            by_model.setdefault(spooled.record.model_id, []).append(index)
        pieces: list[dict[str, Any]] = []
        steps: list[dict[str, Any]] = []
        for model, indices in sorted(by_model.items()):
            for part in split_jobs([planned[i].size for i in indices], per_file):
                chosen = [indices[i] for i in part]
                name = f"{shard:05d}-{len(pieces):03d}.jsonl"
                key = folder + name
                work.claim.renew()
                spool.upload(work.s3, work.options.bucket, key, chosen)
                ids = [planned[i].record.record_id for i in chosen]
                size = sum(planned[i].size for i in chosen)
                pieces.append({"key": key, "name": name, "model": model, "records": len(ids), "bytes": size})
                steps.append({"input": key, "records": ids})
        records = {
            s.record.record_id: {
                "document": s.record.document,
                "unit": s.record.unit,
                "chunks": list(s.record.chunks),
                "model": s.record.model_id,
            }
            for s in planned
        }
    if summary.awaiting_reingestion:
        summary.notes.append(
            "document(s) with contexts made by an earlier run await re-ingestion: marked again at the "
            "end (no model cost)"
        )
    touched = {key: info["source"] for key, info in known.items() if info["awaiting"]}
    shard_state = RunState(
        run,
        PLANNED,
        shard=shard,
        records=records,
        documents=known,
        touched=touched,
        # ``Contextualizer._planned`` reads records back from these (the on-demand ones, a retry).
        jobs=steps,
        on_demand={"input": "", "records": []},
        stored_pieces=[],
        summary=asdict(summary),
    )
    save_shard(shard_state, work)
    result = {"shard": shard, "pieces": pieces, "summary": asdict(summary), "quote_usd": quote.cost_usd}
    put_json(folder + "summary.json", result, work)  # last: the shard's "planned" mark
    return result


# --- 3. cut ---
def cut(state: RunState, work: RunWork) -> None:
    """The shards' input files packed whole into jobs (each job a folder of copies), the run's plan
    figures added up; records too few for a job of their model go on demand."""
    run = state.run
    limits = work.options.limits
    summaries = each(state, "summary.json", work)
    missing = [n for n, got in summaries if got is None]
    if missing:
        raise ContextualizeError(
            f"run {run}: shard(s) {missing[:10]} not planned: the plan goes on at the next look"
        )
    total = Summary(run=run)
    by_model: dict[str, list[dict[str, Any]]] = {}
    quote_usd = 0.0
    for shard, got in summaries:
        _add(total, Summary(**got["summary"]))
        quote_usd += got.get("quote_usd", 0.0)
        for piece in got["pieces"]:
            by_model.setdefault(piece["model"], []).append({**piece, "shard": shard})
    jobs: list[dict[str, Any]] = []
    on_demand: list[dict[str, Any]] = []
    for model, pieces in sorted(by_model.items()):
        packs: list[list[dict[str, Any]]] = [[]]
        for piece in pieces:
            pack = packs[-1]
            if pack and (
                sum(p["records"] for p in pack) + piece["records"] > limits.max_job_records
                or sum(p["bytes"] for p in pack) + piece["bytes"] > limits.max_job_bytes
            ):
                packs.append([])
            packs[-1].append(piece)
        for pack in packs:
            count = sum(p["records"] for p in pack)
            if count < limits.min_records:
                on_demand.extend(pack)
                continue
            name = f"ckb-{run}-{len(jobs) + 1}"
            jobs.append(
                {
                    "name": name,
                    "input": f"{run_folder(run, work)}input/{name}/",
                    "model": model,
                    "count": count,
                    "records": [],
                    "pieces": [{"shard": p["shard"], "name": p["name"], "key": p["key"]} for p in pack],
                    "arn": "",
                    "status": "",
                    "stored": False,
                    "message": "",
                }
            )
    # The job's folder holds copies (made by S3, not read here) of its shards' files.
    copies = [(job["input"] + p["name"], p["key"]) for job in jobs for p in job["pieces"]]
    for _ in in_order(lambda item: copy_piece(item, work), copies):
        pass
    total.jobs = len(jobs)
    total.on_demand_records = sum(p["records"] for p in on_demand)
    if on_demand:
        total.notes.append(
            f"{total.on_demand_records} record(s) below a job's minimum of {limits.min_records}: run on "
            "demand instead"
        )
    state.jobs, state.quote_usd = jobs, quote_usd
    state.on_demand["pieces"] = [{"shard": p["shard"], "name": p["name"], "key": p["key"]} for p in on_demand]
    state.summary = asdict(total)
    state.phase = PLANNED


def copy_piece(item: tuple[str, str], work: RunWork) -> None:
    """``(to, source)``: one object copied by S3. With a checksum of its own: a file uploaded in parts
    has a checksum of its parts, which a copy must not carry as if it were the whole object's."""
    to, source = item
    bucket = work.options.bucket
    work.s3.copy_object(
        Bucket=bucket, Key=to, CopySource={"Bucket": bucket, "Key": source}, ChecksumAlgorithm="CRC32"
    )


def each(state: RunState, name: str, work: RunWork) -> list[tuple[int, Any]]:
    run = state.run
    return list(
        in_order(lambda n: get_json(shard_folder(run, n, work) + name, work), range(state.shards or 0))
    )


# --- 4. collect ---
def collect(state: RunState, work: RunWork) -> int:
    """One look at each job not ended; returns how many still run. A job never created counts as ended."""
    running = 0
    for job in state.jobs:
        if not job["arn"] or job["status"] in ENDED:
            continue
        described = work.bedrock.get_model_invocation_job(jobIdentifier=job["arn"])
        job["status"] = described["status"]
        job["output"] = described["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]
        work.progress(job["name"], int(described.get("processedRecordCount", 0)), job["count"])
        if job["status"] not in ENDED:
            running += 1
        elif job["status"] not in USABLE:
            job["message"] = str(described.get("message", ""))
            why = job["message"] or "no reason given"
            work.log(f"job {job['name']} {job['status']}: {why}; its chunks stay pending")
    return running


# --- 5. store a shard ---
def store_shard(run: str, shard: int, reingest: Reingest | None, work: RunWork) -> dict[str, Any]:
    """Shard ``shard`` stored, settled and its documents marked (see the module's docstring); its result,
    also when it already was."""
    folder = shard_folder(run, shard, work)
    done = get_json(folder + "result.json", work)
    if done is not None:
        return dict(done)
    state = work._load(run)
    shard_state = load_shard(run, shard, work)
    if state is None or shard_state is None:
        raise ContextualizeError(f"run {run} or its shard {shard} has no state: nothing to store")
    summary = Summary(**shard_state.summary)
    rejected: Counter[str] = Counter(summary.answers_rejected)
    ids_of = {step["input"]: step["records"] for step in shard_state.jobs}
    stored = set(shard_state.stored_pieces or [])
    failed: list[str] = list(shard_state.failed or [])

    def checkpoint(piece: str, more: list[str]) -> None:
        failed.extend(more)
        stored.add(piece)
        shard_state.stored_pieces, shard_state.failed = sorted(stored), failed
        summary.answers_rejected = dict(rejected)
        shard_state.summary = asdict(summary)
        save_shard(shard_state, work)

    for job in state.jobs:
        for piece in (p for p in job["pieces"] if p["shard"] == shard and p["key"] not in stored):
            ids = ids_of[piece["key"]]
            outputs: dict[str, Output] = {}
            if job["arn"] and job["status"] in USABLE:
                charge = work._charge_line(shard_state, summary, batch=True, model=job["model"])
                outputs = piece_outputs(run, job, piece["name"], charge, work)
            checkpoint(piece["key"], work._store(shard_state, ids, outputs, summary, rejected))
    for piece in (p for p in state.on_demand["pieces"] if p["shard"] == shard and p["key"] not in stored):
        ids = ids_of[piece["key"]]
        charge = work._charge_line(shard_state, summary, batch=False)
        outputs = work._on_demand_outputs(shard_state, ids, f"on-demand-{shard:05d}", charge)
        checkpoint(piece["key"], work._store(shard_state, ids, outputs, summary, rejected))
    if shard_state.retry is None:
        shard_state.retry = {"records": [], "failed": [], "stored": False}
    retry = shard_state.retry
    if failed and work.options.on_demand_retry and work.on_demand is not None and not retry["stored"]:
        if "planned" not in retry:
            retry["records"], retry["planned"] = work._still_fitting(shard_state, failed), True
            save_shard(shard_state, work)
        if retry["records"]:
            charge = work._charge_line(shard_state, summary, batch=False)
            outputs = work._on_demand_outputs(shard_state, retry["records"], f"retry-{shard:05d}", charge)
            retry["failed"] = work._store(shard_state, retry["records"], outputs, summary, rejected)
        retry["stored"] = True
        summary.answers_rejected = dict(rejected)
        shard_state.summary = asdict(summary)
        save_shard(shard_state, work)
    final = set(retry["failed"]) | (set(failed) - set(retry["records"]))
    summary.failed_records = len(final)
    result = settle_and_mark(shard_state, summary, reingest, work)
    put_json(folder + "result.json", result, work)  # last: the shard's "done" mark
    return result


def settle_and_mark(
    shard_state: RunState, summary: Summary, reingest: Reingest | None, work: RunWork
) -> dict[str, Any]:
    """The shard's pending records settled, its documents marked for re-ingestion; its result."""
    if shard_state.phase == PLANNED:
        shard_state.still = work._settle(shard_state)
        shard_state.phase = "settled"
        shard_state.summary = asdict(summary)
        save_shard(shard_state, work)
    sources = sorted(set(shard_state.touched.values()))
    reingested = Reingested(marked=sources)
    if reingest is not None and sources:
        got = reingest(sources)
        reingested = got if isinstance(got, Reingested) else Reingested(marked=sources, model_calls=got)
    summary.reingested_documents = len(reingested.marked)
    summary.awaiting_reingestion, summary.not_reingested = 0, {}
    work._after_reingestion(shard_state, reingested, summary)
    still = shard_state.still or {}
    summary.model_contexts = sum(
        info["with_text"] - still.get(key, 0) for key, info in shard_state.documents.items()
    )
    # The chunks of this run's documents still without a model context (``pending_after``, per shard).
    summary.pending_after = sum(still.values())
    return {"shard": shard_of(shard_state), "marked": len(reingested.marked), "summary": asdict(summary)}


def piece_outputs(
    run: str, job: dict[str, Any], name: str, charge: Callable[[Output], None], work: RunWork
) -> dict[str, Output]:
    """The output file Bedrock wrote for one input file of the job (``<job id>/<name>.out``), streamed."""
    job_id = str(job["arn"]).rsplit("/", 1)[-1]
    uri = str(job.get("output") or f"s3://{work.options.bucket}/{run_folder(run, work)}output/")
    bucket, _, prefix = (uri.rstrip("/") + f"/{job_id}/").removeprefix("s3://").partition("/")
    found: dict[str, Output] = {}
    for page in work.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + name):
        for item in page.get("Contents", []):
            if item["Key"].endswith(".out"):
                with closing(work.s3.get_object(Bucket=bucket, Key=item["Key"])["Body"]) as body:
                    parse_outputs(lines(body), into=found, charge=charge)
    return found


# --- 6. finish ---
def finish(
    state: RunState, start_ingestion: Callable[[], tuple[str, int | None]] | None, work: RunWork
) -> Summary:
    results = each(state, "result.json", work)
    missing = [n for n, got in results if got is None]
    if missing:
        raise ContextualizeError(
            f"run {state.run}: shard(s) {missing[:10]} not stored: the store goes on at the next look"
        )
    planned = Summary(**state.summary)
    total = Summary(run=state.run, jobs=planned.jobs, on_demand_records=planned.on_demand_records)
    total.notes = list(planned.notes)
    marked = 0
    for _, got in results:
        _add(total, Summary(**got["summary"]))
        marked += got["marked"]
    total.jobs_failed = sum(1 for job in state.jobs if job["status"] not in USABLE)
    if marked and start_ingestion is not None:
        job, calls = start_ingestion()
        total.model_calls_during_reingest = calls
        total.notes.append(f"ingestion job {job}")
    if total.awaiting_reingestion:
        total.notes.append(
            f"{total.awaiting_reingestion} document(s) got their contexts but were not re-ingested: "
            "their records stay pending, awaiting re-ingestion; ckb contextualize marks them again"
        )
    return total


# Figures of a shard's summary added to the run's; those set by the run itself are left out.
_NOT_ADDED = {"run", "estimated", "jobs", "jobs_running", "on_demand_records", "model_calls_during_reingest"}


def _add(total: Summary, part: Summary) -> None:
    for f in fields(Summary):
        if f.name in _NOT_ADDED:
            continue
        mine, theirs = getattr(total, f.name), getattr(part, f.name)
        if isinstance(mine, dict):
            if f.name == "not_reingested":
                mine.update(theirs)
            else:
                for key, value in theirs.items():
                    mine[key] = mine.get(key, 0) + value
        elif isinstance(mine, list):
            mine.extend(item for item in theirs if item not in mine)
        elif isinstance(mine, (int, float)) and not isinstance(mine, bool):
            setattr(total, f.name, mine + theirs)
