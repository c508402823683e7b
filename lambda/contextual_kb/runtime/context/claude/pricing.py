"""Per-model facts: prices, prompt-cache minimums, batch support, 1-hour cache TTL. Pure.

Prices are USD per million tokens, Anthropic's list prices (../shared/notes/aws-facts.md); Bedrock's
``global.`` profiles charge list price, geographic ones (``us.``, ``eu.``, ...) about 10% more. They feed an
*estimate* in logs and metrics, not a bill: ``MODEL_PRICES`` overrides them.

A model id not in ``MODELS`` still works, with conservative defaults (``UNKNOWN_MODEL``), and the function
logs one warning per cold start (``unknown_model_warning``); ``ckb doctor`` says so too:

- prices: the highest of each price in the table (today Claude Opus 4 / 4.1: $15 input, $75 output, $18.75 /
  $30 cache writes, $1.50 cache reads), so the cost estimate is an upper bound, never silently low;
- cache minimum: the largest documented minimum (4,096 tokens), so the function never counts on a cache that
  will not be written (too high only costs a grouped call where per-chunk calls would have been cached);
- batch inference: no batch prices (``--batch-prices`` / ``BATCH_PRICES`` give them); no 1-hour cache TTL.

Sources (read 2026-11):
- https://platform.claude.com/docs/en/about-claude/pricing (list prices, cache write 5 min / 1 h, cache hits)
- https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum cacheable prompt per model)
- https://platform.claude.com/docs/en/build-with-claude/claude-on-amazon-bedrock-legacy (Bedrock model ids)
- https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html (Bedrock: minimums, 1-hour TTL)
- https://docs.aws.amazon.com/bedrock/latest/userguide/model-card-anthropic-claude-haiku-4-5.html (4,096)
- https://docs.aws.amazon.com/bedrock/latest/userguide/model-card-anthropic-claude-opus-4-7.html
- https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-supported.html (batch, ~50% price)
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


@dataclass(frozen=True, slots=True)
class BatchPrices:
    """Bedrock batch inference, USD per million tokens: no prompt caching, so input and output only."""

    input: float
    output: float


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the function needs to know about one model family."""

    label: str  # how people name it, for messages
    prices: Prices
    batch: BatchPrices | None  # None: batch inference not documented for it here (give --batch-prices)
    min_cache_tokens: int  # minimum cacheable prefix
    cache_ttl_1h: bool  # the 1-hour cache TTL is documented for it on Bedrock
    # Quota tokens one output token takes ("burndown rate", Bedrock's "How tokens are counted"): 5 where
    # that page lists the model, 1 where it is not confirmed here (MODEL_OUTPUT_BURNDOWN overrides).
    output_burndown: int = 1


def _half(prices: Prices) -> BatchPrices:
    # Bedrock batch inference: "about 50% of on-demand prices" (../shared/notes/aws-facts.md).
    return BatchPrices(prices.input / 2, prices.output / 2)


_HAIKU_45 = Prices(1.0, 5.0, 1.25, 2.0, 0.10)
_SONNET = Prices(3.0, 15.0, 3.75, 6.0, 0.30)  # Sonnet 3.7, 4, 4.5, 4.6
_OPUS_45 = Prices(5.0, 25.0, 6.25, 10.0, 0.50)  # Opus 4.5, 4.6, 4.7
_OPUS_4 = Prices(15.0, 75.0, 18.75, 30.0, 1.50)  # Opus 4, 4.1
_HAIKU_35 = Prices(0.80, 4.0, 1.0, 1.6, 0.08)
_HAIKU_3 = Prices(0.25, 1.25, 0.30, 0.50, 0.03)

# Keyed by the model family as it appears in Bedrock model ids (anthropic.<key>..., with or without a us. /
# eu. / global. profile prefix); the longest matching key wins. Opus 4 and Sonnet 4 are keyed with their date
# so that a later 4.x (claude-opus-4-8, ...) is not taken for them.
# Not documented in what the sources say, and chosen conservatively (see the module docstring):
# - batch: only Haiku 4.5, Sonnet 4.5, Opus 4.5 and Claude 3 Haiku are confirmed here; the others have None.
# - 1-hour TTL: Bedrock documents it for Haiku 4.5, Sonnet 4.5 and Opus 4.5 only.
# - Opus 4.7's minimum: no first-party figure found (a third party reports 2,048): the largest, 4,096.
# - Sonnet 4.5 is 1,024 in Anthropic's table and 4,096 in a copy of Bedrock's; Sonnet 4.6 is 1,024 in
#   Anthropic's, and users report caching only from 2,048. The lower value only costs a serialized first call
#   when wrong; the response's usage says what really happened (MIN_CACHE_TOKENS overrides).
# - Output burndown: AWS's page lists Opus 4 and Sonnet 4 at 5x (the rest of its list is not in what the
#   sources here hold); the others count 1 until confirmed. Under-counting costs 429s the SDK absorbs, as
#   without a shared quota; over-counting leaves quota unused.
# Lifecycle: Claude 3 Haiku reached end of life on Bedrock on 2026-09-10, Claude 3.5 Haiku on 2026-06-19;
# kept for old deployments' estimates. Claude 3 Haiku is not in Bedrock's prompt-caching list (2,048 is
# Anthropic's figure).
MODELS: dict[str, ModelFacts] = {
    "claude-haiku-4-5": ModelFacts("Claude Haiku 4.5", _HAIKU_45, _half(_HAIKU_45), 4096, True),
    "claude-sonnet-4-6": ModelFacts("Claude Sonnet 4.6", _SONNET, None, 1024, False),
    "claude-sonnet-4-5": ModelFacts("Claude Sonnet 4.5", _SONNET, _half(_SONNET), 1024, True),
    "claude-sonnet-4-20250514": ModelFacts("Claude Sonnet 4", _SONNET, None, 1024, False, output_burndown=5),
    "claude-opus-4-7": ModelFacts("Claude Opus 4.7", _OPUS_45, None, 4096, False),
    "claude-opus-4-6": ModelFacts("Claude Opus 4.6", _OPUS_45, None, 4096, False),
    "claude-opus-4-5": ModelFacts("Claude Opus 4.5", _OPUS_45, _half(_OPUS_45), 4096, True),
    "claude-opus-4-1": ModelFacts("Claude Opus 4.1", _OPUS_4, None, 1024, False),
    "claude-opus-4-20250514": ModelFacts("Claude Opus 4", _OPUS_4, None, 1024, False, output_burndown=5),
    "claude-3-7-sonnet": ModelFacts("Claude 3.7 Sonnet", _SONNET, None, 1024, False),
    "claude-3-5-haiku": ModelFacts("Claude 3.5 Haiku", _HAIKU_35, None, 2048, False),
    "claude-3-haiku": ModelFacts("Claude 3 Haiku", _HAIKU_3, _half(_HAIKU_3), 2048, False),
}

# Computed from the table, so they stay the upper bounds as models are added.
UNKNOWN_MODEL = ModelFacts(
    label="",
    prices=Prices(*(max(getattr(m.prices, f.name) for m in MODELS.values()) for f in fields(Prices))),
    batch=None,
    min_cache_tokens=max(m.min_cache_tokens for m in MODELS.values()),
    cache_ttl_1h=False,
    output_burndown=1,  # not the upper bound: see the table's notes
)
DEFAULT_MIN_CACHE_TOKENS = UNKNOWN_MODEL.min_cache_tokens

# Views by family, for readers of the older tables.
PRICE_TABLE: dict[str, Prices] = {key: m.prices for key, m in MODELS.items()}
BATCH_PRICE_TABLE: dict[str, BatchPrices] = {key: m.batch for key, m in MODELS.items() if m.batch}
MIN_CACHE_TOKENS: dict[str, int] = {key: m.min_cache_tokens for key, m in MODELS.items()}
MODEL_LABELS: dict[str, str] = {key: m.label for key, m in MODELS.items()}

_GEOGRAPHIC_PREFIXES = ("us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.")
GEOGRAPHIC_MARKUP = 1.10


def _family(model_id: str) -> str | None:
    matches = [key for key in MODELS if key in model_id]
    return max(matches, key=len) if matches else None


def model_facts(model_id: str) -> ModelFacts | None:
    """The table's facts for ``model_id`` (a model id, profile id or ARN naming the model), or None."""
    family = _family(model_id)
    return MODELS[family] if family else None


def known_model(model_id: str) -> bool:
    return _family(model_id) is not None


def unknown_model_defaults(model_prices: str = "", min_cache_override: int = 0) -> str:
    """The conservative defaults an unknown model runs with, in words (those not overridden)."""
    p = UNKNOWN_MODEL.prices
    parts = []
    if not model_prices:
        parts.append(
            f"upper-bound prices (${p.input:g} input, ${p.output:g} output, ${p.cache_write_5m:g} / "
            f"${p.cache_write_1h:g} cache writes, ${p.cache_read:g} cache reads per million tokens)"
        )
    if not min_cache_override:
        parts.append(f"a {UNKNOWN_MODEL.min_cache_tokens:,}-token cache minimum")
    parts.append("no batch prices")
    return ", ".join(parts)


def unknown_model_warning(model_id: str, model_prices: str = "", min_cache_override: int = 0) -> str:
    """One line for the log when MODEL_ID is not in the table."""
    return (
        f"model {model_id} is not in the model table (pricing.py): it runs with conservative defaults: "
        f"{unknown_model_defaults(model_prices, min_cache_override)}; set MODEL_PRICES and MIN_CACHE_TOKENS "
        "to its own figures"
    )


def min_cache_tokens(model_id: str, override: int = 0) -> int:
    if override:
        return override
    return (model_facts(model_id) or UNKNOWN_MODEL).min_cache_tokens


def output_burndown(model_id: str, override: int = 0) -> int:
    """Quota tokens an output token of ``model_id`` takes (``override``: MODEL_OUTPUT_BURNDOWN, 0 for the
    table's)."""
    if override:
        return override
    return (model_facts(model_id) or UNKNOWN_MODEL).output_burndown


def cache_ttl_1h(model_id: str) -> bool:
    """The 1-hour cache TTL is documented for this model on Bedrock (False when unknown)."""
    return (model_facts(model_id) or UNKNOWN_MODEL).cache_ttl_1h


def model_label(model_id: str) -> str:
    facts = model_facts(model_id)
    return facts.label if facts else model_id


def _marked_up(model_id: str, prices: Prices) -> Prices:
    if model_id.startswith(_GEOGRAPHIC_PREFIXES):
        return Prices(*(getattr(prices, f.name) * GEOGRAPHIC_MARKUP for f in fields(Prices)))
    return prices


def prices_for(model_id: str, overrides: str = "") -> Prices:
    """The model's prices (with the geographic-profile markup), overridden field by field. A model not in the
    table gets the table's upper bounds (``UNKNOWN_MODEL``), or, with overrides, every field from them."""
    facts = model_facts(model_id)
    base = _marked_up(model_id, facts.prices) if facts else None
    if not overrides:
        return base if base is not None else _marked_up(model_id, UNKNOWN_MODEL.prices)
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
    ``{"input": .., "output": ..}``); None for a model without batch prices in the table (unknown, or batch
    not documented for it) unless given in full."""
    facts = model_facts(model_id)
    base = facts.batch if facts else None
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
                f"batch prices: model {model_id} has no batch prices in the table: give input and output"
            )
        return BatchPrices(float(given["input"]), float(given["output"]))
    return BatchPrices(float(given.get("input", base.input)), float(given.get("output", base.output)))
