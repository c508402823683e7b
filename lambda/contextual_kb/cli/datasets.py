"""The codebase benchmark behind the commands' defaults: a folder given with ``--dataset``, else the cache,
fetched once from its public source (``contextual_kb.evaluation.datasets``)."""

from __future__ import annotations

from pathlib import Path

from contextual_kb.cli.errors import CliError, usage
from contextual_kb.cli.terminal import error_console, plain

SHOWN_DATASET = "the codebase benchmark (fetched once into the cache, or --dataset)"  # in --help
DATASET_HELP = (
    "A folder holding the codebase benchmark (codebase_chunks.json with evaluation_dev.jsonl or "
    "evaluation_set.jsonl), instead of the cache (CKB_DATA_DIR; fetched there on first use)."
)


def benchmark(dataset: Path | None = None, *, todo: str = "") -> tuple[Path, Path]:
    """(corpus, dev queries) of the codebase benchmark: from ``dataset``, else the cache (one progress line on
    stderr when it is fetched). One line when neither can be had; ``todo`` replaces its advice."""
    from contextual_kb.evaluation.datasets import (
        CORPUS,
        DEV_QUERIES,
        QUERIES,
        DatasetUnavailableError,
        ensure_codebase,
        locate,
    )

    if dataset is not None:
        found = locate(dataset)
        if found is None:
            raise usage("--dataset", f"{dataset}: no {CORPUS} with {DEV_QUERIES} or {QUERIES} in it")
        return found
    try:
        return ensure_codebase(lambda line: error_console().print(plain(line)))
    except DatasetUnavailableError as exc:
        if todo:
            raise CliError(
                f"could not fetch the codebase benchmark ({exc.what})", "no partial file was kept", todo
            ) from None
        raise CliError(str(exc)) from None


def benchmark_or_none(dataset: Path | None = None) -> tuple[Path, Path] | None:
    """As ``benchmark``, or None with a note on stderr when it cannot be had (the demo goes on without)."""
    try:
        return benchmark(dataset)
    except CliError as exc:
        if exc.code == 2:
            raise
        error_console().print(plain(f"note: {exc.line()}"))
        return None


def dataset_label(corpus: Path) -> str:
    """What a table calls the corpus: "codebase benchmark" only for the published file (its size and sha256),
    else the folder a --dataset named, as it is."""
    import hashlib

    from contextual_kb.evaluation.datasets import CORPUS, FILES

    published = next(f for f in FILES if f.name == CORPUS)
    try:
        same = corpus.stat().st_size == published.size and (
            hashlib.sha256(corpus.read_bytes()).hexdigest() == published.sha256
        )
    except OSError:
        same = False
    return "codebase benchmark" if same else f"the dataset in {corpus.parent} (not the codebase benchmark)"
