"""Load (``make test-long``): 10,000 chunks through the handler, and memory against the number of files.

The real handler on moto S3 against the Bedrock stand-in (2 ms a call): in process for the 10,000 chunks, both
in child processes for the memory test, whose tracemalloc figures must be the handler's alone. Figures at
realistic latency, and peak RSS, are ``bench/load.py``'s (``make bench-load``).
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from contextual_kb.local.bedrock_standin import BedrockStandIn, standin_subprocess
from contextual_kb.local.kb_staging import build_event, stage_file
from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.local.s3server import s3_subprocess
from contextual_kb.runtime import handler
from tests.integration.test_claude import BUCKET, assert_every_chunk_back, context_of, run, stage, summary

pytestmark = pytest.mark.long

WORDS = "ledger account balance invoice payment audit reconcile entry journal credit debit period".split()


def chunk(file: int, index: int, chars: int) -> str:
    """A distinct chunk of about ``chars`` characters."""
    words = [WORDS[(file * 31 + index * 7 + j) % len(WORDS)] for j in range(chars // 7)]
    return f"File {file} section {index}: " + " ".join(words)


def test_10000_chunks_over_100_files_all_come_back_with_a_model_context(
    s3: Any, standin: BedrockStandIn, monkeypatch: pytest.MonkeyPatch, captured: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONTEXT_MODE", "grouped")  # 500 calls; per_chunk's 10,000 take minutes here
    standin.configure(record=False)  # no need to keep 500 request bodies of ~120 KB
    documents = {f"file-{f:03d}.md": [chunk(f, i, 1200) for i in range(100)] for f in range(100)}
    event, staged = stage(s3, documents, per_batch=8)
    items = assert_every_chunk_back(s3, run(event), staged)
    assert len(items) == 10_000
    assert all(context_of(i).startswith("This chunk is from") for i in items)
    log = summary(captured)
    assert log["chunks_in"] == log["chunks_contextualized"] == 10_000
    assert log["model"]["fallbacks"] == {}


def _traced_peak(s3: Any, name: str, files: int, chunks: int, chars: int) -> int:
    """The handler's peak of Python allocations (bytes) on an event of ``files`` files of the same size."""
    staged = [
        stage_file(s3, BUCKET, f"s3://source/{name}/{f}.md", [chunk(f, i, chars) for i in range(chunks)])
        for f in range(files)
    ]
    event = build_event(BUCKET, staged)
    del staged  # the chunks it keeps are not the handler's
    gc.collect()
    tracemalloc.start()
    try:
        response = run(event, LocalLambdaContext())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(response["outputFiles"]) == files
    return peak


@pytest.fixture
def apart(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """S3 (moto) and the Bedrock stand-in (2 ms a call) each in a child process, so that their memory is not
    counted as the handler's; the handler pointed at both (claude strategy); yields an S3 client."""
    import boto3

    with s3_subprocess() as s3_url, standin_subprocess(latency_ms=2, per_token_ms=0) as bedrock_url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_url)
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", bedrock_url)
        monkeypatch.setenv("CONTEXT_STRATEGY", "claude")
        handler.runtime.cache_clear()
        try:
            yield boto3.client("s3", region_name="us-east-1", endpoint_url=s3_url)
        finally:
            handler.runtime.cache_clear()


def test_memory_does_not_grow_with_the_number_of_files(
    apart: Any, monkeypatch: pytest.MonkeyPatch, captured: pytest.CaptureFixture[str]
) -> None:
    """The issue: memory must not grow with the number of files held at once beyond what one file needs.

    The handler's peak of Python allocations with 128 files of 100 KB (10 chunks of 10 KB) against 32 such
    files (already more than the documents it opens side by side), default settings (per_chunk,
    MAX_CONCURRENCY=32) but for the prefetch: validated batches kept for later are bounded by their own
    budget (PREFETCH_MAX_BYTES, 8 MB by default, which both events fit in; tested in
    tests/unit/test_transform_prefetch.py), so here none is kept."""
    monkeypatch.setenv("PREFETCH_MAX_BYTES", "0")
    s3 = apart
    # pytest keeps every log record in memory, and httpx logs each call at INFO: not the handler's memory.
    monkeypatch.setattr(logging.getLogger("httpx2"), "disabled", True)
    run(stage(s3, {"warm-up.md": ["Warm-up.", "Two."]})[0])  # the runtime (clients, imports) is built
    few = _traced_peak(s3, "few", 32, 10, 10_000)
    many = _traced_peak(s3, "many", 128, 10, 10_000)
    assert summary(captured)["model"]["fallbacks"] == {}
    figures = f"32 files: {few / 2**20:.1f} MB, 128 files: {many / 2**20:.1f} MB"
    print(f"the handler's tracemalloc peak: {figures}")
    # What grows, when this fails: documents opened side by side (runtime/context/claude/engine.py, _room,
    # MAX_OPEN_CHARS) with their batches (runtime/transform.py, Transformation.run), the read window
    # (runtime/transform.py, _read_in_order), outputs waiting (runtime/outputs.py, MAX_PENDING_BYTES).
    assert many / few < 1.25, figures


def test_the_structural_pass_grows_linearly_with_a_heading_dense_document() -> None:
    """The outline and the placing of chunks are O(n log n) in size and headings: 4x the text (and the
    headings) takes about 4.5x the time, quadratic about 16x (it took 3 s at 10,000 headings and 43 s at
    40,000). A ratio, not a time: the machine's speed cancels out. CPU time of this process, the two sizes
    measured in turn and the best of five each, so that a busy neighbour or a slow spell falls on both (one
    size measured after the other, best of three in wall time, the ratio ranged 3.0-6.8 on one machine)."""
    import time

    from contextual_kb.local.corpora import heading_dense_manual, split_at_lines
    from contextual_kb.runtime.context.base import SourceDocument
    from contextual_kb.runtime.context.structural import StructuralStrategy
    from contextual_kb.runtime.documents import assemble

    def document(chars: int) -> SourceDocument:
        chunks = split_at_lines(heading_dense_manual(chars), 1500)
        return SourceDocument("s3://b/manual.md", "manual.md", {}, assemble(chunks))

    # The test process's own heap (moto, earlier tests) would make the collector's passes cost more as the
    # run allocates: frozen, it is not scanned, and the ratio is the pass's own.
    gc.collect()
    gc.freeze()
    try:
        documents = {"2 MB": document(2_000_000), "8 MB": document(8_000_000)}
        best = dict.fromkeys(documents, float("inf"))
        for _ in range(5):
            for size, each in documents.items():
                started = time.process_time()
                contexts = StructuralStrategy().contexts_for(each)
                best[size] = min(best[size], time.process_time() - started)
                assert all(c is not None and c.source == "structural" for c in contexts)
    finally:
        gc.unfreeze()
    small, large = best["2 MB"], best["8 MB"]
    # 8x: the midpoint, on a log scale, of linear (4x) and quadratic (16x).
    assert large < 8 * small, f"2 MB: {small:.2f} s, 8 MB: {large:.2f} s"
