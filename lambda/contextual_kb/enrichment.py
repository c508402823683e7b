"""Putting a context on a chunk. Pure.

``contentBody`` becomes context + a blank line + the original text, byte for byte; the context alone goes
into the chunk's metadata under a documented key, capped in bytes because S3 Vectors limits filterable
metadata to 2 KB per vector (shared with the KB's own keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from contextual_kb.context.base import ChunkContext
from contextual_kb.models import ContentItem

BODY_SEPARATOR = "\n\n"
ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Enriched:
    item: ContentItem
    contextualized: bool
    metadata_truncated: bool = False


def enrich(item: ContentItem, context: ChunkContext | None, *, metadata_key: str, max_bytes: int) -> Enriched:
    """The chunk with its context, or the chunk untouched when there is no context or it is not text."""
    if context is None or not context.text or not item.is_text:
        return Enriched(item, contextualized=False)
    fields = item.dump()
    fields["contentBody"] = context.text + BODY_SEPARATOR + item.content_body
    truncated = False
    if max_bytes > 0:
        value, truncated = cap_utf8(context.text, max_bytes)
        fields["contentMetadata"] = {**(item.content_metadata or {}), metadata_key: value}
    return Enriched(ContentItem.model_validate(fields), contextualized=True, metadata_truncated=truncated)


def cap_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_bytes`` of UTF-8 (on a character boundary, marked with an ellipsis)."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text, False
    room = max_bytes - len(ELLIPSIS.encode("utf-8"))
    if room <= 0:
        return "", True
    return encoded[:room].decode("utf-8", errors="ignore").rstrip() + ELLIPSIS, True
