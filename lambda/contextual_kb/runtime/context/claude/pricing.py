"""Model prices and prompt-cache minimums, per model. Pure.

Prices are USD per million tokens, Anthropic's list prices (../shared/notes/aws-facts.md); Bedrock's
``global.`` profiles charge list price, geographic ones (``us.``, ``eu.``, ...) about 10% more. They feed an
*estimate* in logs and metrics, not a bill: ``MODEL_PRICES`` overrides them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace

from contextual_kb.runtime.errors import TransformationError


@dataclass(frozen=True, slots=True)
class Prices:
    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float

    def cache_write(self, ttl: str) -> float:
        return self.cache_write_1h if ttl == "1h" else self.cache_write_5m


# Keyed by the model family as it appears in Bedrock model ids; the longest matching key wins.
PRICE_TABLE: dict[str, Prices] = {
    "claude-haiku-4-5": Prices(1.0, 5.0, 1.25, 2.0, 0.10),
    "claude-3-haiku": Prices(0.25, 1.25, 0.30, 0.50, 0.03),
    "claude-sonnet-4-5": Prices(3.0, 15.0, 3.75, 6.0, 0.30),
    "claude-opus-4-5": Prices(5.0, 25.0, 6.25, 10.0, 0.50),
}


@dataclass(frozen=True, slots=True)
class BatchPrices:
    """Bedrock batch inference, USD per million tokens: no prompt caching, so input and output only."""

    input: float
    output: float


# Bedrock batch inference: half the on-demand list price for these models (AWS: "about 50% of on-demand
# prices", ../shared/notes/aws-facts.md), per model beside the on-demand table; `--batch-prices` overrides.
BATCH_PRICE_TABLE: dict[str, BatchPrices] = {
    "claude-haiku-4-5": BatchPrices(0.50, 2.50),
    "claude-3-haiku": BatchPrices(0.125, 0.625),
    "claude-sonnet-4-5": BatchPrices(1.50, 7.50),
    "claude-opus-4-5": BatchPrices(2.50, 12.50),
}

# Minimum cacheable prefix in tokens (facts file). Sonnet 4.5 is 1,024 in Anthropic's table and 4,096 in a
# copy of Bedrock's: the lower value only costs a serialized first call when wrong, the higher one would
# lose caching, and the response's usage says what really happened either way.
MIN_CACHE_TOKENS: dict[str, int] = {
    "claude-haiku-4-5": 4096,
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
    "claude-sonnet-4-6": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4-": 1024,
    "claude-3-7-sonnet": 1024,
}
DEFAULT_MIN_CACHE_TOKENS = 1024
# How people name the models, for messages.
MODEL_LABELS: dict[str, str] = {
    "claude-haiku-4-5": "Claude Haiku 4.5",
    "claude-3-haiku": "Claude 3 Haiku",
    "claude-sonnet-4-5": "Claude Sonnet 4.5",
    "claude-sonnet-4-6": "Claude Sonnet 4.6",
    "claude-opus-4-5": "Claude Opus 4.5",
    "claude-opus-4-6": "Claude Opus 4.6",
}
_GEOGRAPHIC_PREFIXES = ("us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.")
GEOGRAPHIC_MARKUP = 1.10


def _family(model_id: str, table: dict[str, object]) -> str | None:
    matches = [key for key in table if key in model_id]
    return max(matches, key=len) if matches else None


def min_cache_tokens(model_id: str, override: int = 0) -> int:
    if override:
        return override
    family = _family(model_id, MIN_CACHE_TOKENS)  # type: ignore[arg-type]
    return MIN_CACHE_TOKENS[family] if family else DEFAULT_MIN_CACHE_TOKENS


def model_label(model_id: str) -> str:
    family = _family(model_id, MODEL_LABELS)  # type: ignore[arg-type]
    return MODEL_LABELS[family] if family else model_id


def prices_for(model_id: str, overrides: str = "") -> Prices | None:
    """The model's prices (with the geographic-profile markup), overridden field by field; None if unknown."""
    family = _family(model_id, PRICE_TABLE)  # type: ignore[arg-type]
    base = PRICE_TABLE.get(family) if family else None
    if base is not None and model_id.startswith(_GEOGRAPHIC_PREFIXES):
        base = Prices(*(getattr(base, f.name) * GEOGRAPHIC_MARKUP for f in fields(Prices)))
    if not overrides:
        return base
    try:
        given = json.loads(overrides)
        if not isinstance(given, dict):
            raise TypeError("not an object")
        known = {f.name for f in fields(Prices)}
        unknown = set(given) - known
        if unknown:
            raise TypeError(f"unknown field(s) {sorted(unknown)}; expected {sorted(known)}")
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in given.values()):
            raise TypeError("prices must be numbers")
        values = {k: float(v) for k, v in given.items()}
        if any(not math.isfinite(v) or v < 0 for v in values.values()):
            raise TypeError("prices must be finite and not negative")
    except (TypeError, ValueError) as exc:
        raise TransformationError(f"environment variable MODEL_PRICES: {exc}") from None
    if base is None:
        missing = known - set(values)
        if missing:
            raise TransformationError(
                f"environment variable MODEL_PRICES: model {model_id} is not in the price table, so every "
                f"field is needed; missing {sorted(missing)}"
            )
        return Prices(**values)
    return replace(base, **values)


def cost_usd(
    prices: Prices,
    *,
    input_tokens: int,
    cache_write_tokens: int,
    cache_read_tokens: int,
    output_tokens: int,
    ttl: str,
) -> float:
    return (
        input_tokens * prices.input
        + cache_write_tokens * prices.cache_write(ttl)
        + cache_read_tokens * prices.cache_read
        + output_tokens * prices.output
    ) / 1_000_000


def batch_prices_for(model_id: str, overrides: str = "") -> BatchPrices | None:
    """The model's batch prices (with the geographic-profile markup), overridden field by field (JSON
    ``{"input": .., "output": ..}``); None if unknown and not given in full."""
    family = _family(model_id, BATCH_PRICE_TABLE)  # type: ignore[arg-type]
    base = BATCH_PRICE_TABLE.get(family) if family else None
    if base is not None and model_id.startswith(_GEOGRAPHIC_PREFIXES):
        base = BatchPrices(base.input * GEOGRAPHIC_MARKUP, base.output * GEOGRAPHIC_MARKUP)
    if not overrides:
        return base
    try:
        given = json.loads(overrides)
        if not isinstance(given, dict) or set(given) - {"input", "output"}:
            raise TypeError('expected {"input": <USD per million>, "output": <USD per million>}')
        if any(isinstance(v, bool) or not isinstance(v, int | float) or v < 0 for v in given.values()):
            raise TypeError("prices must be numbers, not negative")
    except (TypeError, ValueError) as exc:
        raise TransformationError(f"batch prices: {exc}") from None
    if base is None:
        if set(given) != {"input", "output"}:
            raise TransformationError(
                f"batch prices: model {model_id} is not in the table: give input and output"
            )
        return BatchPrices(float(given["input"]), float(given["output"]))
    return BatchPrices(float(given.get("input", base.input)), float(given.get("output", base.output)))
