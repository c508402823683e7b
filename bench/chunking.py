"""Chunking by structure (CHUNKING=structure): its speed on documents up to the KB's 50 MB file limit, and
its retrieval against the KB's fixed-size chunking.

    .venv/bin/python bench/chunking.py speed [MB ...]     # make bench-chunking (both parts)
    .venv/bin/python bench/chunking.py quality [--dataset PATH]   # another corpus in the codebase format

speed: one document, whole (as a data source with chunking NONE hands it over: one item, one batch), through
the real handler on moto S3 with the structural strategy: a heading-dense Markdown manual, a long Python
module, and unbroken prose (no line break, no sentence end: the worst case, cut between words). Each run in
its own process, so its peak resident memory is its own. Prints the handler's seconds, the chunks, the
output parts, and the process's peak RSS.

quality: ``ckb eval --local --chunkers fixed,structure`` at several sizes on the codebase benchmark's dev
split (each row's fixed size matched to our average chunk length), as a markdown table.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
from pathlib import Path
from typing import Any

from corpus import DEFAULT_DATASET, load_dev_queries, load_documents, offline_environment  # bench/corpus.py

offline_environment()

BUCKET = "bench-chunking"
KINDS = ("manual", "module", "prose")


def _document(kind: str, chars: int) -> tuple[str, str]:
    from contextual_kb.local.corpora import heading_dense_manual, source_file, unbroken_prose

    if kind == "manual":
        return "manual.md", heading_dense_manual(chars)
    if kind == "module":
        return "generated.py", source_file(chars)
    return "transcript.txt", unbroken_prose(chars)


def _speed_run(kind: str, megabytes: float, queue: Any) -> None:
    os.environ.update({"CONTEXT_STRATEGY": "structural", "CHUNKING": "structure"})
    import boto3
    from moto import mock_aws

    from contextual_kb.local import runner
    from contextual_kb.local.kb_staging import build_event, stage_file

    name, text = _document(kind, int(megabytes * 1_000_000))
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        staged = stage_file(s3, BUCKET, f"s3://source/{name}", [text], chunks_per_batch=1)
        result = runner.invoke(build_event(BUCKET, [staged]))
    done = result.summary()
    assert done["chunks_out"] == done["chunks_contextualized"], done
    queue.put(
        {
            "kind": kind,
            "megabytes": megabytes,
            "seconds": result.seconds,
            "chunks": done["chunks_out"],
            "parts": done["batches_out"],
            "without_outline": done["chunked_without_outline"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def speed(sizes: list[float]) -> None:
    print("| document | size | handler seconds | MB/s | chunks | output parts | peak RSS (process) |")
    print("|---|---|---|---|---|---|---|")
    context = multiprocessing.get_context("spawn")
    for kind in KINDS:
        for size in sizes:
            queue = context.Queue()
            process = context.Process(target=_speed_run, args=(kind, size, queue))
            process.start()
            row = queue.get(timeout=1800)
            process.join()
            print(
                f"| {kind} | {size:g} MB | {row['seconds']:.1f} | {size / row['seconds']:.1f} | "
                f"{row['chunks']:,} | {row['parts']} | {row['peak_rss_mb']:.0f} MB |",
                flush=True,
            )


GRID = [(150, 0), (300, 0), (300, 30), (300, 60), (500, 0), (800, 0)]


def quality(dataset: Path = DEFAULT_DATASET) -> None:
    from contextual_kb.evaluation.chunkers import compare_chunkers, versus_fixed

    documents = load_documents(dataset)
    queries = load_dev_queries(dataset)
    print(
        "| chunker | setting | chunks | avg chars | analysis | Cov@5 | Cov@10 | Cov@20 | Half@10 | "
        "Cov@10 ours - fixed [95%], up/down (p) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tokens, overlap in GRID:
        rows = compare_chunkers(
            documents,
            queries,
            chunkers=["fixed", "structure"],
            max_tokens=tokens,
            overlap_tokens=overlap,
            analyzers=["index", "code-aware"],
            ks=[5, 10, 20],
        )
        for row, gain in zip(rows, versus_fixed(rows, 10), strict=True):
            s = row.scores
            versus = ""
            if gain is not None:
                low, high = gain.points - (gain.margin or 0), gain.points + (gain.margin or 0)
                versus = (
                    f"{gain.points:+.2f} [{low:+.2f}, {high:+.2f}], {gain.better}/{gain.worse} "
                    f"(p {gain.p_value:.2f})"
                )
            print(
                f"| {row.chunker} | {row.setting} | {row.chunks} | {row.average_chars:.0f}"
                f"{'' if row.matched else ' (!)'} | {row.retrieval.removeprefix('bm25 ')} | "
                f"{s.coverage_at[5]:.2f} | {s.coverage_at[10]:.2f} | {s.coverage_at[20]:.2f} | "
                f"{s.half_at[10]:.2f} | {versus} |",
                flush=True,
            )


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parts = parser.add_subparsers(dest="part")
    timed = parts.add_parser("speed", help="one document whole, by size (the default part)")
    timed.add_argument(
        "sizes", nargs="*", type=float, default=[1, 10, 50], metavar="MB", help="default: 1 10 50"
    )
    scored = parts.add_parser("quality", help="against fixed-size chunks, as a markdown table")
    scored.add_argument(
        "--dataset", type=Path, default=DEFAULT_DATASET, help="the codebase benchmark's folder"
    )
    return parser.parse_args(argv or ["speed"])


if __name__ == "__main__":
    arguments = _arguments(sys.argv[1:])
    if arguments.part == "speed":
        speed(arguments.sizes)
    else:
        quality(arguments.dataset)
