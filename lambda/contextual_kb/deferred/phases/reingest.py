"""Re-ingest: the Knowledge Base made to run the transformation again on the documents given contexts,
through the caller's ``reingest`` (``reingest.py``: marking, and ``ckb sync --reprocess``'s ingestion, or
the handler offline); with ``start_ingestion``, ``reingest`` only marks and one ingestion job is started
after (a sharded run, the workflow)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Protocol

from contextual_kb.deferred.options import Reingest, Summary
from contextual_kb.deferred.phases.work import Clients, Objects, SettleWork
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.deferred.state import RunState


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


class Reingesting(Clients, Objects, SettleWork, Protocol):
    """The re-ingestion's services."""


def finish(state: RunState, summary: Summary, reingest_: Reingest | None, work: Reingesting) -> None:
    """A settled run in one piece re-ingested and done: the documents given contexts re-ingested (or, with
    no ``reingest_``, counted for the caller to), their records settled after it (``settle.py``), the
    summary's last figures counted, the state saved ``done`` and the claim released."""
    sources = sorted(set(state.touched.values()))
    summary.awaiting_reingestion, summary.not_reingested = 0, {}  # the plan's count, counted again
    # Without a re-ingestion (--no-reingest) the caller ingests them again: settled as if marked.
    reingested = Reingested(marked=sources)
    if reingest_ is not None and sources:
        reingested = work._reingest(reingest_, sources)
        summary.model_calls_during_reingest = reingested.model_calls
        summary.reingested_documents = len(reingested.marked)
    elif sources:
        summary.notes.append(
            f"{len(sources)} document(s) got contexts and were not re-ingested (--no-reingest): "
            "ingest them again yourself (ckb sync --reprocess)"
        )
    work._after_reingestion(state, reingested, summary)
    summary.pending_after = work._pending_chunks()
    # Every chunk with text of these documents has a model context, but those still pending.
    still = state.still or {}
    summary.model_contexts = sum(
        info["with_text"] - still.get(key, 0) for key, info in state.documents.items()
    )
    state.summary = asdict(summary)
    state.phase = "done"
    work._save(state)
    work.claim.release(finished=True)
