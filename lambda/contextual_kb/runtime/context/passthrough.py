"""``CONTEXT_STRATEGY=none``: every chunk goes back exactly as it came."""

from __future__ import annotations

from contextual_kb.runtime.context.base import ChunkContext, ContextStrategy, SourceDocument
from contextual_kb.runtime.deadline import Deadline


class PassThroughStrategy(ContextStrategy):
    name = "none"

    def contexts_for(
        self, document: SourceDocument, deadline: Deadline | None = None
    ) -> list[ChunkContext | None]:
        return [None] * document.chunk_count
