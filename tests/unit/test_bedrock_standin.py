"""The stand-in's rules, driven directly with chosen arrival times (no HTTP, no sleeping)."""

from __future__ import annotations

from typing import Any

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig, count_tokens

MODEL = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
LONG = "<document>\n" + "ledger entry " * 2000 + "\n</document>"  # ~7,400 tokens: cacheable by Haiku 4.5
SHORT = "<document>\nA short note.\n</document>"


def body(document: str, *, cache: bool = True, ttl: str = "5m", max_tokens: int = 160) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": document}
    if cache:
        block["cache_control"] = {"type": "ephemeral", "ttl": ttl}
    return {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": "system"}],
        "messages": [
            {
                "role": "user",
                "content": [
                    block,
                    {"type": "text", "text": "Here is the chunk\n<chunk>\nledger entry\n</chunk>"},
                ],
            }
        ],
    }


def usage(standin: BedrockStandIn, request: dict[str, Any], at: float) -> dict[str, int]:
    status, reply, _ = standin.answer(MODEL, request, at)
    assert status == 200, reply
    return reply["usage"]


def test_a_cacheable_prefix_is_written_then_read() -> None:
    standin = BedrockStandIn(StandInConfig(latency_ms=300))
    first = usage(standin, body(LONG), at=100.0)
    second = usage(standin, body(LONG), at=101.0)
    prefix = count_tokens("system") + count_tokens(LONG)
    assert first["cache_creation_input_tokens"] == prefix and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == prefix and second["cache_creation_input_tokens"] == 0
    assert first["input_tokens"] == second["input_tokens"] > 0  # only the uncached rest


def test_the_entry_is_readable_only_once_the_writing_response_has_started() -> None:
    standin = BedrockStandIn(StandInConfig(latency_ms=300))
    usage(standin, body(LONG), at=100.0)
    parallel = usage(standin, body(LONG), at=100.1)  # before the first response started (100.3)
    later = usage(standin, body(LONG), at=100.5)
    assert parallel["cache_creation_input_tokens"] > 0  # pays the write again
    assert later["cache_read_input_tokens"] > 0
    assert standin.stats.cache_writes == 2
    assert standin.stats.as_dict()["max_writes_per_prefix"] == 2


def test_below_the_minimum_nothing_is_cached() -> None:
    standin = BedrockStandIn()
    for at in (1.0, 5.0):
        assert usage(standin, body(SHORT), at=at)["cache_creation_input_tokens"] == 0
    assert standin.stats.cache_writes == 0 and standin.stats.cache_reads == 0


def test_entries_expire_after_their_ttl_and_a_hit_refreshes_them() -> None:
    standin = BedrockStandIn(StandInConfig(latency_ms=0))
    usage(standin, body(LONG), at=0.0)
    assert usage(standin, body(LONG), at=299.0)["cache_read_input_tokens"] > 0  # refreshed to 599
    assert usage(standin, body(LONG), at=598.0)["cache_read_input_tokens"] > 0
    assert usage(standin, body(LONG), at=898.5)["cache_creation_input_tokens"] > 0  # expired: written again
    hour = BedrockStandIn(StandInConfig(latency_ms=0))
    usage(hour, body(LONG, ttl="1h"), at=0.0)
    assert usage(hour, body(LONG, ttl="1h"), at=3000.0)["cache_read_input_tokens"] > 0


def test_requests_per_minute_are_throttled_as_a_token_bucket() -> None:
    # the former default, now the window named "bucket" (clock-minute is the default: tested below)
    standin = BedrockStandIn(
        StandInConfig(rpm=60, burst_seconds=2.0, window="bucket")
    )  # 1 a second, 2 at once
    times = (0.0, 0.0, 0.0, 0.5, 1.0, 3.0, 3.0)  # full at 0; refills 1 a second, up to 2
    statuses = [standin.answer(MODEL, body(SHORT), at)[0] for at in times]
    assert statuses == [200, 200, 429, 429, 200, 200, 200]
    status, reply, _ = standin.answer(MODEL, body(SHORT), 3.0)
    assert (status, reply["__type"]) == (429, "ThrottlingException")
    assert standin.stats.throttled == 3


def test_answers_respect_max_tokens_and_latency_grows_with_output() -> None:
    standin = BedrockStandIn(StandInConfig(latency_ms=300, per_token_ms=2))
    _, full, delay = standin.answer(MODEL, body(SHORT), 0.0)
    assert full["stop_reason"] == "end_turn"
    assert delay == (300 + 2 * full["usage"]["output_tokens"]) / 1000
    _, cut, _ = standin.answer(MODEL, body(SHORT, max_tokens=3), 1.0)
    assert (cut["stop_reason"], cut["usage"]["output_tokens"]) == ("max_tokens", 3)


def test_invalid_bodies_and_scripted_faults() -> None:
    standin = BedrockStandIn()
    assert standin.answer(MODEL, {"messages": []}, 0.0)[0] == 400
    wrong_version = {**body(SHORT), "anthropic_version": "2026-10-21"}
    assert standin.answer(MODEL, wrong_version, 0.0)[0] == 400
    standin.fail_next(2, status=503)
    assert [standin.answer(MODEL, body(SHORT), 0.0)[0] for _ in range(3)] == [503, 503, 200]
    assert standin.stats.faults == 2 and standin.stats.invalid == 2


def test_contexts_never_cut_a_word_in_two() -> None:
    """The demo shows the stand-in's contexts: a long title or chunk is cut at a space, marked with "…"."""
    from contextual_kb.local.bedrock_standin import _contexts

    title = "Rate limiting for outbound API calls " + "withaverylongidentifier " * 6
    chunk = "elapsed = max(0.0, now - self._state.updated_at_of_the_bucket_state) " * 8
    text = _contexts(f"<document>\n{title}\nbody\n</document>", f"<chunk>\n{chunk}\n</chunk>")
    title_part, covers = text.removeprefix("This chunk is from ").split(". It covers: ")
    assert title_part.endswith("withaverylongidentifier…") and len(title_part) <= 100
    assert covers.endswith("…."), covers
    words = set(chunk.split()) | set(title.split())
    assert all(w.rstrip("…") in words for w in covers.removesuffix("….").split()), covers


def test_a_request_timed_before_the_last_one_takes_back_no_refill() -> None:
    """Requests are timed on arrival and reach the quota's lock out of order: one timed earlier than the
    last let in is judged at the later time (it took back the refill the later one had been given, and
    refused calls a bucket in order lets in)."""
    from contextual_kb.local.bedrock_standin import TokenBucket

    bucket = TokenBucket(per_minute=600, burst_seconds=0.5)  # 10 a second, 5 at once
    assert bucket.allows(1, 100.0)  # the bucket starts full
    assert bucket.allows(1, 100.5)  # still full: the half second's refill overflowed
    bucket.take(1)
    # timed before it: four left, as in order (it took back the 0.3 s of refill, 3 calls, the later one had)
    assert bucket.allows(1, 100.2)
    bucket.take(1)
    assert bucket.level == 3


def test_a_request_reserves_its_cache_read_and_max_tokens_and_settles_at_its_end() -> None:
    """Issue 41, item 14, kept behind the switch ``reserve_cache_reads`` (AWS's agent toolkit, May 2026) and
    on the bucket window it was written for: a request reserves input + cache write + cache read +
    max_tokens at its start (a 429 if the quota does not hold that), and at its end keeps input + cache
    write + output x burndown: the cache read and the unused max_tokens come back."""
    # output counted 1:1 here so that the arithmetic stays readable (Haiku 4.5's 5x has its own test)
    config = StandInConfig(latency_ms=300, per_token_ms=0, tpm=60_000, burst_seconds=10.0, output_burndown=1)
    config.window, config.reserve_cache_reads = "bucket", True
    standin = BedrockStandIn(config)
    question = body(LONG)["messages"][0]["content"][1]["text"]
    reserved = count_tokens("system") + count_tokens(LONG) + count_tokens(question) + 160
    assert 7_000 < reserved < 8_000  # the bucket: 1,000 tokens a second, 10,000 at most
    first = usage(standin, body(LONG), at=0.0)  # writes the cache; the bucket keeps ~2,400
    # ended at 0.3 s, the unused max_tokens given back: ~2,900 by 0.5 s, under the ~7,600 a cached call
    # reserves though it keeps only its question and its answer
    status, _, _ = standin.answer(MODEL, body(LONG), 0.5)
    assert status == 429
    second = usage(standin, body(LONG), at=6.0)  # ~8,500: reserved; the cache read is given back at 6.3 s
    assert second["cache_read_input_tokens"] > 7_000
    third = usage(standin, body(LONG), at=6.5)  # without the give-back the bucket would hold ~1,400
    kept = [
        u["input_tokens"] + u["cache_creation_input_tokens"] + u["output_tokens"]
        for u in (first, second, third)
    ]
    assert standin.stats.quota_tokens == sum(kept)  # what the quota keeps, not what it reserved
    assert [tokens for _, tokens in standin.stats.admitted] == kept


def test_an_output_token_keeps_the_models_burndown_of_the_quota() -> None:
    """The setting (MODEL_OUTPUT_BURNDOWN) or the model table's rate: 5x for Haiku 4.5 (AWS's burndown page,
    "all other Anthropic models version 4.7 and below"; it counted 1 before 2026-12-06)."""
    standin = BedrockStandIn(StandInConfig(tpm=6_000_000, output_burndown=1))
    answered = usage(standin, body(SHORT), at=0.0)
    assert standin.stats.quota_tokens == answered["input_tokens"] + answered["output_tokens"]
    table = BedrockStandIn(StandInConfig(tpm=6_000_000))  # 0: the model table's, 5 for Haiku 4.5
    answered = usage(table, body(SHORT), at=0.0)
    assert table.stats.quota_tokens == answered["input_tokens"] + 5 * answered["output_tokens"]


def test_a_throttle_says_which_quota_refused_and_whether_the_call_is_larger_than_its_bucket() -> None:
    """What the fleet benchmark reports of its 429s: the request quota's, the token quota's, and of those the
    calls reserving more than the token bucket holds (they pass only with it full)."""
    standin = BedrockStandIn(
        StandInConfig(latency_ms=300, per_token_ms=0, rpm=600, tpm=60_000, window="bucket")
    )
    assert standin.answer(MODEL, body(LONG), 0.0)[0] == 200  # ~7,600 reserved: the bucket (1,000) full
    assert standin.answer(MODEL, body(LONG), 0.1)[0] == 429  # larger than the bucket: needs it full
    assert standin.answer(MODEL, body(SHORT, cache=False), 0.2)[0] == 429  # ~180: the bucket below 0
    stats = standin.stats.as_dict()
    assert (stats["throttled"], stats["throttled_by_tokens"], stats["throttled_over_bucket"]) == (2, 2, 1)
    requests = BedrockStandIn(StandInConfig(rpm=60, tpm=60_000, window="bucket"))  # 1 request a second
    assert [requests.answer(MODEL, body(SHORT, cache=False), 0.0)[0] for _ in range(2)] == [200, 429]
    stats = requests.stats.as_dict()
    assert (stats["throttled_by_requests"], stats["throttled_by_tokens"]) == (1, 0)
