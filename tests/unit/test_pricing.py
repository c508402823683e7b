from __future__ import annotations

from dataclasses import astuple

import pytest

from contextual_kb.runtime import observability
from contextual_kb.runtime.context import registry
from contextual_kb.runtime.context.claude import pricing
from contextual_kb.runtime.context.claude.accounting import ModelAccounting, Usage, percentile
from contextual_kb.runtime.context.claude.pricing import (
    MODELS,
    UNKNOWN_MODEL,
    BatchPrices,
    Prices,
    batch_prices_for,
    cache_ttl_1h,
    cost_usd,
    known_model,
    min_cache_tokens,
    model_label,
    prices_for,
    unknown_model_warning,
)
from contextual_kb.runtime.errors import TransformationError
from contextual_kb.runtime.settings import Settings

HAIKU_45 = "anthropic.claude-haiku-4-5-20251001-v1:0"
HAIKU_45_PRICES = Prices(1.0, 5.0, 1.25, 2.0, 0.10)


def approx(prices: Prices | None) -> object:
    assert prices is not None
    return pytest.approx(astuple(prices))


# --- prices_for ---


def test_haiku_45_global_profile_is_list_price() -> None:
    assert prices_for("global." + HAIKU_45) == HAIKU_45_PRICES
    assert astuple(HAIKU_45_PRICES) == (1.0, 5.0, 1.25, 2.0, 0.10)
    assert prices_for(HAIKU_45) == HAIKU_45_PRICES  # in-region model id


@pytest.mark.parametrize("prefix", ["us.", "eu.", "apac.", "jp."])
def test_geographic_profiles_cost_ten_percent_more(prefix: str) -> None:
    assert astuple(prices_for(prefix + HAIKU_45)) == approx(Prices(1.10, 5.50, 1.375, 2.20, 0.11))


def test_each_family_has_its_prices() -> None:
    assert prices_for("anthropic.claude-3-haiku-20240307-v1:0") == Prices(0.25, 1.25, 0.30, 0.50, 0.03)
    assert prices_for("global.anthropic.claude-sonnet-4-5-20250929-v1:0") == Prices(
        3.0, 15.0, 3.75, 6.0, 0.30
    )


UNKNOWN_IDS = ["anthropic.claude-opus-5-v1:0", "global.anthropic.claude-opus-4-8", "amazon.nova-pro-v1:0", ""]


@pytest.mark.parametrize("model_id", UNKNOWN_IDS)
def test_unknown_model_gets_the_tables_upper_bound_prices(model_id: str) -> None:
    # Never silently low: each price is at least the highest the table knows.
    assert prices_for(model_id) == UNKNOWN_MODEL.prices
    for field in ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read"):
        assert getattr(UNKNOWN_MODEL.prices, field) == max(getattr(m.prices, field) for m in MODELS.values())
    assert astuple(UNKNOWN_MODEL.prices) == (15.0, 75.0, 18.75, 30.0, 1.5)  # Opus 4 / 4.1 today
    assert not known_model(model_id)
    assert model_label(model_id) == model_id


def test_unknown_model_upper_bound_keeps_the_geographic_markup() -> None:
    assert astuple(prices_for("us.anthropic.claude-opus-5-v1:0")) == approx(
        Prices(16.5, 82.5, 20.625, 33.0, 1.65)
    )


# Every Anthropic model Bedrock documents, by an id as Bedrock spells it (any us. / eu. / global. prefix
# works): (label, input, output, 5m write, 1h write, cache read, cache minimum, batch, 1-hour TTL).
Y, N = True, False
TABLE = {
    "anthropic.claude-haiku-4-5-20251001-v1:0": ("Claude Haiku 4.5", 1, 5, 1.25, 2, 0.1, 4096, Y, Y),
    "anthropic.claude-sonnet-4-6": ("Claude Sonnet 4.6", 3, 15, 3.75, 6, 0.3, 1024, N, N),
    "anthropic.claude-sonnet-4-5-20250929-v1:0": ("Claude Sonnet 4.5", 3, 15, 3.75, 6, 0.3, 1024, Y, Y),
    "anthropic.claude-sonnet-4-20250514-v1:0": ("Claude Sonnet 4", 3, 15, 3.75, 6, 0.3, 1024, N, N),
    "anthropic.claude-opus-4-7": ("Claude Opus 4.7", 5, 25, 6.25, 10, 0.5, 4096, N, N),
    "anthropic.claude-opus-4-6-v1": ("Claude Opus 4.6", 5, 25, 6.25, 10, 0.5, 4096, N, N),
    "anthropic.claude-opus-4-5-20251101-v1:0": ("Claude Opus 4.5", 5, 25, 6.25, 10, 0.5, 4096, Y, Y),
    "anthropic.claude-opus-4-1-20250805-v1:0": ("Claude Opus 4.1", 15, 75, 18.75, 30, 1.5, 1024, N, N),
    "anthropic.claude-opus-4-20250514-v1:0": ("Claude Opus 4", 15, 75, 18.75, 30, 1.5, 1024, N, N),
    "anthropic.claude-3-7-sonnet-20250219-v1:0": ("Claude 3.7 Sonnet", 3, 15, 3.75, 6, 0.3, 1024, N, N),
    "anthropic.claude-3-5-haiku-20241022-v1:0": ("Claude 3.5 Haiku", 0.8, 4, 1, 1.6, 0.08, 2048, N, N),
    "anthropic.claude-3-haiku-20240307-v1:0": ("Claude 3 Haiku", 0.25, 1.25, 0.3, 0.5, 0.03, 2048, Y, N),
}


@pytest.mark.parametrize("model_id", TABLE)
def test_each_documented_model_has_its_facts(model_id: str) -> None:
    label, *prices, minimum, batch, ttl_1h = TABLE[model_id]
    assert known_model(model_id)
    assert model_label(model_id) == label
    assert prices_for(model_id) == Prices(*map(float, prices))
    assert min_cache_tokens(model_id) == minimum
    assert cache_ttl_1h(model_id) is ttl_1h
    expected_batch = BatchPrices(prices[0] / 2, prices[1] / 2) if batch else None
    assert batch_prices_for(model_id) == expected_batch
    assert len(TABLE) == len(MODELS)  # every family in the table is pinned here


def test_a_later_opus_4_is_not_taken_for_opus_4() -> None:
    assert not known_model("global.anthropic.claude-opus-4-8")
    assert model_label("anthropic.claude-opus-4-20250514-v1:0") == "Claude Opus 4"


# --- Bedrock's quota facts (bedrock-quotas.md, 2026-12-06) ---

# (model id as called, burndown): quotas-token-burndown.html as quoted 2026-09/10: 15x "version 4.8", 10x
# Sonnet 5 / Opus 5 / Opus 5.5 / Fable 5.1, 5x every other Anthropic model 4.7 and below, 1x other models.
BURNDOWN = {
    "global.anthropic.claude-haiku-4-5-20251001-v1:0": 5,
    "us.anthropic.claude-sonnet-4-5-20250929-v1:0": 5,
    "global.anthropic.claude-sonnet-4-6": 5,
    "anthropic.claude-sonnet-4-20250514-v1:0": 5,
    "anthropic.claude-opus-4-20250514-v1:0": 5,
    "anthropic.claude-opus-4-1-20250805-v1:0": 5,
    "anthropic.claude-opus-4-5-20251101-v1:0": 5,
    "anthropic.claude-opus-4-6-v1": 5,
    "eu.anthropic.claude-opus-4-7": 5,
    "anthropic.claude-3-7-sonnet-20250219-v1:0": 5,
    "anthropic.claude-3-5-haiku-20241022-v1:0": 5,
    "anthropic.claude-3-haiku-20240307-v1:0": 5,
    "anthropic.claude-instant-v1": 5,  # names no version: an old one
    "global.anthropic.claude-opus-4-8-v1": 15,  # no price row: the version decides
    "anthropic.claude-opus-4-8-20260528-v1:0": 15,
    "us.anthropic.claude-sonnet-5-v1:0": 10,
    "anthropic.claude-sonnet-5-20260630-v1:0": 10,  # the date is not a minor version
    "anthropic.claude-opus-5-v1": 10,
    "global.anthropic.claude-opus-5-5": 10,
    "anthropic.claude-fable-5-1-v1:0": 10,
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-opus-4-8-v1": 15,
    "amazon.nova-pro-v1:0": 1,
    "meta.llama3-70b-instruct-v1:0": 1,
}


@pytest.mark.parametrize("model_id", BURNDOWN)
def test_output_burndown_follows_aws_burndown_page(model_id: str) -> None:
    assert pricing.output_burndown(model_id) == BURNDOWN[model_id]


def test_output_burndown_setting_overrides_the_table() -> None:
    assert pricing.output_burndown("global.anthropic.claude-haiku-4-5-20251001-v1:0", override=1) == 1
    assert pricing.output_burndown("amazon.nova-pro-v1:0", override=5) == 5


def test_each_table_row_carries_its_versions_burndown() -> None:
    # One rule: a row that disagreed with its version's rate would count differently once renamed.
    for key, facts in MODELS.items():
        version = pricing.anthropic_version(key)
        assert version is not None, key
        assert facts.output_burndown == pricing.burndown_for_version(version), key


# Anthropic's model pages (platform.claude.com/docs/en/models/<model>/overview) and Bedrock's model cards.
MAX_OUTPUT = {
    "global.anthropic.claude-haiku-4-5-20251001-v1:0": 64_000,
    "anthropic.claude-sonnet-4-5-20250929-v1:0": 64_000,
    "global.anthropic.claude-sonnet-4-6": 128_000,  # Anthropic's figure; some copies say 64K
    "anthropic.claude-opus-4-6-v1": 128_000,
    "anthropic.claude-opus-4-7": 128_000,
    "anthropic.claude-opus-4-5-20251101-v1:0": 64_000,
    "anthropic.claude-opus-4-1-20250805-v1:0": 32_000,
    "anthropic.claude-3-5-haiku-20241022-v1:0": 8_192,
    "anthropic.claude-3-haiku-20240307-v1:0": 4_096,
    "global.anthropic.claude-opus-4-8-v1": 128_000,  # not in the table: 4.6 and later are 128K
    "us.anthropic.claude-sonnet-5-v1:0": 128_000,
    "anthropic.claude-fable-5-1-v1:0": 128_000,
    "amazon.nova-pro-v1:0": 128_000,  # unknown: the table's largest, never a smaller reservation
}


@pytest.mark.parametrize("model_id", MAX_OUTPUT)
def test_max_output_tokens(model_id: str) -> None:
    assert pricing.max_output_tokens(model_id) == MAX_OUTPUT[model_id]


def test_every_row_has_a_max_output() -> None:
    assert all(m.max_output_tokens > 0 for m in MODELS.values())
    assert UNKNOWN_MODEL.max_output_tokens == max(m.max_output_tokens for m in MODELS.values())


PROFILE_ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile"


@pytest.mark.parametrize(
    ("model_id", "scope"),
    [
        ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "global"),
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "geo"),
        ("eu.anthropic.claude-sonnet-4-6", "geo"),
        ("apac.anthropic.claude-sonnet-4-6", "geo"),
        ("us-gov.anthropic.claude-sonnet-4-6", "geo"),
        ("anthropic.claude-sonnet-4-6", "in-region"),
        (f"{PROFILE_ARN}/global.anthropic.claude-sonnet-4-6", "global"),
        (f"{PROFILE_ARN}/us.anthropic.claude-sonnet-4-6", "geo"),
        ("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-sonnet-4-6", "in-region"),
        ("arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3", "in-region"),
        ("amazon.nova-pro-v1:0", "in-region"),
    ],
)
def test_profile_scope(model_id: str, scope: str) -> None:
    assert pricing.profile_scope(model_id) == scope


@pytest.mark.parametrize(
    ("model_id", "rpm", "tpm"),
    [
        # General Reference as transcribed 2026-10-07/09 (bedrock-quotas.md sections 3 and 5).
        ("anthropic.claude-sonnet-4-6", 5_000, 3_000_000),
        ("us.anthropic.claude-sonnet-4-6", 10_000, 6_000_000),
        ("global.anthropic.claude-sonnet-4-6", 10_000, 6_000_000),
        ("global.anthropic.claude-haiku-4-5-20251001-v1:0", 10_000, 5_000_000),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", 10_000, 5_000_000),
        ("anthropic.claude-haiku-4-5-20251001-v1:0", None, None),  # no in-Region row
        ("global.anthropic.claude-sonnet-5-v1:0", None, None),  # Sonnet 5: no RPM row; TPM not in the notes
        ("global.anthropic.claude-opus-4-8-v1", None, None),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", None, None),
        ("amazon.nova-pro-v1:0", None, None),
    ],
)
def test_listed_rpm_and_default_tpm_per_scope(model_id: str, rpm: int | None, tpm: int | None) -> None:
    assert pricing.listed_rpm(model_id) == rpm
    assert pricing.default_tpm(model_id) == tpm


def test_daily_quota_default_and_the_rules_date() -> None:
    assert pricing.DAILY_TOKENS_DEFAULT == 700_000_000
    assert pricing.QUOTA_RULES_AS_OF == "2026-12-06"


def test_the_older_table_views_agree_with_the_models() -> None:
    assert pricing.PRICE_TABLE["claude-haiku-4-5"] == HAIKU_45_PRICES
    assert pricing.BATCH_PRICE_TABLE["claude-haiku-4-5"] == BatchPrices(0.5, 2.5)
    assert "claude-opus-4-6" not in pricing.BATCH_PRICE_TABLE
    assert pricing.MIN_CACHE_TOKENS["claude-opus-4-6"] == 4096
    assert pricing.MODEL_LABELS["claude-sonnet-4-6"] == "Claude Sonnet 4.6"


def test_batch_prices_for_a_model_without_them_must_be_given_in_full() -> None:
    assert batch_prices_for("anthropic.claude-opus-5-v1:0") is None
    with pytest.raises(TransformationError, match="no batch prices in the table"):
        batch_prices_for("global.anthropic.claude-opus-4-6-v1", '{"input": 2.5}')
    assert batch_prices_for("global.anthropic.claude-opus-4-6-v1", '{"input": 2.5, "output": 12.5}') == (
        BatchPrices(2.5, 12.5)
    )


def test_model_prices_override_a_field() -> None:
    assert prices_for("global." + HAIKU_45, '{"input": 0.8}') == Prices(0.8, 5.0, 1.25, 2.0, 0.10)
    assert prices_for("global." + HAIKU_45, '{"cache_read": 0, "output": 4}') == Prices(
        1.0, 4.0, 1.25, 2.0, 0.0
    )


@pytest.mark.parametrize("overrides", ['{"output": "4"}', '{"input": true}', '{"input": null}'])
def test_model_prices_must_be_numbers(overrides: str) -> None:
    with pytest.raises(TransformationError, match=r"MODEL_PRICES.*numbers"):
        prices_for("global." + HAIKU_45, overrides)


def test_overrides_are_absolute_even_for_a_geographic_profile() -> None:
    prices = prices_for("us." + HAIKU_45, '{"output": 7}')
    assert prices is not None
    assert prices.output == 7.0
    assert prices.input == pytest.approx(1.10)


def test_empty_override_is_no_override() -> None:
    assert prices_for("global." + HAIKU_45, "") == HAIKU_45_PRICES
    assert prices_for("global." + HAIKU_45, "{}") == HAIKU_45_PRICES


@pytest.mark.parametrize(
    "overrides",
    [
        "{not json",
        "[1, 2]",
        '"1.0"',
        '{"inputs": 1.0}',
        '{"input": 1.0, "cache_write": 2}',
        '{"input": -0.5}',
        '{"input": "cheap"}',
        '{"input": null}',
        '{"input": [1]}',
    ],
)
def test_invalid_model_prices_are_an_error_naming_the_variable(overrides: str) -> None:
    with pytest.raises(TransformationError, match="MODEL_PRICES"):
        prices_for("global." + HAIKU_45, overrides)


def test_unknown_field_error_lists_the_expected_fields() -> None:
    with pytest.raises(TransformationError, match=r"unknown field.*inputs.*cache_read"):
        prices_for("global." + HAIKU_45, '{"inputs": 1.0}')


def test_unknown_model_needs_every_price() -> None:
    with pytest.raises(TransformationError, match=r"MODEL_PRICES.*not in the price table.*missing"):
        prices_for("anthropic.claude-opus-5-v1:0", '{"input": 5, "output": 25}')
    full = '{"input": 5, "output": 25, "cache_write_5m": 6.25, "cache_write_1h": 10, "cache_read": 0.5}'
    assert prices_for("anthropic.claude-opus-5-v1:0", full) == Prices(5.0, 25.0, 6.25, 10.0, 0.5)


@pytest.mark.parametrize("overrides", ['{"input": NaN}', '{"output": Infinity}'])
def test_non_finite_model_prices_are_an_error(overrides: str) -> None:
    with pytest.raises(TransformationError, match="MODEL_PRICES"):
        prices_for("global." + HAIKU_45, overrides)


# --- cost_usd ---


def test_cost_of_a_hand_computed_example() -> None:
    usage = {
        "input_tokens": 1_000_000,
        "cache_write_tokens": 2_000_000,
        "cache_read_tokens": 10_000_000,
        "output_tokens": 100_000,
    }
    # 1 x $1 + 2 x $1.25 + 10 x $0.10 + 0.1 x $5
    assert cost_usd(HAIKU_45_PRICES, **usage, ttl="5m") == pytest.approx(5.0)
    # the one-hour cache write is $2/M: 1 + 4 + 1 + 0.5
    assert cost_usd(HAIKU_45_PRICES, **usage, ttl="1h") == pytest.approx(6.5)


def test_cost_of_nothing_is_zero() -> None:
    zero = cost_usd(
        HAIKU_45_PRICES, input_tokens=0, cache_write_tokens=0, cache_read_tokens=0, output_tokens=0, ttl="5m"
    )
    assert zero == 0.0


def test_each_kind_of_token_has_its_price() -> None:
    prices = Prices(1.0, 2.0, 3.0, 4.0, 5.0)
    kinds = {"input_tokens": 1.0, "output_tokens": 2.0, "cache_write_tokens": 3.0, "cache_read_tokens": 5.0}
    for kind, price in kinds.items():
        usage = dict.fromkeys(kinds, 0) | {kind: 1_000_000}
        assert cost_usd(prices, **usage, ttl="5m") == pytest.approx(price), kind
    assert prices.cache_write("1h") == 4.0
    assert prices.cache_write("5m") == 3.0


# --- min_cache_tokens ---


def test_min_cache_tokens_per_model() -> None:
    assert min_cache_tokens("global." + HAIKU_45) == 4096
    assert min_cache_tokens("anthropic.claude-sonnet-4-6") == 1024
    assert min_cache_tokens("global.anthropic.claude-opus-4-5-20251101-v1:0") == 4096
    assert min_cache_tokens("anthropic.claude-opus-4-1-20250805-v1:0") == 1024


@pytest.mark.parametrize("model_id", UNKNOWN_IDS)
def test_unknown_model_gets_the_largest_cache_minimum(model_id: str) -> None:
    # Never counts on a cache that will not be written.
    assert min_cache_tokens(model_id) == 4096 == max(m.min_cache_tokens for m in MODELS.values())
    assert not cache_ttl_1h(model_id)
    assert batch_prices_for(model_id) is None


def test_min_cache_tokens_override_wins() -> None:
    assert min_cache_tokens("global." + HAIKU_45, 2048) == 2048
    assert min_cache_tokens("amazon.nova-pro-v1:0", 8192) == 8192
    assert min_cache_tokens("global." + HAIKU_45, 0) == 4096


# --- percentile ---


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([7.0], 0.95) == 7.0
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 0.5) == 3.0  # rank ceil(2.5) = 3
    assert percentile(values, 0.95) == 5.0  # rank ceil(4.75) = 5
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 5.0
    assert values == [5.0, 1.0, 3.0, 2.0, 4.0]  # not sorted in place
    # Nearest rank, not interpolation: the median of four is the second value, not 25.
    assert percentile([40.0, 10.0, 30.0, 20.0], 0.5) == 20.0
    twenty = [float(n) for n in range(20, 0, -1)]
    assert percentile(twenty, 0.5) == 10.0
    assert percentile(twenty, 0.95) == 19.0
    assert percentile([float(n) for n in range(1, 101)], 0.95) == 95.0
    assert percentile([float(n) for n in range(1, 102)], 0.95) == 96.0  # ceil(95.95)


# --- ModelAccounting ---


def test_retries_are_attempts_beyond_calls() -> None:
    assert ModelAccounting(calls=5, attempts=8).retries == 3
    assert ModelAccounting(calls=5, attempts=5).retries == 0
    assert ModelAccounting(calls=5, attempts=3).retries == 0  # never negative


def test_add_usage_sums_tokens_and_counts_cache_writes() -> None:
    accounting = ModelAccounting()
    accounting.add_usage(Usage(input_tokens=100, cache_write_tokens=5000, output_tokens=40))
    accounting.add_usage(Usage(input_tokens=120, cache_read_tokens=5000, output_tokens=50))
    accounting.add_usage(Usage(input_tokens=90, output_tokens=30))
    accounting.add_usage(Usage(cache_write_tokens=1, cache_read_tokens=4000))
    assert (
        accounting.input_tokens,
        accounting.cache_write_tokens,
        accounting.cache_read_tokens,
        accounting.output_tokens,
    ) == (310, 5001, 9000, 120)
    assert accounting.cache_writes == 2


def test_as_log_reports_the_estimated_cost() -> None:
    accounting = ModelAccounting(prices=HAIKU_45_PRICES, cache_ttl="1h", calls=3, attempts=4)
    accounting.add_usage(Usage(1_000_000, 2_000_000, 10_000_000, 100_000))
    accounting.latencies.extend([0.2, 0.4, 1.5])
    log = accounting.as_log()
    assert log["estimated_cost_usd"] == pytest.approx(6.5)
    assert accounting.cost() == pytest.approx(6.5)
    assert log["retries"] == 1
    assert log["cache_writes"] == 1
    assert log["latency_p50_ms"] == 400
    assert log["latency_p95_ms"] == 1500


def test_as_log_without_prices_has_no_cost() -> None:
    accounting = ModelAccounting()
    accounting.add_usage(Usage(input_tokens=10))
    log = accounting.as_log()
    assert "estimated_cost_usd" in log
    assert log["estimated_cost_usd"] is None
    assert log["latency_p50_ms"] == 0
    assert log["input_tokens"] == 10


# --- the unknown-model warning ---


def test_unknown_model_warning_names_the_model_and_the_defaults() -> None:
    line = unknown_model_warning("global.anthropic.claude-opus-5")
    assert "\n" not in line
    assert "global.anthropic.claude-opus-5 is not in the model table" in line
    assert "$15 input, $75 output" in line and "4,096-token cache minimum" in line
    assert "MODEL_PRICES" in line and "MIN_CACHE_TOKENS" in line
    given = unknown_model_warning("global.anthropic.claude-opus-5", '{"input": 5}', 1024)
    assert "upper-bound" not in given and "4,096" not in given  # only the defaults really in use


class Recorder:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def claude_settings(model_id: str) -> Settings:
    return Settings.from_env(
        {
            "CONTEXT_STRATEGY": "claude",
            "MODEL_ID": model_id,
            "CONTEXT_MEMORY_PREFIX": "",
            "MODEL_REGION": "us-east-1",
        }
    )


def test_an_unknown_model_is_one_warning_per_cold_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextual_kb.runtime import handler

    recorder = Recorder()
    monkeypatch.setattr(observability, "logger", recorder)
    monkeypatch.setenv("CONTEXT_STRATEGY", "claude")
    monkeypatch.setenv("MODEL_ID", "global.anthropic.claude-opus-5")
    monkeypatch.setenv("CONTEXT_MEMORY_PREFIX", "")
    monkeypatch.setenv("MODEL_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    handler.runtime.cache_clear()
    try:
        for _ in range(3):  # warm invocations reuse the runtime
            handler.runtime()
    finally:
        handler.runtime.cache_clear()
    assert len(recorder.warnings) == 1
    assert "global.anthropic.claude-opus-5 is not in the model table" in recorder.warnings[0]


def test_a_known_model_is_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    monkeypatch.setattr(observability, "logger", recorder)
    registry.build_strategy(claude_settings("global." + HAIKU_45))
    registry.build_strategy(Settings.from_env({"CONTEXT_STRATEGY": "structural", "MODEL_ID": "nova"}))
    assert recorder.warnings == []


def test_one_rule_says_where_aws_lists_no_rpm_for_the_function_and_the_stand_in() -> None:
    """pricing.rpm_listed_none: Claude 5 and later, Opus 4.7 and later; a model the notes hold no RPM row for
    (Opus 4.5) is not taken to have none, and neither is a model that is not Claude."""
    from contextual_kb.runtime.context.claude.pricing import listed_rpm, rpm_listed_none
    from contextual_kb.runtime.context.claude.shared_quota import unlisted_rpm

    for model in ("global.anthropic.claude-sonnet-5-v1:0", "anthropic.claude-fable-5-1-v1:0",
                  "us.anthropic.claude-opus-4-8-v1:0", "global.anthropic.claude-opus-4-7"):  # fmt: skip
        assert rpm_listed_none(model) and unlisted_rpm(model, 500).startswith("MODEL_REQUESTS_PER_MINUTE=500")
    for model in ("anthropic.claude-opus-4-5-20251101-v1:0", "global.anthropic.claude-haiku-4-5-20251001-v1",
                  "anthropic.claude-sonnet-4-6", "amazon.nova-pro-v1:0", "mistral.large"):  # fmt: skip
        assert not rpm_listed_none(model) and unlisted_rpm(model, 500) == ""
    assert listed_rpm("anthropic.claude-opus-4-5-20251101-v1:0") is None  # no row here, yet kept
