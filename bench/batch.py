"""Contexts made later (issue 20): the cost of `ckb contextualize` against the on-demand floor, the command at
scale, and the speed of an ingestion that defers every context against one that calls the model in the Lambda.

    .venv/bin/python bench/batch.py [cost] [speed] [scale] [workflow] [shards] [shards-at-scale]
                                    [--dataset PATH] [--documents N]
    make bench-batch   # the first five
    make bench-batch-at-scale   # shards-at-scale: 100,000 documents

cost: ``ckb contextualize --local`` on the codebase corpus (90 documents, 737 chunks): the handler with
CONTEXT_DEFER=always, then batch records of 20 and 40 chunks through the batch inference stand-in (its
records answered by the same stand-in as the contextualization table: same contexts, same token counts,
3.5 bytes a token), stored, and the handler again as the re-ingestion. Floor = each document read once at
the on-demand input price + the contexts written at the on-demand output price (Haiku 4.5 list prices;
batch at half of them).

speed: the same staged corpus through the real handler on moto S3, warm (the median of five invocations after
the one that builds the runtime): CONTEXT_DEFER=always against CONTEXT_DEFER=never with per-chunk model calls
in the Lambda (remembering off, so every run calls the model), the stand-in in its own process at 300 ms +
2 ms per output token (the contextualization table's), MAX_CONCURRENCY=32; beside them, the structural
contexts alone (what `always` gives now, nothing deferred) and no context at all; once with moto S3 in this
process, once with it in a child process.

scale: ``ckb contextualize`` over 90, 360 and 1,440 pending documents with every S3 request of the command
delayed 20 ms: the whole run's seconds, and the plan's peak memory.

workflow: the deferred workflow's looks (``deferred/workflow.py``'s step, each a new execution's) over the
same 1,440 pending documents at the same 20 ms, beside the single process on the same documents: each look's
seconds (the first plans and submits; the last stores and settles), the longest against Lambda's 15 minutes,
the cost against the floor, with the run in one piece (a run the CLI planned without shards).

shards: the workflow's sharded plan and store (its Distributed Maps' children, each measured alone) against
the single process, for 1,440 pending documents in four shards and 2,070 in one (a default shard's size),
and the listing that cuts 100,000 pending records into shards (``shards``'s docstring).

shards-at-scale (only when named: ``make bench-batch-at-scale``; 11-15 GB, the two paths one after the other
below 40 GB of memory: about 2.5 hours on 2 cores): the same row
for 100,000 pending documents in shards of 2,000 (``shards_at_scale``'s docstring).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corpus import DEFAULT_DATASET, load_documents, offline_environment  # bench/corpus.py

offline_environment()

DATASET = DEFAULT_DATASET  # --dataset


def cost() -> None:
    from contextual_kb.deferred.offline import run_local

    documents = load_documents(DATASET)
    print(
        "| records of | records | jobs | input tokens | output tokens | cost | floor | cost / floor | "
        "pending after | chunks with a model context | model calls in re-ingestion |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for group in (20, 40):
        s = run_local(documents, group_size=group).summary
        print(
            f"| {group} chunks | {s.records} | {s.jobs} | {s.input_tokens:,} | {s.output_tokens:,} | "
            f"${s.cost_usd:.4f} | ${s.floor_usd:.4f} | {s.cost_vs_floor:.3f} | {s.pending_after} | "
            f"{s.model_contexts} of {s.chunks} | {s.model_calls_during_reingest} |",
            flush=True,
        )


def speed(runs: int = 5) -> None:
    """Both ways of serving S3: moto in this process (the other tables' setup: its request handling is CPU
    under the handler's interpreter lock, counted in the handler's seconds), and moto in a child process
    (closer to Lambda, where S3's side of a request is a network wait, not the function's CPU). Each case
    gets an S3 of its own, the corpus staged anew, and starts from a collected heap: a case run after
    another does not pay for what the other left behind."""
    from contextlib import contextmanager

    from moto import mock_aws

    from contextual_kb.deferred.offline import environment
    from contextual_kb.local.bedrock_standin import standin_subprocess
    from contextual_kb.local.s3server import s3_subprocess

    @contextmanager
    def in_this_process() -> Iterator[None]:
        with mock_aws():
            yield

    @contextmanager
    def in_a_child_process() -> Iterator[None]:
        with s3_subprocess() as endpoint, environment(AWS_ENDPOINT_URL_S3=endpoint):
            yield

    with standin_subprocess(300.0, 2.0) as url:
        _speed_table("in this process", in_this_process, url, runs)
        _speed_table("in a child process", in_a_child_process, url, runs)


CASES = {
    "CONTEXT_DEFER=always (no model call in the Lambda)": {"CONTEXT_DEFER": "always"},
    "model calls in the Lambda (per-chunk, remembering off)": {
        "CONTEXT_DEFER": "never",
        "CONTEXT_MEMORY_PREFIX": "",
    },
    # What `always` must do besides deferring: the structural contexts it gives now.
    "structural contexts, nothing deferred (CONTEXT_STRATEGY=structural)": {"CONTEXT_STRATEGY": "structural"},
    # The floor under any context: the batch objects read, validated and written back as they are.
    "no context at all (CONTEXT_STRATEGY=none: S3 and parsing alone)": {"CONTEXT_STRATEGY": "none"},
}


def _speed_table(where: str, s3_server: Any, url: str, runs: int) -> None:
    import gc

    import boto3

    from contextual_kb.deferred.offline import environment
    from contextual_kb.local import runner
    from contextual_kb.local.kb_staging import build_event, stage_file

    documents = load_documents(DATASET)
    results = {}
    for label, settings in CASES.items():
        with s3_server():
            s3 = boto3.client("s3")
            s3.create_bucket(Bucket="bench-deferred")
            staged = [
                stage_file(
                    s3,
                    "bench-deferred",
                    f"s3://src/{d['doc_id']}",
                    [c["content"] for c in d["chunks"]],
                    chunks_per_batch=8,
                )
                for d in documents
            ]
            event = build_event("bench-deferred", staged)
            with environment(**{"CONTEXT_STRATEGY": "claude", "ANTHROPIC_BEDROCK_BASE_URL": url, **settings}):
                seconds = []
                for run in range(runs + 1):
                    gc.collect()
                    result = runner.invoke(event, fresh=run == 0)
                    if run:  # the first builds the runtime (Lambda's init): not counted
                        seconds.append(result.seconds)
                model = result.summary().get("model", {})
        results[label] = (statistics.median(seconds), model)
    print(f"\nS3 (moto) {where}:\n")
    print("| ingestion | handler seconds (median, warm) | model calls | chunks deferred |")
    print("|---|---|---|---|")
    for label, (seconds, model) in results.items():
        print(f"| {label} | {seconds:.2f} | {model.get('calls', 0)} | {model.get('deferred', 0)} |")
    (fast, _), (slow, _), (structural, _), (floor, _) = results.values()
    print(
        f"\nspeed-up: {slow / fast:.1f}x; with nothing deferred (structural contexts alone) "
        f"{slow / structural:.1f}x; at most {slow / floor:.1f}x over this S3",
        flush=True,
    )


def scale(copies: tuple[int, ...] = (1, 4, 16), latency_ms: float = 20.0) -> None:
    """``ckb contextualize`` over 90, 360 and 1,440 pending documents (the corpus copied, each copy's text
    made its own): the whole run's seconds with every S3 request of the command delayed by ``latency_ms``
    (a network wait, as from a laptop or an instance to S3; moto's own CPU comes on top), and the plan's
    peak memory (a dry run, tracemalloc: Python allocations made while planning)."""
    import time
    import tracemalloc

    import boto3

    from contextual_kb.deferred.concurrency import S3_CONNECTIONS
    from contextual_kb.deferred.offline import REGION, LocalWorld
    from contextual_kb.local.batch_standin import BatchConfig

    def delayed_s3() -> object:
        from botocore.config import Config

        client = boto3.client("s3", region_name=REGION, config=Config(max_pool_connections=S3_CONNECTIONS))
        client.meta.events.register("request-created.s3", lambda **_: time.sleep(latency_ms / 1000))
        return client

    base = load_documents_copied(1)
    text_mb = sum(len(d["content"].encode()) for d in base) / 1e6
    print(f"\nckb contextualize at scale ({latency_ms:.0f} ms per S3 request of the command):\n")
    print("| pending documents | chunks | records | run seconds | plan peak memory (MB) | pending after |")
    print("|---|---|---|---|---|---|")
    for n in copies:
        documents = load_documents_copied(n)
        with LocalWorld(documents, BatchConfig(step_seconds=0.02)) as world:
            world.ingest("always")
            planner = world.contextualizer(s3=delayed_s3(), dry_run=True)
            tracemalloc.start()  # after the clients are built: what planning allocates
            planner.run()
            peak = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            started = time.perf_counter()
            s = world.contextualizer(s3=delayed_s3(), poll_seconds=0.05).run()
            seconds = time.perf_counter() - started
        print(
            f"| {s.documents:,} ({n * text_mb:.1f} MB of text) | {s.chunks:,} | {s.records:,} | "
            f"{seconds:.1f} | {peak:.1f} | {s.pending_after} |",
            flush=True,
        )


def workflow(copies: int = 16, latency_ms: float = 20.0) -> None:
    """The workflow's looks against the single process, on the same pending documents and S3 latency."""
    import time

    import boto3

    from contextual_kb.deferred.concurrency import S3_CONNECTIONS
    from contextual_kb.deferred.offline import REGION, LocalWorld
    from contextual_kb.deferred.workflow import step
    from contextual_kb.local.batch_standin import BatchConfig

    def delayed_s3() -> object:
        from botocore.config import Config

        client = boto3.client("s3", region_name=REGION, config=Config(max_pool_connections=S3_CONNECTIONS))
        client.meta.events.register("request-created.s3", lambda **_: time.sleep(latency_ms / 1000))
        return client

    documents = load_documents_copied(copies)
    with LocalWorld(documents, BatchConfig(step_seconds=0.02)) as world:
        world.ingest("always")
        started = time.perf_counter()
        single = world.contextualizer(s3=delayed_s3(), poll_seconds=0.05).run()
        single_seconds = time.perf_counter() - started
    looks: list[tuple[str, float]] = []
    with LocalWorld(documents, BatchConfig(step_seconds=0.02)) as world:
        world.ingest("always")
        mode = "start"
        while True:
            look = world.contextualizer(s3=delayed_s3(), follow=False)
            look.claim.owner = f"workflow:look-{len(looks)}"
            started = time.perf_counter()
            result = step({"mode": mode}, look, reingest=None)
            looks.append((result["outcome"], time.perf_counter() - started))
            if result["outcome"] != "waiting" or len(looks) > 1000:
                break
            mode = "resume"
            time.sleep(0.05)  # the wait between looks (Step Functions'), not counted
        summary = result["summary"]
    print(f"\nthe deferred workflow's looks ({latency_ms:.0f} ms per S3 request, one shard):\n")
    print(
        "| pending documents | looks | first look (plan, submit) s | last look (store, settle) s | "
        "longest s | looks' sum s | single process s | cost / floor (workflow) | cost / floor (single) | "
        "pending after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    seconds = [s for _, s in looks]
    print(
        f"| {summary['documents']:,} | {len(looks)} | {seconds[0]:.1f} | {seconds[-1]:.1f} | "
        f"{max(seconds):.1f} | {sum(seconds):.1f} | {single_seconds:.1f} | {summary['cost_vs_floor']} | "
        f"{single.cost_vs_floor} | {summary['pending_after']} |",
        flush=True,
    )


def shards(latency_ms: float = 20.0) -> None:
    """The workflow's sharded plan and store (``deferred/shards.py``) against the single process, at 20 ms per
    S3 request: 1,440 pending documents in four shards of 360, every phase measured; 2,070 in one shard of
    2,070 (what a shard of the default 2,000 takes); and the listing that cuts 100,000 pending records into
    shards of 2,000, measured over 100,000 keys. Each shard is measured alone, one after the other: on AWS
    each is its own Lambda invocation, all of one Map's at once (up to MaxConcurrency 100), so a Map's wall
    time is its slowest shard's."""
    print(f"\nthe workflow in shards ({latency_ms:.0f} ms per S3 request; each shard measured alone):\n")
    print(SHARDS_HEADER)
    _sharded_run(16, 360, latency_ms)
    _sharded_run(23, 2100, latency_ms)
    _listing(100_000, 2000, latency_ms)
    _listing(100_000, 2000, 0.0)  # moto's own work, without the requests' waits


def _delayed_s3(latency_ms: float) -> Any:
    import time

    import boto3
    from botocore.config import Config

    from contextual_kb.deferred.concurrency import S3_CONNECTIONS
    from contextual_kb.deferred.offline import REGION

    client = boto3.client("s3", region_name=REGION, config=Config(max_pool_connections=S3_CONNECTIONS))
    client.meta.events.register("request-created.s3", lambda **_: time.sleep(latency_ms / 1000))
    return client


def _sharded_run(copies: int, shard_documents: int, latency_ms: float) -> None:
    import time

    from contextual_kb.deferred.offline import LocalWorld
    from contextual_kb.local.batch_standin import BatchConfig

    documents = load_documents_copied(copies)
    with LocalWorld(documents, BatchConfig(step_seconds=0.02)) as world:
        world.ingest("always")
        started = time.perf_counter()
        world.contextualizer(
            s3=_delayed_s3(latency_ms), dry_run=True
        ).run()  # the plan alone, nothing written
        single_plan = time.perf_counter() - started
        started = time.perf_counter()
        single = world.contextualizer(s3=_delayed_s3(latency_ms), poll_seconds=0.05).run()
        single_seconds = time.perf_counter() - started
    with LocalWorld(documents, BatchConfig(step_seconds=0.02)) as world:
        world.ingest("always")
        sharded = _workflow_phases(world, shard_documents, latency_ms)
    single_figures = {"plan": single_plan, "whole": single_seconds, "cost_vs_floor": single.cost_vs_floor}
    print(_shards_row(sharded, single_figures), flush=True)


SHARDS_HEADER = (
    "| pending documents | shards | single process: plan s | single process: whole run s | list s | "
    "plan shards: slowest / sum s | cut + submit s | store shards: slowest / sum s | finish s | "
    "workflow plan (list + slowest + cut) s | workflow store (slowest + finish) s | "
    "cost / floor (shards) | cost / floor (single) | pending after |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _shards_row(sharded: dict[str, Any], single: dict[str, Any]) -> str:
    plans, stores = sharded["plans"], sharded["stores"]
    plan_wall = sharded["list"] + max(plans) + sharded["cut"]
    store_wall = max(stores) + sharded["finish"]
    return (
        f"| {sharded['documents']:,} | {len(plans)} | {single['plan']:.1f} | {single['whole']:.1f} | "
        f"{sharded['list']:.1f} | {max(plans):.1f} / {sum(plans):.1f} | {sharded['cut']:.1f} | "
        f"{max(stores):.1f} / {sum(stores):.1f} | {sharded['finish']:.1f} | {plan_wall:.1f} | "
        f"{store_wall:.1f} | {sharded['cost_vs_floor']} | {single['cost_vs_floor']} | "
        f"{sharded['pending_after']} |"
    )


def shards_at_scale(
    documents: int = 100_000,
    shard_documents: int = 2000,
    latency_ms: float = 20.0,
    side_by_side: bool = False,
) -> None:
    """The workflow in shards against the single process on ``documents`` pending documents (the corpus copied
    until it holds that many), at 20 ms per S3 request: the same columns as ``shards``'s rows. Each path runs
    in a process of its own with its own local S3 (the single process in a child): one after the other, or
    with ``side_by_side`` (or on a machine of 40 GB or more) side by side, so that the whole takes the longer
    of the two rather than their sum, sharing the machine's cores (the load is said beside the figures). At
    100,000 documents each process holds 11 to 15 GB (moto's S3 in it): side by side on 24 GB the kernel
    killed the single process. The
    single process's plan is timed inside its run (its ``_plan``), not by a dry run of its own: at this size a
    dry run would cost as long again. Its plan column is then the plan and its state's first save to the
    jobs submitted, as the workflow's plan (list, slowest shard, cut and submit) is."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    copies = -(-documents // len(load_documents(DATASET)))
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    side_by_side = side_by_side or memory_gb >= 40
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "single.json"
        command = [sys.executable, __file__, "_single-at-scale", "--dataset", str(DATASET), "--copies",
                   str(copies), "--out", str(out), "--latency-ms", str(latency_ms)]  # fmt: skip
        child = subprocess.Popen(command) if side_by_side else None
        try:
            sharded = _sharded_at_scale(copies, shard_documents, latency_ms)
            print(f"the workflow's figures: {json.dumps(sharded)}", flush=True)  # kept whatever comes next
            child = child or subprocess.Popen(command)
            code = child.wait()
        finally:  # never an hour-long child left behind (a failure, an interrupt)
            if child is not None and child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    child.kill()
        if code != 0:
            why = " (-9: killed, out of memory? see dmesg)" if code == -9 else ""
            raise SystemExit(f"the single process's run failed (exit {code}{why})")
        single = json.loads(out.read_text())
    print(
        f"\nthe workflow in shards at scale ({latency_ms:.0f} ms per S3 request; "
        "each shard measured alone):\n"
    )
    print(SHARDS_HEADER)
    print(_shards_row(sharded, {**single, "plan": single["to_submitted"]}), flush=True)
    print(
        f"\nload average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (the two paths "
        f"{'side by side' if side_by_side else 'one after the other'}, {memory_gb:.0f} GB of memory)"
    )
    print(
        f"\nsingle process: to its jobs submitted {single['to_submitted']:.1f} s "
        f"(plan {single['plan']:.1f} s, state saves {single['save']:.1f} s in all, "
        f"submit {single['submit']:.1f} s), store "
        f"{single['store']:.1f} s, settle {single['settle']:.1f} s of its whole run {single['whole']:.1f} s; "
        f"its state object {single['state_bytes']:,} bytes (staged in {single['staged']:.0f} s, ingested in "
        f"{single['ingested']:.0f} s); the workflow's state object {sharded['state_bytes']:,} bytes "
        f"(staged in {sharded['staged']:.0f} s, ingested in {sharded['ingested']:.0f} s)",
        flush=True,
    )


def _progress(what: str, started: float) -> None:
    import sys
    import time

    print(f"  [{time.strftime('%H:%M:%S')}] {what} ({time.perf_counter() - started:.0f} s)", file=sys.stderr,
          flush=True)  # fmt: skip


@contextmanager
def _staged_world(copies: int, who: str) -> Iterator[tuple[Any, float, float]]:
    """A local world of ``copies`` copies of the corpus, ingested with CONTEXT_DEFER=always a thousand files
    an invocation (a Knowledge Base hands the function its files in batches too); with the seconds staging
    and ingesting took."""
    import contextlib
    import io
    import time

    from contextual_kb.deferred.offline import LocalWorld, environment
    from contextual_kb.local.batch_standin import BatchConfig
    from contextual_kb.local.lambda_context import LocalLambdaContext
    from contextual_kb.runtime import handler

    started = time.perf_counter()
    with LocalWorld(load_documents_copied(copies), BatchConfig(step_seconds=0.02)) as world:
        staged = time.perf_counter() - started
        _progress(f"{who}: staged {len(world.documents):,} documents", started)
        files = world.event["inputFiles"]
        started = time.perf_counter()
        for first in range(0, len(files), 1000):
            batch = files[first : first + 1000]
            # The handler itself (the runner would read every input and output back: not the sync's work)
            with environment(CONTEXT_DEFER="always"), contextlib.redirect_stdout(io.StringIO()):
                handler.runtime.cache_clear()
                response = handler.lambda_handler({**world.event, "inputFiles": batch}, LocalLambdaContext())
            if len(response.get("outputFiles", [])) != len(batch):
                raise SystemExit(f"{who}: the ingestion returned {response}")
        ingested = time.perf_counter() - started
        _progress(f"{who}: ingested", started)
        yield world, staged, ingested


def _run_state_bytes(s3: Any) -> int:
    """The largest run state object (``contextual-kb/batch/<run>/state.json``; not the shards' own)."""
    from contextual_kb.deferred.offline import INTERMEDIATE

    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=INTERMEDIATE, Prefix="contextual-kb/batch/")
    return max(
        (o["Size"] for page in pages for o in page.get("Contents", [])
         if o["Key"].count("/") == 3 and o["Key"].endswith("/state.json")),
        default=0,
    )  # fmt: skip


def _single_at_scale(copies: int, out: Path, latency_ms: float = 20.0) -> None:
    """The single process's run over the world, each phase timed inside it; figures written to ``out``."""
    import json
    import time

    with _staged_world(copies, "single") as (world, staged, ingested):
        made = world.contextualizer(s3=_delayed_s3(latency_ms), poll_seconds=0.05)
        phases: dict[str, float] = {}
        for name in ("plan", "submit", "store", "settle", "save"):
            original = getattr(made, f"_{name}")

            def timed(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    phases[_name] = phases.get(_name, 0.0) + time.perf_counter() - started
                    _progress(f"single: {_name} done", started)

            setattr(made, f"_{name}", timed)
        started = time.perf_counter()
        submit = made._submit

        def submitted(*args: Any, **kwargs: Any) -> Any:
            result = submit(*args, **kwargs)
            phases["to_submitted"] = time.perf_counter() - started
            return result

        made._submit = submitted  # type: ignore[method-assign]
        summary = made.run()
        whole = time.perf_counter() - started
        state_bytes = _run_state_bytes(world.s3)
    out.write_text(json.dumps({
        **phases, "whole": whole, "cost_vs_floor": summary.cost_vs_floor, "documents": summary.documents,
        "pending_after": summary.pending_after, "state_bytes": state_bytes, "staged": staged,
        "ingested": ingested,
    }))  # fmt: skip


def _sharded_at_scale(copies: int, shard_documents: int, latency_ms: float) -> dict[str, Any]:
    """The workflow's looks and Map children over the world, one after the other, each timed."""
    with _staged_world(copies, "shards") as (world, staged, ingested):
        return {
            **_workflow_phases(world, shard_documents, latency_ms),
            "staged": staged,
            "ingested": ingested,
        }


def _workflow_phases(world: Any, shard_documents: int, latency_ms: float) -> dict[str, Any]:
    """The deferred workflow over an ingested world, as the state machine runs it: the listing look, each
    shard's plan (a Map's child, measured alone), the look that cuts and submits, the looks while the jobs
    run (Step Functions' waits, not counted), each shard's store, the finishing look."""
    import json
    import time

    from contextual_kb.deferred.workflow import shard, step

    def contextualizer() -> Any:
        made = world.contextualizer(
            s3=_delayed_s3(latency_ms), follow=False, fan_out=True, shard_documents=shard_documents
        )
        made.claim.owner = "workflow:bench"
        return made

    def timed(fn: Any, what: str) -> tuple[Any, float]:
        started = time.perf_counter()
        out = fn()
        _progress(f"shards: {what}", started)
        return out, time.perf_counter() - started

    def look(mode: str) -> dict[str, Any]:
        return step({"mode": mode}, contextualizer(), reingest=None)

    def child(action: str, item: dict[str, Any]) -> dict[str, Any]:
        return shard({"action": action, **item}, contextualizer(), reingest=None)

    listed, list_seconds = timed(lambda: look("start"), "listed")
    assert listed["outcome"] == "plan", listed
    manifest = world.s3.get_object(Bucket=listed["bucket"], Key=listed["manifest"])
    items = json.loads(manifest["Body"].read())
    plans = [timed(lambda i=i: child("plan-shard", i), f"planned shard {i['shard']}")[1] for i in items]
    result, cut_seconds = timed(lambda: look("resume"), "cut")
    while result["outcome"] == "waiting":  # the waits between looks are Step Functions', not counted
        time.sleep(0.05)
        result = look("resume")
    assert result["outcome"] == "store", result
    stores = [timed(lambda i=i: child("store-shard", i), f"stored shard {i['shard']}")[1] for i in items]
    done, finish_seconds = timed(lambda: look("resume"), "finished")
    summary = done["summary"]
    return {
        "documents": summary["documents"], "plans": plans, "stores": stores, "list": list_seconds,
        "cut": cut_seconds, "finish": finish_seconds, "cost_vs_floor": summary["cost_vs_floor"],
        "pending_after": summary["pending_after"], "state_bytes": _run_state_bytes(world.s3),
    }  # fmt: skip


FINGERPRINT = "a1b2c3d4e5f60718"  # one deployment's prompt settings: one folder of pending records


def _listing(records: int, shard_documents: int, latency_ms: float) -> None:
    """The look that lists the pending records and cuts them into shards, over ``records`` keys (empty
    objects, keyed as the function keys pending records: what is listed is keys only), with no delay and
    with ``latency_ms``: moto's own work apart from the requests' waits."""
    import hashlib
    import time

    import boto3
    from moto import mock_aws

    from contextual_kb.deferred.contextualize import Contextualizer, Options
    from contextual_kb.deferred.offline import INTERMEDIATE, REGION
    from contextual_kb.deferred.shards import list_shards, new_state

    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=INTERMEDIATE)
        for n in range(records):
            digest = hashlib.sha256(f"text {n}".encode()).hexdigest()
            source = hashlib.sha256(f"source {n}".encode()).hexdigest()[:32]
            # As runtime/pending.py keys them: <fingerprint>/<2 hex>/<text>/<source>.json
            key = f"contextual-kb/pending/{FINGERPRINT}/{digest[:2]}/{digest}/{source}.json"
            s3.put_object(Bucket=INTERMEDIATE, Key=key, Body=b"{}")
        options = Options(bucket=INTERMEDIATE, role_arn="", shard_documents=shard_documents)
        lister = Contextualizer(_delayed_s3(latency_ms), None, options)
        run = "20260101000000bench0"
        lister.claim.take(run)
        started = time.perf_counter()
        count = list_shards(new_state(run), lister)
        seconds = time.perf_counter() - started
    print(
        f"\nlisting {records:,} pending records into {count} shards of {shard_documents:,}: {seconds:.1f} s "
        f"({latency_ms:.0f} ms per S3 request)",
        flush=True,
    )


def load_documents_copied(copies: int) -> list[dict]:
    """The corpus ``copies`` times over, each copy's documents with their own name and a first line of their
    own (another text: another pending record)."""
    import copy

    out = []
    for n in range(copies):
        for document in load_documents(DATASET):
            again = copy.deepcopy(document)
            again["doc_id"] = f"{document['doc_id']}-copy{n}"
            again["chunks"][0]["content"] = f"# copy {n}\n" + again["chunks"][0]["content"]
            out.append(again)
    return out


if __name__ == "__main__":
    import argparse

    PARTS = ("cost", "speed", "scale", "workflow", "shards")
    parser = argparse.ArgumentParser(description="contexts made later: cost, speed, scale")
    # no ``choices``: Python 3.11's argparse checks an empty default list against them and refuses it
    parser.add_argument(
        "parts", nargs="*", metavar="cost|speed|scale|workflow|shards|shards-at-scale",
        help="the first five when none is given; shards-at-scale (100,000 docs, over an hour) if named",
    )  # fmt: skip
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a codebase-format corpus")
    parser.add_argument("--documents", type=int, default=100_000, help="shards-at-scale: pending documents")
    parser.add_argument("--copies", type=int, help=argparse.SUPPRESS)  # _single-at-scale, the child
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--latency-ms", type=float, default=20.0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--side-by-side", action="store_true",
        help="shards-at-scale: both paths at once (the default from 40 GB of memory; each takes 11-15 GB)",
    )  # fmt: skip
    args = parser.parse_args()
    if unknown := sorted(set(args.parts) - {*PARTS, "shards-at-scale", "_single-at-scale"}):
        parser.error(
            f"unknown part {unknown[0]!r}: choose cost, speed, scale, workflow, shards or shards-at-scale"
        )
    DATASET = args.dataset
    parts = args.parts or list(PARTS)
    if "_single-at-scale" in parts:  # the child of shards-at-scale
        if args.copies is None or args.out is None:
            parser.error("_single-at-scale is shards-at-scale's child: run shards-at-scale")
        _single_at_scale(args.copies, args.out, args.latency_ms)
        raise SystemExit(0)
    if "cost" in parts:
        cost()
    if "speed" in parts:
        speed()
    if "scale" in parts:
        scale()
    if "workflow" in parts:
        workflow()
    if "shards" in parts:
        shards()
    if "shards-at-scale" in parts:
        shards_at_scale(args.documents, side_by_side=args.side_by_side)
