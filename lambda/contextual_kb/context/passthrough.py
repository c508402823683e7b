"""``CONTEXT_STRATEGY=none``: every chunk goes back exactly as it came."""

from __future__ import annotations

from contextual_kb.context.base import ChunkContext, ContextStrategy, SourceDocument


class PassThroughStrategy(ContextStrategy):
    name = "none"

    def contexts_for(self, document: SourceDocument) -> list[ChunkContext | None]:
        return [None] * document.chunk_count
