"""What the benchmarks share: an offline environment and the codebase corpus (staging: offline_eval)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contextual_kb.evaluation.datasets import DatasetUnavailableError, codebase_dir, ensure_codebase

ROOT = Path(__file__).resolve().parent.parent
# The codebase benchmark in the cache (CKB_DATA_DIR, else the user cache), fetched there on first use.
DEFAULT_DATASET = codebase_dir()


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
    """The corpus of ``--dataset``; one that cannot be read ends the benchmark in one line (no traceback)."""
    from contextual_kb.evaluation.offline import load_corpus
    from contextual_kb.local.inputs import InputFileError

    try:
        _fetched(dataset)
        return load_corpus(dataset / "codebase_chunks.json")
    except InputFileError as exc:
        raise SystemExit(f"error: {exc}") from None


def load_dev_queries(dataset: Path) -> list[Any]:
    """The dev split's queries of ``--dataset``; unreadable: one line, as ``load_documents``."""
    from contextual_kb.evaluation.offline import load_queries
    from contextual_kb.local.inputs import InputFileError

    try:
        _fetched(dataset)
        return load_queries(dataset / "evaluation_dev.jsonl")
    except InputFileError as exc:
        raise SystemExit(f"error: {exc}") from None


def _fetched(dataset: Path) -> None:
    """The default dataset is fetched once into the cache; another is used as given. One line on failure."""
    if dataset != DEFAULT_DATASET:
        return
    try:
        ensure_codebase(lambda line: print(line, flush=True))
    except DatasetUnavailableError as exc:
        raise SystemExit(f"error: {exc}") from None
