"""The structural pass on a heading-dense parsed manual (a heading every few lines), through the real handler
on moto S3: CONTEXT_STRATEGY=structural, 1, 4 and 20 MB, 1.5 KB chunks in batch objects of 500.

    .venv/bin/python bench/structural.py            # make bench-structural

Prints, per size: headings, chunks, the handler's seconds and MB/s. The issue's goal: 20 MB in under 60 s.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ["CONTEXT_STRATEGY"] = "structural"
for name, value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ.setdefault(name, value)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from contextual_kb.local import runner  # noqa: E402
from contextual_kb.local.corpora import heading_dense_manual, split_at_lines  # noqa: E402
from contextual_kb.local.kb_staging import build_event, stage_file  # noqa: E402

BUCKET = "bench-structural"


def main(sizes_mb: list[float]) -> None:
    print("| size | headings | chunks | handler seconds | MB/s |")
    print("|---|---|---|---|---|")
    for size in sizes_mb:
        text = heading_dense_manual(int(size * 1_000_000))
        chunks = split_at_lines(text, 1500)
        with mock_aws():
            s3 = boto3.client("s3")
            s3.create_bucket(Bucket=BUCKET)
            staged = stage_file(s3, BUCKET, "s3://source/manual.md", chunks, chunks_per_batch=500)
            result = runner.invoke(build_event(BUCKET, [staged]))
            seconds = result.seconds  # the handler's own time
        done = result.summary()
        assert done["chunks_contextualized"] == len(chunks), done
        headings = text.count("\n#") + text.startswith("#")
        print(f"| {size:g} MB | {headings:,} | {len(chunks):,} | {seconds:.1f} | {size / seconds:.1f} |")


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "sizes", nargs="*", type=float, default=[1, 4, 20], metavar="MB", help="the sizes (default: 1 4 20)"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(_arguments().sizes)
