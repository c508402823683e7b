"""A cold execution environment's first invocation: how long until its first model call, and what the
function's asset weighs.

    .venv/bin/python bench/cold_start.py            # make bench-cold-start

Cold start: in a fresh Python process per run (as Lambda starts one), the Bedrock stand-in (in a thread,
the same clock) and moto S3 are started, then the handler module is imported (Lambda's init phase) and
invoked once on a one-document event with the claude strategy. Measured: the import, and from the start
of the invocation to the stand-in's first request. Median of 5 processes.

Asset: the function's bundle exactly as ``cdk synth`` builds it (``stacks.bundling.build`` for arm64),
measured on disk (bytes, files, ``.pyc`` files) and zipped (deflate, as CDK zips assets).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5

CHILD = r"""
import json, os, sys, time
os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "WARNING", "CONTEXT_STRATEGY": "claude",
    "CONTEXT_MEMORY_PREFIX": "", "AWS_LAMBDA_FUNCTION_NAME": "cold-start-bench"})
from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
standin = BedrockStandIn(StandInConfig(latency_ms=5, per_token_ms=0)).start()
os.environ["ANTHROPIC_BEDROCK_BASE_URL"] = standin.url
from moto import mock_aws
mock = mock_aws(); mock.start()
import boto3
s3 = boto3.client("s3"); s3.create_bucket(Bucket="cold")
s3.put_object(Bucket="cold", Key="k/doc_1.JSON", Body=json.dumps({"fileContents": [
    {"contentBody": "A chunk about ledgers.", "contentType": "TEXT"}]}).encode())
event = {"version": "1.0", "knowledgeBaseId": "KB", "dataSourceId": "DS", "ingestionJobId": "J",
    "bucketName": "cold", "inputFiles": [{"originalFileLocation": {"type": "S3", "s3_location": {"uri": "s3://src/doc.md"}},
    "contentBatches": [{"key": "k/doc_1.JSON"}]}]}
import importlib
started = time.monotonic()
module = importlib.import_module(sys.argv[1])
imported = time.monotonic()
from contextual_kb.local.lambda_context import LocalLambdaContext
invoked = time.monotonic()
module.lambda_handler(event, LocalLambdaContext())
print(json.dumps({"import": imported - started, "first_call": standin.stats.first_request_at - invoked}))
"""


def cold_start(handler_module: str) -> dict[str, float]:
    runs = []
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, handler_module],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(run[key] for run in runs) for key in ("import", "first_call")}


def asset() -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from contextual_kb.cdk.bundling import build

    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "asset"
        build(target, "arm64")
        files = [p for p in target.rglob("*") if p.is_file()]
        archive = Path(folder) / "asset.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
            for path in files:
                out.write(path, path.relative_to(target).as_posix())
        return {
            "files": len(files),
            "pyc": sum(1 for p in files if p.suffix == ".pyc"),
            "mb_on_disk": sum(p.stat().st_size for p in files) / 1e6,
            "mb_zipped": archive.stat().st_size / 1e6,
            "top": sorted({p.relative_to(target).parts[0] for p in files}),  # type: ignore[dict-item]
        }


def main() -> None:
    handler_module = (
        "contextual_kb.runtime.handler"
        if (ROOT / "lambda" / "contextual_kb" / "runtime" / "handler.py").exists()
        else "contextual_kb.handler"
    )
    timing = cold_start(handler_module)
    size = asset()
    print(f"handler module: {handler_module}")
    print(
        f"cold start (median of {RUNS}): import {timing['import']:.2f} s, then the first model call "
        f"{timing['first_call']:.2f} s into the first invocation"
    )
    print(
        f"asset: {size['mb_zipped']:.1f} MB zipped, {size['mb_on_disk']:.1f} MB on disk, "
        f"{size['files']:,} files, {size['pyc']:,} .pyc"
    )
    print("top level:", ", ".join(size["top"]))  # type: ignore[arg-type]


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    os.chdir(ROOT)
    main()
