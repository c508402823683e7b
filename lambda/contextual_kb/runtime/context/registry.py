"""Strategy by name, from configuration."""

from __future__ import annotations

from contextual_kb.runtime.context.base import ContextStrategy
from contextual_kb.runtime.settings import Settings


def build_strategy(settings: Settings) -> ContextStrategy:
    if settings.context_strategy == "claude":
        from contextual_kb.runtime.context.claude.engine import ClaudeStrategy

        return ClaudeStrategy(settings)
    if settings.context_strategy == "none":
        from contextual_kb.runtime.context.passthrough import PassThroughStrategy

        return PassThroughStrategy()
    from contextual_kb.runtime.context.structural import StructuralStrategy

    return StructuralStrategy(
        max_chars=settings.structural_max_chars, max_names=settings.structural_max_names
    )
