from __future__ import annotations

from dataclasses import astuple

import pytest

from contextual_kb.runtime.context.claude.accounting import ModelAccounting, Usage, percentile
from contextual_kb.runtime.context.claude.pricing import Prices, cost_usd, min_cache_tokens, prices_for
from contextual_kb.runtime.errors import TransformationError

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


@pytest.mark.parametrize("model_id", ["anthropic.claude-opus-5-v1:0", "amazon.nova-pro-v1:0", ""])
def test_unknown_model_has_no_prices(model_id: str) -> None:
    assert prices_for(model_id) is None


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
    assert min_cache_tokens("anthropic.claude-opus-5-v1:0") == 1024
    assert min_cache_tokens("amazon.nova-pro-v1:0") == 1024


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
