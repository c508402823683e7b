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

The same table holds what Bedrock's quotas need (one table for the pricing and the quota code alike):
``output_burndown`` (quota tokens an output token takes at settlement), ``max_output_tokens`` (what Bedrock
reserves when a request leaves ``max_tokens`` unset), ``listed_rpm`` / ``default_tpm`` (what AWS lists for the
model at the profile's scope, ``profile_scope``) and ``DAILY_TOKENS_DEFAULT``. Each rule's source and date is
beside it; the research behind them, with quotes: ../shared/notes/bedrock-quotas.md (2026-12-06).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields, replace
from typing import Literal

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


ProfileScope = Literal["in-region", "geo", "global"]


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the function needs to know about one model family."""

    label: str  # how people name it, for messages
    prices: Prices
    batch: BatchPrices | None  # None: batch inference not documented for it here (give --batch-prices)
    min_cache_tokens: int  # minimum cacheable prefix
    cache_ttl_1h: bool  # the 1-hour cache TTL is documented for it on Bedrock
    # Quota tokens one output token takes at settlement ("burndown rate"): burndown_for_version's rule,
    # written out per row (a test checks they agree); MODEL_OUTPUT_BURNDOWN overrides.
    output_burndown: int = 1
    # The model's maximum output: what Bedrock reserves at admission when max_tokens is unset.
    max_output_tokens: int = 0
    # What AWS lists for the model per profile scope (None: no row listed). RPM: requests per minute;
    # TPM: the default tokens per minute (accounts may have lower ones, and may raise the adjustable ones).
    rpm: ScopedQuota | None = None
    tpm: ScopedQuota | None = None


@dataclass(frozen=True, slots=True)
class ScopedQuota:
    """One quota as AWS lists it per profile scope; None where no row is listed for that scope."""

    in_region: int | None = None
    geo: int | None = None
    global_: int | None = None

    def at(self, scope: ProfileScope) -> int | None:
        return {"in-region": self.in_region, "geo": self.geo, "global": self.global_}[scope]


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
# - Output burndown: see burndown_for_version (5x for every row here).
# - Maximum output (Anthropic's model pages, platform.claude.com/docs/en/models/<model>/overview, and
#   Bedrock's model cards, read 2026-12-06): 128K for Sonnet 4.6 and Opus 4.6/4.7 (and 4.8, Sonnet 5, Opus
#   5/5.5, Fable 5.1, Haiku 5.5); 64K for Haiku 4.5, Sonnet 4.5, Opus 4.5, Sonnet 4, 3.7 Sonnet; 32K for Opus
#   4/4.1; 8K Claude 3.5 Haiku; 4K Claude 3 Haiku. Sources disagree on Sonnet 4.6: Anthropic's page says
#   128K, third-party catalogues (Venice, toolsdock) and AWS's quota-dashboard sample ("For Claude Sonnet,
#   this is 64,000 tokens", 2025, before 4.6) say 64K. The table keeps 128K: Anthropic's own figure, and
#   the larger reservation is the one that does not under-count.
# - RPM and TPM (AWS General Reference, Bedrock quotas, as transcribed 2026-10-07/09, bedrock-quotas.md
#   section 3 and 5): Sonnet 4.6 RPM 5,000 in-Region / 10,000 cross-Region and global, TPM 3M / 6M / 6M;
#   Haiku 4.5 RPM 10,000 and TPM 5M cross-Region and global (it has no in-Region on-demand row). No other
#   row's figures are in the notes; Sonnet 5 and later have no RPM row at all.
# Lifecycle: Claude 3 Haiku reached end of life on Bedrock on 2026-09-10, Claude 3.5 Haiku on 2026-06-19;
# kept for old deployments' estimates. Claude 3 Haiku is not in Bedrock's prompt-caching list (2,048 is
# Anthropic's figure).
_SONNET_46_RPM = ScopedQuota(in_region=5_000, geo=10_000, global_=10_000)
_SONNET_46_TPM = ScopedQuota(in_region=3_000_000, geo=6_000_000, global_=6_000_000)
_HAIKU_45_RPM = ScopedQuota(geo=10_000, global_=10_000)
_HAIKU_45_TPM = ScopedQuota(geo=5_000_000, global_=5_000_000)

MODELS: dict[str, ModelFacts] = {
    "claude-haiku-4-5": ModelFacts(
        "Claude Haiku 4.5", _HAIKU_45, _half(_HAIKU_45), 4096, True, 5, 64_000, _HAIKU_45_RPM, _HAIKU_45_TPM
    ),
    "claude-sonnet-4-6": ModelFacts(
        "Claude Sonnet 4.6", _SONNET, None, 1024, False, 5, 128_000, _SONNET_46_RPM, _SONNET_46_TPM
    ),
    "claude-sonnet-4-5": ModelFacts("Claude Sonnet 4.5", _SONNET, _half(_SONNET), 1024, True, 5, 64_000),
    "claude-sonnet-4-20250514": ModelFacts("Claude Sonnet 4", _SONNET, None, 1024, False, 5, 64_000),
    "claude-opus-4-7": ModelFacts("Claude Opus 4.7", _OPUS_45, None, 4096, False, 5, 128_000),
    "claude-opus-4-6": ModelFacts("Claude Opus 4.6", _OPUS_45, None, 4096, False, 5, 128_000),
    "claude-opus-4-5": ModelFacts("Claude Opus 4.5", _OPUS_45, _half(_OPUS_45), 4096, True, 5, 64_000),
    "claude-opus-4-1": ModelFacts("Claude Opus 4.1", _OPUS_4, None, 1024, False, 5, 32_000),
    "claude-opus-4-20250514": ModelFacts("Claude Opus 4", _OPUS_4, None, 1024, False, 5, 32_000),
    "claude-3-7-sonnet": ModelFacts("Claude 3.7 Sonnet", _SONNET, None, 1024, False, 5, 64_000),
    "claude-3-5-haiku": ModelFacts("Claude 3.5 Haiku", _HAIKU_35, None, 2048, False, 5, 8_192),
    "claude-3-haiku": ModelFacts("Claude 3 Haiku", _HAIKU_3, _half(_HAIKU_3), 2048, False, 5, 4_096),
}

# Computed from the table, so they stay the upper bounds as models are added.
UNKNOWN_MODEL = ModelFacts(
    label="",
    prices=Prices(*(max(getattr(m.prices, f.name) for m in MODELS.values()) for f in fields(Prices))),
    batch=None,
    min_cache_tokens=max(m.min_cache_tokens for m in MODELS.values()),
    cache_ttl_1h=False,
    output_burndown=1,  # a model that is not Anthropic's; an Anthropic id gets its version's (below)
    max_output_tokens=max(m.max_output_tokens for m in MODELS.values()),  # the larger reservation
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


# --- Bedrock's quotas (bedrock-runtime, on-demand) ---

QUOTA_RULES_AS_OF = "2026-12-06"  # when the rules below were last checked against their sources

# Per account and Region, across every model: "Cross-Model Max Tokens Per Day", default 700,000,000
# (General Reference as transcribed 2026-10-07/09; the runtime quotas page lists the row; changed by a
# support case only). Charged the settled amount, as TPM is. https://docs.aws.amazon.com/general/latest/gr/bedrock.html
DAILY_TOKENS_DEFAULT = 700_000_000

_ANTHROPIC = re.compile(r"anthropic\.|claude", re.IGNORECASE)
# claude-<family>-<major>[-<minor>] (claude-sonnet-4-6, claude-opus-4-20250514: the 8-digit date is not a
# minor) and the older claude-<major>[-<minor>]-<family> (claude-3-7-sonnet, claude-3-haiku).
_NEW_STYLE = re.compile(r"claude-(?:haiku|sonnet|opus|fable)-(\d{1,2})(?:-(\d{1,2})(?!\d))?", re.IGNORECASE)
_OLD_STYLE = re.compile(r"claude-(\d{1,2})(?:-(\d{1,2}))?-(?:haiku|sonnet|opus|instant)", re.IGNORECASE)
_PLAIN = re.compile(r"claude-v?(\d{1,2})(?:[.-](\d{1,2})(?!\d))?", re.IGNORECASE)


def anthropic_version(model_id: str) -> tuple[int, int] | None:
    """The Claude version (major, minor) a model id, profile id or ARN names, or None if none is read."""
    for pattern in (_NEW_STYLE, _OLD_STYLE, _PLAIN):
        found = pattern.search(model_id)
        if found:
            return int(found.group(1)), int(found.group(2) or 0)
    return None


def burndown_for_version(version: tuple[int, int]) -> int:
    """Bedrock's output burndown for an Anthropic model of this version.

    "The burndown rate for Anthropic Claude models version 4.8 is 15x for output tokens ... Claude Sonnet 5,
    Claude Opus 5, and Claude Fable 5.1 is 10x ... For all other Anthropic models version 4.7 and below, the
    burndown is 5x" (quotas-token-burndown.html, as quoted word for word in 2026-09/10; one Oct-2026 quote
    adds Opus 5.5 to the 10x list). https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-token-burndown.html
    Not on the page, and chosen so as not to under-count: a version above 4.7 and below 5 is taken as 4.8
    (15x), any 5.x not listed (Sonnet 5.5, Haiku 5.5, ...) as the listed 5.x models (10x).
    """
    if version <= (4, 7):
        return 5
    if version < (5, 0):
        return 15
    return 10


def output_burndown(model_id: str, override: int = 0) -> int:
    """Quota tokens an output token of ``model_id`` takes at settlement (``override``: MODEL_OUTPUT_BURNDOWN,
    0 for the table's). The table's row; else, for an Anthropic id, its version's rate (a new Opus 4.8 id is
    15 without a price row); else 1 ("For all other models, the burndown rate is 1:1", same page)."""
    if override:
        return override
    facts = model_facts(model_id)
    if facts:
        return facts.output_burndown
    if not _ANTHROPIC.search(model_id):
        return UNKNOWN_MODEL.output_burndown
    # An Anthropic id naming no version is an old one (claude-instant-v1): "version 4.7 and below".
    return burndown_for_version(anthropic_version(model_id) or (1, 0))


def max_output_tokens(model_id: str) -> int:
    """The model's maximum output: what Bedrock reserves at admission when a request sets no max_tokens ("If
    max_tokens is not set, it defaults to the model's maximum output capacity", AWS's quota-dashboard sample,
    https://github.com/aws-samples/sample-quota-dashboard-for-amazon-bedrock, 2025). An id not in the table:
    128K for a Claude 4.6 or later (every such model page says 128K), else the table's largest."""
    facts = model_facts(model_id)
    if facts:
        return facts.max_output_tokens
    version = anthropic_version(model_id) if _ANTHROPIC.search(model_id) else None
    if version and version >= (4, 6):
        return 128_000
    return UNKNOWN_MODEL.max_output_tokens


def profile_scope(model_id: str) -> ProfileScope:
    """Which of Bedrock's quota rows a model id is counted against: ``global`` (a ``global.`` profile),
    ``geo`` (a geographic cross-Region profile: ``us.``, ``eu.``, ``apac.``, ...) or ``in-region`` (a
    foundation model id). Each has its own TPM (and RPM, where listed) row (quotas.html, 2026). An ARN is
    read by its resource id; an application inference profile's ARN does not name what it copies, so it is
    taken as in-Region (its own quota is the one it was created from: set the quotas by hand)."""
    resource = model_id.rsplit("/", 1)[-1] if model_id.startswith("arn:") else model_id
    if resource.startswith("global."):
        return "global"
    if resource.startswith(_GEOGRAPHIC_PREFIXES):
        return "geo"
    return "in-region"


def listed_rpm(model_id: str) -> int | None:
    """Requests per minute AWS lists for the model at the id's scope; None where it lists none: Bedrock
    "no longer enforces" RPM for some models since 2026-05-27 and Sonnet 5 and later have no RPM row
    (quotas-runtime.html; General Reference as transcribed 2026-10-07/09), nor does an unknown model here.
    https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-runtime.html"""
    facts = model_facts(model_id)
    return facts.rpm.at(profile_scope(model_id)) if facts and facts.rpm else None


def rpm_listed_none(model_id: str) -> bool:
    """AWS lists no requests-per-minute quota for this model on bedrock-runtime, so a configured RPM is not
    what throttles it: Claude 5 and later (the General Reference as transcribed 2026-10-07/09: "Sonnet 5 has
    only TPM rows ... and no requests-per-minute row") and Opus 4.7 and later (quotas-runtime.html's note,
    2026: "RPM quotas on the bedrock-runtime endpoint vary by model. For example, Anthropic Claude Opus 4.7
    and Clau..."; cut off in what we hold, read as naming models without one). One rule for the function's
    shared quota and the stand-in. Other models keep a configured RPM: where the notes hold no row (Opus
    4.5, say), AWS may list one, so ``listed_rpm`` None alone does not mean none is listed. Pure."""
    if "claude" not in model_id.lower():
        return False
    version = anthropic_version(model_id)
    if version is None:
        return False
    return version >= (5, 0) or ("opus" in model_id.lower() and version >= (4, 7))


def default_tpm(model_id: str) -> int | None:
    """The default tokens per minute AWS lists for the model at the id's scope (General Reference, as
    transcribed 2026-10-07/09: https://docs.aws.amazon.com/general/latest/gr/bedrock.html), None where the
    notes hold no figure. An account's own value may be lower (quotas.html: "might be lower than the default
    values") or raised: read it through Service Quotas where possible."""
    facts = model_facts(model_id)
    return facts.tpm.at(profile_scope(model_id)) if facts and facts.tpm else None


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
