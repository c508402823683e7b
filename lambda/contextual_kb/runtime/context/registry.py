"""Strategy by name, from configuration."""

from __future__ import annotations

from contextual_kb.runtime.context.base import ContextStrategy
from contextual_kb.runtime.settings import Settings


def build_strategy(settings: Settings) -> ContextStrategy:
    if settings.context_strategy == "claude":
        from contextual_kb.runtime.context.claude.engine import ClaudeStrategy
        from contextual_kb.runtime.context.claude.pricing import known_model, unknown_model_warning

        # Here, not at the top: importing the package must not build the tracer (an X-Ray client, which
        # reads the user's AWS profile) for commands that never transform.
        from contextual_kb.runtime.observability import logger

        if not known_model(settings.model_id):
            # Built once per execution environment (handler.runtime), so this is one line per cold start.
            logger.warning(
                unknown_model_warning(settings.model_id, settings.model_prices, settings.min_cache_tokens)
            )
        return ClaudeStrategy(settings)
    if settings.context_strategy == "none":
        from contextual_kb.runtime.context.passthrough import PassThroughStrategy

        return PassThroughStrategy()
    from contextual_kb.runtime.context.structural import StructuralStrategy

    return StructuralStrategy(
        max_chars=settings.structural_max_chars, max_names=settings.structural_max_names
    )
