"""Settle: each pending record of the run rewritten from what the run stored (it keeps the chunks still
without a remembered context, or goes), and, once the documents given contexts are re-ingested, what
follows it (``after_reingestion``). Every write is conditional on the version read: a record the function
wrote again meanwhile (a sync) stands as it is."""

from __future__ import annotations

from typing import Any, Protocol

from botocore.exceptions import ClientError

from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.options import Summary
from contextual_kb.deferred.phases.work import Objects
from contextual_kb.deferred.reingest import Reingested
from contextual_kb.deferred.state import RunState
from contextual_kb.runtime.pending import PendingDocument

# A conditional write or delete refused: the object changed (412), a concurrent write won (409), or is gone.
CHANGED_MEANWHILE = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}


class Settling(Objects, Protocol):
    """Settling's services."""


def parse_pending(body: bytes) -> PendingDocument | None:
    """A pending record's body as one; None when it cannot be read as one."""
    try:
        return PendingDocument.parse(body)
    except (ValueError, TypeError):
        return None


def settle(state: RunState, work: Settling) -> dict[str, int]:
    """Each pending record of this run keeps only the chunks still without a remembered context: read
    from the remembered contexts themselves, so it holds however the run went. A record whose document
    got contexts (to be re-ingested) is kept, awaiting re-ingestion, until its source is marked
    (``after_reingestion``); any other is deleted when nothing is left. Written or deleted only over
    the version read (S3 conditional requests): a record the function wrote again meanwhile (a sync)
    stands as it is. Returns, per record of this run, its chunks still without a remembered context."""
    still: dict[str, int] = {}
    touched = state.touched

    def settle_one(key: str) -> int:
        got = work._get_versioned(key)
        document = parse_pending(got[0]) if got is not None else None
        if got is None or document is None:
            return 0
        etag = got[1]
        wanted = work._still_wanted(document)
        update: dict[str, Any] = {"pending": wanted}
        if key in touched:
            update["awaiting_reingestion"] = document.awaiting_reingestion or state.run
        try:
            if not wanted and key not in touched:
                work._drop(key, if_match=etag)
            elif any(getattr(document, name) != value for name, value in update.items()):
                work._write(key, document.model_copy(update=update), if_match=etag)
        except ClientError as exc:  # recorded again since it was read: the newer record stands as it is
            if exc.response.get("Error", {}).get("Code") not in CHANGED_MEANWHILE:
                raise
        return len(wanted)

    for key, left in in_order(settle_one, list(state.documents)):
        if left:
            still[key] = left
    return still


def after_reingestion(state: RunState, reingested: Reingested, summary: Summary, work: Settling) -> None:
    """The records awaiting re-ingestion: a marked source's record no longer awaits (deleted when nothing
    is left to ask); a deleted source's record is dropped (the Knowledge Base removes the document);
    any other stays, counted, with why it was not marked."""
    marked, missing = set(reingested.marked), set(reingested.missing)
    touched = state.touched

    def after_one(key: str) -> str:
        got = work._get_versioned(key)
        document = parse_pending(got[0]) if got is not None else None
        if got is None or document is None or not document.awaiting_reingestion:
            return ""  # settled, or written again by the function since (a sync): as it stands
        source = touched[key]
        try:
            if source in missing:
                work._drop(key, if_match=got[1])
                return "missing"
            if source not in marked:
                return "awaiting"
            if document.pending:
                update = {"awaiting_reingestion": ""}
                work._write(key, document.model_copy(update=update), if_match=got[1])
            else:
                work._drop(key, if_match=got[1])
        except ClientError as exc:  # recorded again since it was read: the newer record stands
            if exc.response.get("Error", {}).get("Code") not in CHANGED_MEANWHILE:
                raise
        return ""

    for key, outcome in in_order(after_one, sorted(touched)):
        if outcome == "missing":
            summary.reingest_missing += 1
        elif outcome == "awaiting":
            summary.awaiting_reingestion += 1
            summary.not_reingested[touched[key]] = reingested.skipped.get(touched[key], "not marked")
    if summary.awaiting_reingestion:
        summary.notes.append(
            f"{summary.awaiting_reingestion} document(s) got their contexts but were not re-ingested: "
            "their records stay pending, awaiting re-ingestion; ckb contextualize marks them again"
        )
