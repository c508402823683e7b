"""Store: a step's answers checked against their documents (``records.accept``) and merged into the
documents' remembered contexts, where the Lambda reads them; the records that failed, returned. Documents
that share remembered contexts are stored one after the other: each merge reads and writes one object."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.options import Summary
from contextual_kb.deferred.phases.work import Clients, Costs, Objects
from contextual_kb.deferred.records import Accepted, Output, accept, unit_texts
from contextual_kb.deferred.state import RunState
from contextual_kb.runtime.context.claude.answers import normalize
from contextual_kb.runtime.pending import PendingDocument


class Storing(Clients, Objects, Costs, Protocol):
    """The store's services."""


@dataclass
class Stored:
    """What one document's outputs gave."""

    source: str
    contexts: dict[int, str] = field(default_factory=dict)
    rejected: Counter[str] = field(default_factory=Counter)


def spans_hash(document: PendingDocument) -> str:
    """A recorded document's chunking, hashed: answers planned for it fit it only while it is the same."""
    return hashlib.sha256(json.dumps(document.spans).encode()).hexdigest()[:16]


def store(
    state: RunState,
    record_ids_: list[str],
    outputs: dict[str, Output],
    summary: Summary,
    rejected: Counter[str],
    work: Storing,
) -> list[str]:
    """Contexts from ``outputs`` merged into the remembered contexts of their documents; the records that
    failed (or are missing), returned. Pending records are left to ``settle.settle``."""
    # Still this run's before contexts are merged (a poll, or a slice of on-demand calls, may have
    # outlasted the lease): two processes merging into one document's remembered contexts could each
    # overwrite the other's.
    work.claim.renew(force=True)
    failed: list[str] = []
    by_document: dict[str, list[tuple[str, Output | None]]] = {}
    for rid in record_ids_:
        by_document.setdefault(state.records[rid]["document"], []).append((rid, outputs.get(rid)))
    # Documents that share remembered contexts (one text, chunked otherwise) are stored one after the
    # other: each merge reads and writes the same object.
    by_memory: dict[str, list[tuple[str, list[tuple[str, Output | None]]]]] = {}
    for key, results in by_document.items():
        memory = state.documents.get(key, {}).get("memory", key)
        by_memory.setdefault(memory, []).append((key, results))
    copies: dict[str, list[str]] = {}
    for key, info in state.documents.items():
        if info.get("copy_of"):
            copies.setdefault(info["copy_of"], []).append(key)

    def store_shared(
        items: list[tuple[str, list[tuple[str, Output | None]]]],
    ) -> list[tuple[tuple[str, list[tuple[str, Output | None]]], Stored | None]]:
        return [(item, store_one(item)) for item in items]

    def store_one(item: tuple[str, list[tuple[str, Output | None]]]) -> Stored | None:
        """One document's accepted contexts, remembered (None: the answers no longer fit it)."""
        key, results = item
        document = work._read(key)
        if document is None or spans_hash(document) != state.documents.get(key, {}).get("spans"):
            return None
        units = {number: normalize(text) for number, _, text in unit_texts(document)}
        stored = Stored(document.source)
        for rid, output in results:
            if output is None or output.error:
                continue
            planned = state.records[rid]
            accepted: Accepted = accept(document, units[planned["unit"]], planned["chunks"], output)
            stored.contexts.update(accepted.contexts)
            stored.rejected.update(accepted.rejected)
        if stored.contexts:
            work._remember(document, stored.contexts)
        return stored

    stored_all = (each for _, done in in_order(store_shared, list(by_memory.values())) for each in done)
    for (key, results), stored in stored_all:
        if stored is None:
            # Deleted meanwhile, or recorded again with other chunks (a sync during the run): these
            # answers no longer fit it. Counted as failed, never asked again (stale); the new record's
            # chunks stay pending for the next run.
            failed.extend(rid for rid, _ in results)
            state.stale = [*(state.stale or []), *(rid for rid, _ in results)]
            continue
        for rid, output in results:
            if output is None or output.error:
                failed.append(rid)
                continue
            # Charged as read (``_charge_line``); the floor counts the contexts used.
            work._floor_output(summary, state.records[rid]["model"], output.output_tokens)
        rejected.update(stored.rejected)
        if stored.contexts:
            summary.contexts_stored += len(stored.contexts)
            state.touched[key] = stored.source
            for copy in copies.get(key, []):  # each source of the text is ingested again
                state.touched[copy] = state.documents[copy]["source"]
    return failed
