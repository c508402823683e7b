"""Re-ingest: the Knowledge Base made to run the transformation again on the documents given contexts,
through the caller's ``reingest`` (``reingest.py``: marking, and ``ckb sync --reprocess``'s ingestion, or
the handler offline); with ``start_ingestion``, ``reingest`` only marks and one ingestion job is started
after (a sharded run, the workflow)."""

from __future__ import annotations

from collections.abc import Callable

from contextual_kb.deferred.options import Reingest
from contextual_kb.deferred.reingest import Reingested


def reingest(
    sources: list[str],
    reingest_: Reingest,
    start_ingestion: Callable[[], tuple[str, int | None]] | None = None,
) -> Reingested:
    got = reingest_(sources)
    reingested = got if isinstance(got, Reingested) else Reingested(marked=sources, model_calls=got)
    if start_ingestion is not None and reingested.marked:  # ``reingest_`` only marked them
        reingested.job, reingested.model_calls = start_ingestion()
    return reingested
