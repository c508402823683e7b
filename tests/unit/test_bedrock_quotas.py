"""Bedrock's quotas as the stand-in counts them (local/bedrock_quotas.py; sources in its docstring and in
../shared/notes/bedrock-quotas.md, 2026-12-06): each rule driven with chosen times, no HTTP, no sleeping."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

import pytest

from contextual_kb.local.bedrock_quotas import (
    TOO_MANY_TOKENS,
    TOO_MANY_TOKENS_PER_DAY,
    FixedWindow,
    SlidingWindow,
    TokenBucket,
    reservation,
    settled_charge,
    window_quota,
)
from contextual_kb.local.bedrock_standin import (
    BedrockStandIn,
    StandInConfig,
    count_tokens,
    standin_subprocess,
)
from contextual_kb.runtime.context.claude.pricing import rpm_listed_none

HAIKU = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
SONNET_5 = "global.anthropic.claude-sonnet-5-v1:0"
LONG = "<document>\n" + "ledger entry " * 2000 + "\n</document>"  # ~7,400 tokens: cacheable by Haiku 4.5
SHORT = "<document>\nA short note.\n</document>"


def body(document: str, *, cache: bool = True, max_tokens: int = 160) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": document}
    if cache:
        block["cache_control"] = {"type": "ephemeral"}
    return {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": "system"}],
        "messages": [
            {"role": "user", "content": [block, {"type": "text", "text": "<chunk>\nentry\n</chunk>"}]}
        ],
    }


def standin(**config: Any) -> BedrockStandIn:
    """A stand-in whose wall clock is the time given (minute 0 starts at 0.0)."""
    return BedrockStandIn(StandInConfig(latency_ms=300, per_token_ms=0, wall_clock=lambda at: at, **config))


def ok(model: BedrockStandIn, request: dict[str, Any], at: float, model_id: str = HAIKU) -> dict[str, int]:
    status, reply, _ = model.answer(model_id, request, at)
    assert status == 200, reply
    return reply["usage"]


# --- the two phases ---


def test_admission_reserves_input_cache_write_and_max_tokens_and_not_a_cache_read_by_default() -> None:
    model = standin(tpm=1_000_000)
    first = ok(model, body(LONG), 0.0)  # writes the document
    second = ok(model, body(LONG), 1.0)  # reads it
    assert first["cache_creation_input_tokens"] > 7_000 and second["cache_read_input_tokens"] > 7_000
    reserved = [u["input_tokens"] + u["cache_creation_input_tokens"] + 160 for u in (first, second)]
    assert model.stats.reserved_tokens == sum(reserved)
    switched = standin(tpm=1_000_000, reserve_cache_reads=True)  # AWS's agent toolkit, May 2026
    ok(switched, body(LONG), 0.0)
    ok(switched, body(LONG), 1.0)
    assert switched.stats.reserved_tokens == sum(reserved) + second["cache_read_input_tokens"]


def test_a_reservation_over_what_is_left_is_refused_with_awss_words() -> None:
    model = standin(tpm=10_000)
    ok(model, body(LONG), 0.0)  # ~7,600 reserved
    status, reply, _ = model.answer(HAIKU, body(LONG), 0.1)  # before the write is readable: ~7,600 again
    assert (status, reply["__type"], reply["message"]) == (429, "ThrottlingException", TOO_MANY_TOKENS)
    assert model.stats.throttled_by_tokens == 1
    # a reservation the whole minute cannot hold is never let in, and counted so
    assert model.answer(HAIKU, body(SHORT, cache=False, max_tokens=20_000), 61.0)[0] == 429
    assert model.stats.throttled_over_bucket == 1


def test_settlement_keeps_input_cache_write_and_output_at_the_burndown_and_gives_the_rest_back() -> None:
    model = standin(tpm=3_000)
    request = body(SHORT, cache=False, max_tokens=2_000)
    first = ok(model, request, 0.0)  # reserves ~2,030; ends at 0.3 s and keeps input + 5 x output
    kept = first["input_tokens"] + 5 * first["output_tokens"]  # Haiku 4.5: 5x (pricing.output_burndown)
    assert model.stats.quota_tokens == kept < 2_000
    assert model.answer(HAIKU, request, 0.2)[0] == 429  # still reserved: ~970 left
    assert model.answer(HAIKU, request, 0.4)[0] == 200  # settled at 0.3: 3,000 - kept left
    # cache reads never settle: the reading call keeps its question and answer only
    cached = standin(tpm=1_000_000)
    ok(cached, body(LONG), 0.0)
    read = ok(cached, body(LONG), 1.0)
    assert cached.stats.admitted[1][1] == read["input_tokens"] + 5 * read["output_tokens"]


def test_max_tokens_is_required_and_at_most_the_models_maximum() -> None:
    model = standin(tpm=1_000_000)
    missing = {k: v for k, v in body(SHORT).items() if k != "max_tokens"}
    assert model.answer(HAIKU, missing, 0.0)[0] == 400  # InvokeModel's body: "max_tokens (Required)"
    status, reply, _ = model.answer(HAIKU, body(SHORT, max_tokens=64_001), 0.0)
    assert (status, reply["__type"]) == (400, "ValidationException")
    assert "64001 > 64000" in reply["message"]
    assert model.answer(HAIKU, body(SHORT, max_tokens=64_000), 0.0)[0] == 200
    assert model.answer("global.anthropic.claude-sonnet-4-6", body(SHORT, max_tokens=128_000), 0.0)[0] == 200
    assert model.answer(HAIKU, {**body(SHORT), "max_tokens": True}, 0.0)[0] == 400


# --- keyed per model id as called ---


def test_each_model_id_has_its_own_quotas_scope_included() -> None:
    model = standin(tpm=10_000)
    ok(model, body(SHORT, cache=False, max_tokens=9_000), 0.0)
    assert model.answer(HAIKU, body(SHORT, cache=False, max_tokens=9_000), 0.1)[0] == 429
    geo = "us.anthropic.claude-haiku-4-5-20251001-v1:0"  # the same model, the geographic row
    assert model.answer(geo, body(SHORT, cache=False, max_tokens=9_000), 0.1)[0] == 200
    assert model.answer(SONNET_5, body(SHORT, cache=False, max_tokens=9_000), 0.1)[0] == 200


def test_rpm_applies_per_model_and_is_ignored_with_one_line_where_aws_lists_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert rpm_listed_none(SONNET_5) and rpm_listed_none("anthropic.claude-fable-5-1-v1:0")
    assert not rpm_listed_none(HAIKU) and not rpm_listed_none("amazon.nova-pro-v1:0")
    model = standin(rpm=2)
    with caplog.at_level(logging.WARNING):
        statuses = [model.answer(m, body(SHORT), 0.0)[0] for m in (HAIKU,) * 3 + (SONNET_5,) * 3]
    assert statuses == [200, 200, 429, 200, 200, 200]
    lines = [r.getMessage() for r in caplog.records if "RPM" in r.getMessage()]
    assert lines == [f"stand-in: RPM 2 ignored for {SONNET_5}: AWS lists no requests-per-minute quota for it"]
    assert model.stats.rpm_ignored == [SONNET_5] and model.stats.throttled_by_requests == 1


# --- the daily quota ---


def test_the_daily_quota_across_models_is_charged_the_settled_amount() -> None:
    model = standin(tpd=20_000)  # no TPM: the day alone
    first = ok(model, body(LONG), 0.0)  # ~7,600 reserved, settles to the same plus the burndown
    second = ok(model, body(LONG), 1.0, "us.anthropic.claude-haiku-4-5-20251001-v1:0")  # another row
    third = ok(model, body(LONG), 2.0, "us.anthropic.claude-haiku-4-5-20251001-v1:0")  # a read: ~small
    charged = [
        u["input_tokens"] + u["cache_creation_input_tokens"] + 5 * u["output_tokens"]
        for u in (first, second, third)
    ]
    assert sum(charged) < 20_000 - 3_000  # the read's 7,400 tokens charged nothing
    left = 20_000 - sum(charged)  # what the day has left: a reservation of it and its input is over
    status, reply, _ = model.answer(HAIKU, body(SHORT, cache=False, max_tokens=left), 3.0)
    assert (status, reply["message"]) == (429, TOO_MANY_TOKENS_PER_DAY)
    assert model.stats.throttled_by_day == 1
    assert model.answer(HAIKU, body(SHORT, cache=False, max_tokens=left - 30), 3.0)[0] == 200
    assert model.answer(HAIKU, body(SHORT, cache=False, max_tokens=left), 86_400.0)[0] == 200  # next UTC day
    assert StandInConfig().tpd == 700_000_000


# --- the windows ---


def test_clock_minute_counts_each_wall_clock_minute_afresh() -> None:
    window = FixedWindow(100, 60.0, wall=lambda at: at + 30.0)  # the first minute ends at 30.0
    assert window.allows(100, 0.0)
    ticket = window.take(100, 0.0)
    assert not window.allows(1, 29.9) and window.allows(100, 30.0)
    # a give-back after its minute ended is dropped; output beyond the reservation is charged to the new one
    window.settle(ticket, 100, 10, 31.0)
    assert window.used == 0
    window.settle(ticket, 100, 130, 31.0)
    assert window.used == 30
    inside = window.take(50, 40.0)
    window.settle(inside, 50, 20, 41.0)  # within its minute: given back
    assert window.used == 50
    # a request timed before the open minute (requests reach the lock out of order) is counted in it: a
    # window never reopens
    assert not window.allows(51, 29.0) and window.take(50, 29.0) == window.index and window.used == 100


def test_sliding_minute_counts_the_60_seconds_before_each_admission() -> None:
    window = SlidingWindow(100)
    ticket = window.take(100, 10.0)
    assert not window.allows(1, 69.9) and window.allows(100, 70.0)
    window = SlidingWindow(100)
    ticket = window.take(100, 10.0)
    window.settle(ticket, 100, 40, 10.3)  # corrected where it stands, leaving the window at 70.0
    assert window.allows(60, 11.0) and not window.allows(61, 11.0)
    window.take(60, 11.0)
    assert window.allows(40, 70.0) and not window.allows(41, 70.0)


def test_the_bucket_window_is_the_former_per_second_bucket_with_its_burst() -> None:
    bucket = window_quota("bucket", 600, burst_seconds=0.5, wall=lambda at: at)
    assert isinstance(bucket, TokenBucket) and bucket.capacity == 5
    assert isinstance(window_quota("clock-minute", 600, burst_seconds=0.5, wall=lambda at: at), FixedWindow)
    with pytest.raises(ValueError, match="one of clock-minute, sliding-minute, bucket"):
        window_quota("hour", 600, burst_seconds=1.0, wall=lambda at: at)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        BedrockStandIn(StandInConfig(window="minute"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tpm: 0"):
        BedrockStandIn(StandInConfig(tpm=-1))
    with pytest.raises(ValueError, match="burst_seconds"):
        BedrockStandIn(StandInConfig(burst_seconds=0))


def test_the_default_window_is_the_clock_minute() -> None:
    model = standin(tpm=10_000)
    ok(model, body(SHORT, cache=False, max_tokens=9_000), 59.0)
    # ended at 59.3 and settled to ~100 within its minute: the rest is back at once, the charge held to 60.0
    assert model.answer(HAIKU, body(SHORT, cache=False, max_tokens=9_000), 59.5)[0] == 200
    assert model.answer(HAIKU, body(SHORT, cache=False, max_tokens=9_000), 59.6)[0] == 429  # reserved
    assert model.answer(HAIKU, body(SHORT, cache=False, max_tokens=9_000), 60.0)[0] == 200  # a new minute


def test_the_clock_may_start_at_the_first_request() -> None:
    model = BedrockStandIn(
        StandInConfig(latency_ms=300, per_token_ms=0, tpm=10_000, clock_from_first_request=True)
    )
    large = body(SHORT, cache=False, max_tokens=9_000)
    ok(model, large, 1_000.7)  # minute 0 begins here
    statuses = [model.answer(HAIKU, large, at)[0] for at in (1_001.5, 1_060.5, 1_060.6, 1_060.7)]
    assert statuses == [200, 200, 429, 200]  # 1,060.6 in minute 0 (two reserved), 1,060.7 in minute 1
    assert [start for start, _ in model.stats.as_dict()["estimated_tpm_quota_usage"][HAIKU]] == [0, 60]


# --- EstimatedTPMQuotaUsage ---


def test_settled_charge_matches_the_familysearch_arms() -> None:
    """EstimatedTPMQuotaUsage measured on Sonnet 4.6 (5x), 2026-10-09 (bedrock-quotas.md, section 1)."""
    assert settled_charge(uncached=26, cache_write=0, output=1_203, burndown=5) == 6_041
    assert settled_charge(uncached=13, cache_write=0, output=4, burndown=5) == 33  # 8,814 read: 0
    assert settled_charge(uncached=13, cache_write=8_814, output=4, burndown=5) == 8_847
    assert reservation(uncached=13, cache_write=0, cache_read=8_814, max_tokens=100, cache_reads=False) == 113
    assert (
        reservation(uncached=13, cache_write=0, cache_read=8_814, max_tokens=100, cache_reads=True) == 8_927
    )


def test_the_stats_carry_settled_charges_per_model_per_minute_of_completion() -> None:
    model = standin(tpm=1_000_000)
    first = ok(model, body(LONG), 59.8)  # completes at 60.1: the second minute's
    second = ok(model, body(LONG), 61.0)
    third = ok(model, body(SHORT), 62.0, SONNET_5)  # 10x
    usage = model.stats.as_dict()["estimated_tpm_quota_usage"]
    charge = [
        u["input_tokens"] + u["cache_creation_input_tokens"] + 5 * u["output_tokens"] for u in (first, second)
    ]
    assert usage[HAIKU] == [(60, sum(charge))]
    assert usage[SONNET_5] == [(60, third["input_tokens"] + 10 * third["output_tokens"])]
    assert json.loads(json.dumps(model.stats.as_dict()))["window"] == "clock-minute"


def test_the_cli_runs_each_window() -> None:
    options = {"tpm": 600, "window": "sliding-minute", "tpd": 5_000}
    with (
        standin_subprocess(latency_ms=0, per_token_ms=0, **options) as url,
        urllib.request.urlopen(f"{url}/_standin/stats", timeout=10) as response,
    ):
        stats = json.loads(response.read())
    assert stats["window"] == "sliding-minute" and stats["requests"] == 0
    assert count_tokens("abc") == 1
