"""Load: a 50 MB document and a 10,000-chunk ingestion through the real handler; peak memory and time.

Each scenario runs in a fresh process (so its peak RSS is its own): moto S3 (in that process unless
``--s3 server``), the chunks staged as the KB would stage them, then the real Lambda handler with
``CONTEXT_STRATEGY=claude`` and default settings (per_chunk mode, MAX_CONCURRENCY=32, remembered contexts
on) against the Bedrock stand-in, which runs in its own process (300 ms + 2 ms per output token by default,
as in ``bench/contextualize.py``). The Lambda context says 1024 MB and 900 s.

Memory, per scenario:
- ``peak RSS``: ``getrusage(RUSAGE_SELF).ru_maxrss`` of the whole process (interpreter, libraries, moto);
- ``moto``: resident memory staging added (RSS after staging minus before). By default moto runs in this
  process and keeps object bodies in temporary files (``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=1``), so neither the
  staged inputs nor the outputs the handler writes sit in this process's memory; ``--s3 memory`` keeps
  moto's default (bodies under 5 MB in memory, the outputs included in the handler's figures); ``--s3
  server`` runs moto's server in a child process (the column is then that process's peak RSS), so the
  handler's process is as in Lambda (in process, moto handles every request in the handler's memory: for
  the 50 MB document, about 40 MB more resident peak; the tracemalloc peak is the same);
- ``handler increment``: the peak resident memory during the handler call (VmHWM, reset just before the
  call through /proc/self/clear_refs; ru_maxrss when that is not allowed) minus the resident memory
  just before it;
- ``tracemalloc peak``: Python allocations during the handler call, measured in a second fresh process
  (tracemalloc slows allocation down and adds its own memory, so it is kept out of the timed run);
- ``max files held``: files the transformation had loaded (batches read, document assembled) and not yet
  written, at most, counted by wrapping two of its functions from the outside.

Every chunk is checked: back exactly once, in order, its original text intact at the end of its body.

Scenarios: ``50mb`` (1,000 chunks of 50 KB, the KB's file limit), ``10k`` (100 files of 100 chunks of
~1.2 KB: 10,000 calls), ``scale10/40/160`` (10, 40, 160 files of 100 KB: 10 chunks of 10 KB) and
``scale1x160`` (the bytes of scale160 in one file); diagnostic ones, not run by default:
``scale160-noprefetch`` (PREFETCH_MAX_BYTES=0), ``scale160-open2m`` (also documents opened up to 2M
characters at once) and ``scale160-serial`` (also one document open at a time).

    .venv/bin/python bench/load.py [--scenarios 50mb,10k,scale10,scale40,scale160,scale1x160]
        [--tracemalloc SCENARIOS] [--latency-ms 300] [--per-token-ms 2] [--s3 files|memory|server] [--json F]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contextualize import standin_stats  # bench/contextualize.py
from corpus import offline_environment  # bench/corpus.py

BUCKET = "load-intermediate"
MODEL_ID = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
METADATA_KEY = "ckb_context"
RESULT = "LOAD-RESULT "
WORKER_TIMEOUT = 900  # seconds; the Lambda's own limit
_LINE = "The quick audit of ledger entries continues with reconciliation of account balances.\n"
_WORDS = (
    "ledger account balance invoice payment audit reconcile entry journal credit debit period "
    "statement vendor customer accrual deferral revenue expense asset liability equity transfer "
    "schedule approval control variance forecast budget region quarter report policy"
).split()


@dataclass(frozen=True)
class Scenario:
    name: str
    label: str
    files: int
    chunks_per_file: int
    chunk_chars: int
    per_batch: int  # chunks per batch object
    env: dict[str, str] = field(default_factory=dict)
    # Constants of contextual_kb.runtime.context.claude.engine set from the outside: diagnostics only.
    engine: dict[str, int] = field(default_factory=dict)


# The file of the scaling series: 10 chunks of 10 KB (100 KB), 8 chunks per batch object.
_SCALE_FILE = {"chunks_per_file": 10, "chunk_chars": 10_000, "per_batch": 8}
_NO_PREFETCH = {"PREFETCH_MAX_BYTES": "0"}
SCENARIOS = {
    s.name: s
    for s in [
        # The KB's file limit: 1,000 chunks of 50 KB, 10 batch objects of 5 MB (as the long test).
        Scenario("50mb", "one 50 MB document", 1, 1000, 50_000, 100),
        # 10,000 chunks of ~1.2 KB over 100 files, 8 chunks per batch object (the staging default).
        Scenario("10k", "10,000 chunks", 100, 100, 1200, 8),
        # The same file 10, 40 and 160 times: memory against the number of files.
        Scenario("scale10", "scaling: 10 files", 10, **_SCALE_FILE),
        Scenario("scale40", "scaling: 40 files", 40, **_SCALE_FILE),
        Scenario("scale160", "scaling: 160 files", 160, **_SCALE_FILE),
        # The bytes of scale160 in one file: what one file of that size needs.
        Scenario("scale1x160", "scaling: 1 file, the bytes of 160", 1, 1600, 10_000, 8),
        # Diagnostic, not run by default: scale160 without the prefetch, then also with documents opened up
        # to 2M characters, or one at a time (claude.MAX_OPEN_CHARS set from the outside).
        Scenario(
            "scale160-noprefetch", "160 files, PREFETCH_MAX_BYTES=0", 160, **_SCALE_FILE, env=_NO_PREFETCH
        ),
        Scenario(
            "scale160-open2m",
            "160 files, no prefetch, 2M chars open",
            160,
            **_SCALE_FILE,
            env=_NO_PREFETCH,
            engine={"MAX_OPEN_CHARS": 2_000_000},
        ),
        Scenario(
            "scale160-serial",
            "160 files, no prefetch, 1 document open",
            160,
            **_SCALE_FILE,
            env=_NO_PREFETCH,
            engine={"MAX_OPEN_CHARS": 1},
        ),
    ]
}
DEFAULT_SCENARIOS = "50mb,10k,scale10,scale40,scale160,scale1x160"
# The 10k scenario is CPU-bound (10,000 calls): under tracemalloc it would take minutes more.
TRACED = "50mb,scale10,scale40,scale160,scale1x160,scale160-noprefetch,scale160-open2m,scale160-serial"


def chunk_text(scenario: Scenario, file: int, index: int) -> str:
    """The chunk's text, regenerated for the check instead of being kept (it would count as memory)."""
    if scenario.chunk_chars >= 20_000:  # the 50 MB document: as tests/integration/test_claude.py
        return f"Part {index} of file {file}.\n" + _LINE * (scenario.chunk_chars // len(_LINE))
    head = f"File {file} section {index}: "
    words, n = [], file * 31 + index * 7
    size = len(head)
    while size < scenario.chunk_chars:
        word = _WORDS[n % len(_WORDS)] + (f"-{n % 97}" if n % 5 == 0 else "")
        words.append(word)
        size += len(word) + 1
        n += 1
    return head + " ".join(words)


def source_uri(file: int) -> str:
    return f"s3://load-source/docs/file-{file:04d}.md"


# --- the worker: one scenario in this process ---
def _rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _status_kb(name: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _settle() -> None:
    """Collect, and give the allocator's free memory back to the system (glibc), so that resident memory
    measured next is memory in use, not what staging freed."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_peak() -> bool:
    """Resets VmHWM (Linux >= 4.0); False where /proc/self/clear_refs cannot be written."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _maxrss_kb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux


class _Held:
    """Files whose batches the transformation holds at once: loaded, not yet written (wraps two functions
    of ``contextual_kb.runtime.transform`` from the outside; nothing under lambda/ is changed)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    def install(self) -> None:
        from contextual_kb.runtime import transform

        original_source, original_write = transform._source_document, transform.Transformation._write_file

        def source_document(*args: Any, **kwargs: Any) -> Any:
            self.now += 1
            self.most = max(self.most, self.now)
            return original_source(*args, **kwargs)

        def write_file(*args: Any, **kwargs: Any) -> Any:
            result = original_write(*args, **kwargs)
            self.now -= 1
            return result

        transform._source_document = source_document
        transform.Transformation._write_file = write_file  # type: ignore[method-assign]


def worker(scenario: Scenario, url: str, trace: bool, s3_mode: str, s3_endpoint: str) -> dict[str, Any]:
    offline_environment(log_level="INFO")  # the handler's summary log line carries the accounting
    os.environ.update({"CONTEXT_STRATEGY": "claude", "ANTHROPIC_BEDROCK_BASE_URL": url, "MODEL_ID": MODEL_ID})
    os.environ.update(scenario.env)
    import boto3
    from moto import mock_aws

    if s3_mode == "server":
        os.environ["AWS_ENDPOINT_URL_S3"] = s3_endpoint
    elif s3_mode == "files":
        from contextual_kb.local.s3server import keep_moto_bodies_in_files

        keep_moto_bodies_in_files()
    from contextual_kb.runtime.context.claude import engine as claude
    from contextual_kb.runtime.observability import logger

    for name, value in scenario.engine.items():  # diagnostic scenarios only
        setattr(claude, name, value)
    held = _Held()
    held.install()
    in_process = contextlib.nullcontext() if s3_mode == "server" else mock_aws()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log_file, in_process:
        log_handler = logger.registered_handler
        if isinstance(log_handler, logging.StreamHandler):
            log_handler.stream = log_file  # the handler's log lines go to a file, not to memory
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        out = _measure(s3, scenario, trace, held)
        log_file.seek(0)
        summaries = [json.loads(line) for line in log_file if '"transformation complete"' in line]
    model = summaries[-1].get("model", {}) if summaries else {}  # the event's, after the warm-up's
    out["fallbacks"] = sum(model.get("fallbacks", {}).values())
    out["fallback_reasons"] = model.get("fallbacks", {})
    out["model_calls"] = model.get("calls")
    out["windowed_documents"] = model.get("windowed_documents")
    return out


def _measure(s3: Any, scenario: Scenario, trace: bool, held: _Held) -> dict[str, Any]:
    """Warm up, stage, invoke the handler (measured), check the outputs."""
    from contextual_kb.local.kb_staging import build_event, stage_file
    from contextual_kb.local.lambda_context import LocalLambdaContext
    from contextual_kb.runtime import handler

    out: dict[str, Any] = {"scenario": scenario.name}
    # A warm-up invocation (one small file): the runtime (settings, clients, the SDK's lazy imports, the
    # thread pools) is built, as in a warm Lambda, so the increment below is the event's own.
    cold = _rss_kb()
    warm = stage_file(s3, BUCKET, "s3://load-source/warm-up.md", ["Warm-up.", "Two.", "Three."])
    handler.lambda_handler(build_event(BUCKET, [warm]), LocalLambdaContext())
    _settle()
    before_staging = _rss_kb()
    out["runtime_mb"] = (before_staging - cold) / 1024
    held.now = held.most = 0
    entries, bytes_in = [], 0
    for f in range(scenario.files):
        chunks = [chunk_text(scenario, f, i) for i in range(scenario.chunks_per_file)]
        bytes_in += sum(len(c.encode("utf-8")) for c in chunks)
        file = stage_file(s3, BUCKET, source_uri(f), chunks, chunks_per_batch=scenario.per_batch)
        entries.append(file.event_entry())  # not the StagedFile: it keeps the chunks
        del chunks, file
    event = {**build_event(BUCKET, []), "inputFiles": entries}
    _settle()
    baseline = _rss_kb()
    out["moto_mb"] = (baseline - before_staging) / 1024
    out["mb_in"] = bytes_in / 1e6
    reset = _reset_peak()
    if trace:
        tracemalloc.start()
    started = time.perf_counter()
    response = handler.lambda_handler(event, LocalLambdaContext(memory_limit_in_mb=1024, timeout_seconds=900))
    out["seconds"] = time.perf_counter() - started
    if trace:
        out["tracemalloc_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    peak = _status_kb("VmHWM") if reset else None
    out["peak_rss_mb"] = _maxrss_kb() / 1024
    out["handler_increment_mb"] = ((peak if peak is not None else _maxrss_kb()) - baseline) / 1024
    out["increment_from"] = "VmHWM" if peak is not None else "ru_maxrss"
    out["baseline_mb"] = baseline / 1024
    out["max_files_held"] = held.most
    out.update(_check(s3, scenario, response))
    return out


def _check(s3: Any, scenario: Scenario, response: dict[str, Any]) -> dict[str, Any]:
    """Every chunk back exactly once, in order, its original text intact (context + blank line + text)."""
    lost = contextualized = 0
    produced = response["outputFiles"]
    lost += max(0, scenario.files - len(produced)) * scenario.chunks_per_file
    for f, out_file in enumerate(produced[: scenario.files]):
        index = 0
        for ref in out_file["contentBatches"]:
            body = json.loads(s3.get_object(Bucket=BUCKET, Key=ref["key"])["Body"].read())
            for item in body["fileContents"]:
                if index >= scenario.chunks_per_file:
                    lost += 1  # an extra item: a chunk came back twice
                    index += 1
                    continue
                chunk = chunk_text(scenario, f, index)
                text = item.get("contentBody", "")
                if text != chunk and not text.endswith("\n\n" + chunk):
                    lost += 1
                contextualized += METADATA_KEY in (item.get("contentMetadata") or {})
                index += 1
        lost += max(0, scenario.chunks_per_file - index)
    return {"chunks_lost": lost, "contextualized": contextualized}


# --- the driver ---
@contextmanager
def s3_server(mode: str) -> Iterator[tuple[str, int | None]]:
    """With ``--s3 server``: moto's S3 server in a child process on 127.0.0.1; yields (URL, its pid)."""
    if mode != "server":
        yield "", None
        return
    from contextual_kb.local.s3server import free_port

    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # up to 10 s to listen
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("moto's S3 server did not start")
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def run_scenario(scenario: Scenario, args: argparse.Namespace, trace: bool) -> dict[str, Any]:
    from contextual_kb.local.bedrock_standin import standin_subprocess

    with standin_subprocess(args.latency_ms, args.per_token_ms) as url, s3_server(args.s3) as (endpoint, pid):
        command = [sys.executable, __file__, "--worker", scenario.name, "--url", url, "--s3", args.s3]
        command += ["--s3-endpoint", endpoint, *(["--trace"] if trace else [])]
        done = subprocess.run(command, capture_output=True, text=True, timeout=WORKER_TIMEOUT, check=False)
        stats = standin_stats(url)
        peak = 0
        if pid is not None:  # moto's share is the server's own peak
            with open(f"/proc/{pid}/status") as status:
                peak = next((int(x.split()[1]) for x in status if x.startswith("VmHWM:")), 0)
    line = next((x for x in done.stdout.splitlines() if x.startswith(RESULT)), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"{scenario.name}: the worker failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result = json.loads(line[len(RESULT) :])
    result["standin_answered"] = stats.get("answered")
    if pid is not None:
        result["moto_mb"] = peak / 1024
    return result


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | files | chunks | MB in | seconds | peak RSS MB | moto MB | handler increment MB | "
        "tracemalloc peak MB | max files held | chunks lost | fallbacks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = SCENARIOS[r["scenario"]]
        traced = r.get("tracemalloc_peak_mb")
        lines.append(
            f"| {s.label} | {s.files} | {s.files * s.chunks_per_file:,} | {r['mb_in']:.1f} | "
            f"{r['seconds']:.1f} | {r['peak_rss_mb']:.0f} | {r['moto_mb']:.0f} | "
            f"{r['handler_increment_mb']:.0f} | {'-' if traced is None else f'{traced:.0f}'} | "
            f"{r['max_files_held']} | {r['chunks_lost']} | {r['fallbacks']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=DEFAULT_SCENARIOS)
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument(
        "--tracemalloc",
        default=TRACED,
        help="scenarios measured again under tracemalloc, in another fresh process ('' for none)",
    )
    parser.add_argument(
        "--s3",
        choices=["files", "memory", "server"],
        default="files",
        help="moto in process with bodies in temporary files (default) or in memory, or moto's server in a "
        "child process",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--s3-endpoint", default="", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = worker(SCENARIOS[args.worker], args.url, args.trace, args.s3, args.s3_endpoint)
        print(RESULT + json.dumps(result), flush=True)
        return 0

    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    where = {
        "files": "moto in process, bodies in temporary files",
        "memory": "moto in process, bodies in memory",
        "server": "moto's server in a child process",
    }[args.s3]
    print(f"stand-in {args.latency_ms:g} ms + {args.per_token_ms:g} ms/token; {where}; {os.cpu_count()} CPUs")
    rows = []
    for name in names:
        result = run_scenario(SCENARIOS[name], args, trace=False)
        if name in args.tracemalloc.split(","):
            traced = run_scenario(SCENARIOS[name], args, trace=True)
            result["tracemalloc_peak_mb"] = traced["tracemalloc_peak_mb"]
            result["tracemalloc_run"] = {k: traced[k] for k in ("seconds", "chunks_lost", "fallbacks")}
        rows.append(result)
        print(json.dumps(result), flush=True)
    print()
    print(table(rows))
    failed = [r["scenario"] for r in rows if r["chunks_lost"] or r["fallbacks"]]
    if args.json:
        args.json.write_text(
            json.dumps({"scenarios": {n: asdict(SCENARIOS[n]) for n in names}, "rows": rows}, indent=2) + "\n"
        )
    if failed:
        print(f"\nchunks lost or fallbacks in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
