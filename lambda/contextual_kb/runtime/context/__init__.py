"""Context strategies: what gets prepended to each chunk. One interface, chosen by ``CONTEXT_STRATEGY``."""

from contextual_kb.runtime.context.base import ChunkContext, ContextStrategy, SourceDocument
from contextual_kb.runtime.context.registry import build_strategy

__all__ = ["ChunkContext", "ContextStrategy", "SourceDocument", "build_strategy"]
