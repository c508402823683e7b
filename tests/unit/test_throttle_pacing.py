"""The waits after a 429 (``ThrottlePacing``): decorrelated jitter, handed to the SDK as retry-after-ms."""

from __future__ import annotations

import threading
from typing import Any

import httpx2
import pytest

from contextual_kb.runtime.context.claude.client import ClaudeClient, ThrottlePacing
from contextual_kb.runtime.context.claude.prompts import PromptSettings, chunk_request


def highest(low: float, high: float) -> float:
    return high


def test_waits_grow_threefold_from_the_base_to_the_cap_and_start_again_per_call() -> None:
    pacing = ThrottlePacing(base=0.1, cap=2.0, draw=highest)
    pacing.reset()
    waits = [pacing.next_wait() for _ in range(5)]
    assert waits == pytest.approx([0.3, 0.9, 2.0, 2.0, 2.0])
    pacing.reset()
    assert pacing.next_wait() == pytest.approx(0.3)


def test_a_wait_is_drawn_between_the_base_and_three_times_the_last() -> None:
    bounds: list[tuple[float, float]] = []

    def record(low: float, high: float) -> float:
        bounds.append((low, high))
        return (low + high) / 2

    pacing = ThrottlePacing(base=0.1, cap=2.0, draw=record)
    pacing.reset()
    pacing.next_wait()
    pacing.next_wait()
    assert bounds == [(0.1, pytest.approx(0.3)), (0.1, pytest.approx(0.6))]


def answer(status: int, headers: dict[str, str] | None = None) -> Any:
    response = httpx2.Response(status, headers=headers or {})
    return lambda request: response


def test_a_429_without_retry_after_gets_our_wait_in_milliseconds() -> None:
    pacing = ThrottlePacing(base=0.1, cap=2.0, draw=highest)
    pacing.reset()
    response = pacing.handle(None, answer(429))
    assert response.headers["retry-after-ms"] == "300"


@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
def test_a_retry_after_the_server_sends_is_kept(header: str) -> None:
    pacing = ThrottlePacing(draw=highest)
    response = pacing.handle(None, answer(429, {header: "7"}))
    assert response.headers[header] == "7"
    assert len([h for h in response.headers if h.startswith("retry-after")]) == 1


@pytest.mark.parametrize("status", [200, 500, 503])
def test_other_answers_are_untouched(status: int) -> None:
    response = ThrottlePacing(draw=highest).handle(None, answer(status))
    assert "retry-after-ms" not in response.headers


def test_the_sdk_waits_what_the_pacing_says(standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract this rests on: anthropic's client honours retry-after-ms (its own backoff would wait
    0.5 s, then 1 s, then 2 s)."""
    import time

    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:  # the SDK sleeps on the calling thread; the stand-in on its own
        if threading.current_thread() is threading.main_thread():
            slept.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    client = ClaudeClient(region="us-east-1", timeout_seconds=5, max_retries=4, max_connections=1)
    monkeypatch.setattr(client._pacing, "_draw", highest)
    standin.fail_next(3, status=429)
    settings = PromptSettings(model_id="global.anthropic.claude-haiku-4-5-20251001-v1:0")
    reply = client.invoke(chunk_request(settings, document="a b c", chunk="b", cache=False))
    client.close()
    assert (reply.attempts, reply.throttles) == (4, 3)
    assert slept == pytest.approx([0.3, 0.9, 2.0])
