"""What the benchmarks share: an offline environment and the codebase corpus staged as the KB would."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "codebase"
CHUNKS_PER_BATCH = 8


def offline_environment(log_level: str = "WARNING") -> None:
    """Fake credentials (moto accepts any), no real endpoints, Powertools quiet."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": log_level,
    }.items():
        os.environ.setdefault(name, value)
    os.environ.pop("AWS_ENDPOINT_URL_S3", None)


def load_documents(dataset: Path) -> list[dict[str, Any]]:
    return json.loads((dataset / "codebase_chunks.json").read_text())


def stage_corpus(s3: Any, bucket: str, documents: list[dict[str, Any]]) -> list[Any]:
    """Each document as one file whose chunks sit in batch objects of ``CHUNKS_PER_BATCH``; source keys
    without file extensions, since the dataset has no paths."""
    from contextual_kb.local.kb_staging import stage_file

    return [
        stage_file(
            s3,
            bucket,
            f"s3://bench-source/{doc['doc_id']}",
            [c["content"] for c in doc["chunks"]],
            chunks_per_batch=CHUNKS_PER_BATCH,
        )
        for doc in documents
    ]
