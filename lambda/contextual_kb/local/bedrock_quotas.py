"""Bedrock's on-demand quotas (``bedrock-runtime``) as the local stand-in counts them. Pure: times are given.

The rules, each with its source and the date it was read (research with quotes:
../shared/notes/bedrock-quotas.md, 2026-12-06; the per-model figures: runtime/context/claude/pricing.py):

- Two phases. At admission a request reserves ``input (uncached) + cache write + max_tokens`` and is refused
  ("429 ThrottlingException: Too many tokens, please wait before trying again.") when that exceeds what is
  left; at its end it settles to ``input + cache write + output x burndown`` and the rest goes back.
  Sources: AWS's re:Post article "TPM & RPM Quota Monitoring Dashboard for Amazon Bedrock" and its
  aws-samples repository (2025: "At Request Start - Reserves quota based on: Total Input Tokens +
  max_tokens"; "At Request End - Final calculation using: InputTokenCount + CacheWriteInputTokens +
  (OutputTokenCount x BurndownRate)"), https://github.com/aws-samples/sample-quota-dashboard-for-amazon-bedrock;
  the error text as users report it (anthropics/claude-code#236).
- Cache reads never settle ("CacheReadInputTokens don't contribute to this calculation and are not counted
  toward your quota", quotas-token-burndown.html as quoted 2026-09/10). Whether they are reserved is
  contradicted (AWS's agent toolkit, May 2026: reserved then released; later wording: neither): the switch
  ``reserve_cache_reads``, off by default.
- ``max_tokens`` is required in an InvokeModel Anthropic body ("max_tokens – (Required)", Bedrock user
  guide, model-parameters-anthropic-claude-messages-request-response.html, read 2026-12-06), so the
  stand-in refuses a body without it (400) rather than reserving the model's maximum; one above the
  model's maximum output is refused too, as Anthropic's API refuses it ("max_tokens: N > M, which is the
  maximum allowed number of output tokens for ...").
- Per model id as called: each id (a ``global.`` / geographic profile or an in-Region model) has its own
  TPM and RPM rows (quotas.html, 2026: "Cross-Region InvokeModel tokens per minute" beside the on-demand
  rows). RPM is off unless configured and ignored, with one log line, for a model AWS lists without one
  (Claude 5 and later, Opus 4.7 and later: ``pricing.rpm_listed_none``, the rule the function's shared quota
  follows too): Bedrock "no longer enforces" RPM there (quotas-runtime.html,
  2026-05-27 release note), so a configured figure cannot be what throttles such a model.
- A daily quota per account and Region across models, default 700M (``DAILY_TOKENS_DEFAULT``), charged the
  same settled amount and refused with "Too many tokens per day, please wait before trying again." (the
  per-day variant as reported in 2026-01 and 2026-09). Its day is taken as the UTC calendar day (AWS does
  not say), with the same two phases.
- The window is not documented (nothing says sliding minute, clock minute or per-second bucket, nor any
  burst): a named choice, ``WINDOWS``. ``clock-minute`` (the default: the one public measurement, a Nova
  model once, 2025, looked like clock minutes) counts each wall-clock minute from zero. A give-back that
  arrives after its request's minute ended is dropped: that minute is over and the current one never held
  the reservation; a settlement above the reservation (output x burndown beyond ``max_tokens``) is charged
  to the minute the request ends in, when the extra output was made. ``sliding-minute`` counts the 60 s
  before each admission; a settlement corrects the reservation where it stands while it is in the window.
  ``bucket`` is the stand-in's former per-second token bucket (refilled at TPM/60 a second, holding
  ``burst_seconds`` of it): a call larger than the bucket passes only with it full.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Literal, Protocol

Window = Literal["clock-minute", "sliding-minute", "bucket"]
WINDOWS: tuple[Window, ...] = ("clock-minute", "sliding-minute", "bucket")
DEFAULT_WINDOW: Window = "clock-minute"

TOO_MANY_TOKENS = "Too many tokens, please wait before trying again."
TOO_MANY_REQUESTS = "Too many requests, please wait before trying again."
TOO_MANY_TOKENS_PER_DAY = "Too many tokens per day, please wait before trying again."

MINUTE = 60.0
DAY = 86_400.0


def reservation(
    *, uncached: int, cache_write: int, cache_read: int, max_tokens: int, cache_reads: bool
) -> int:
    """What a request reserves at admission (``cache_reads``: the ``reserve_cache_reads`` switch). Pure."""
    return uncached + cache_write + max_tokens + (cache_read if cache_reads else 0)


def settled_charge(*, uncached: int, cache_write: int, output: int, burndown: int) -> int:
    """What a completed request is charged, against TPM, the daily quota and ``EstimatedTPMQuotaUsage``: its
    cache read never. Pure."""
    return uncached + cache_write + output * burndown


class Quota(Protocol):
    """One quota's window: admission, then settlement of what was taken."""

    capacity: float  # the most one request can ever find free

    def allows(self, amount: float, now: float) -> bool: ...

    def take(self, amount: float, now: float) -> object: ...  # a ticket for ``settle``

    def settle(self, ticket: object, reserved: float, kept: float, now: float) -> None: ...


class FixedWindow:
    """A quota counted afresh each fixed window of ``seconds`` of the wall clock (``wall`` maps the times
    given to wall-clock seconds): ``clock-minute``, and the daily quota's UTC day."""

    def __init__(self, limit: float, seconds: float, wall: Callable[[float], float]) -> None:
        self.limit = limit
        self.capacity = limit
        self.seconds = seconds
        self.wall = wall
        self.index: int | None = None
        self.used = 0.0

    def _roll(self, now: float) -> int:
        index = math.floor(self.wall(now) / self.seconds)
        # A request timed before the window already open (arrivals reach the lock out of order) is counted
        # in it: a window never reopens.
        if self.index is None or index > self.index:
            self.index, self.used = index, 0.0
        return self.index

    def allows(self, amount: float, now: float) -> bool:
        self._roll(now)
        return self.used + amount <= self.limit

    def take(self, amount: float, now: float) -> int:
        index = self._roll(now)
        self.used += amount
        return index

    def settle(self, ticket: object, reserved: float, kept: float, now: float) -> None:
        index = self._roll(now)
        if ticket == index:
            self.used = max(0.0, self.used + kept - reserved)
        elif kept > reserved:
            self.used += kept - reserved  # made in this window (module docstring)
        # else: a give-back after its window ended: dropped


class SlidingWindow:
    """A quota counted over the ``seconds`` before each admission (``sliding-minute``)."""

    def __init__(self, limit: float, seconds: float = MINUTE) -> None:
        self.limit = limit
        self.capacity = limit
        self.seconds = seconds
        self._entries: deque[list[float]] = deque()  # [time, amount], in time order
        self.used = 0.0

    def _expire(self, now: float) -> None:
        while self._entries and self._entries[0][0] <= now - self.seconds:
            self.used -= self._entries.popleft()[1]

    def allows(self, amount: float, now: float) -> bool:
        self._expire(now)
        return self.used + amount <= self.limit

    def take(self, amount: float, now: float) -> list[float]:
        self._expire(now)
        at = max(now, self._entries[-1][0]) if self._entries else now  # kept in time order
        entry = [at, amount]
        self._entries.append(entry)
        self.used += amount
        return entry

    def settle(self, ticket: object, reserved: float, kept: float, now: float) -> None:
        self._expire(now)
        assert isinstance(ticket, list)
        if ticket[0] > now - self.seconds and any(e is ticket for e in self._entries):
            self.used += kept - ticket[1]
            ticket[1] = kept  # the reservation corrected where it stands
        elif kept > reserved:
            self.take(kept - reserved, now)


class TokenBucket:
    """A quota as a token bucket: ``per_minute`` refilled continuously, holding ``burst_seconds`` of it, full
    at the first request (the ``bucket`` window). Also the clock-free model of ``bench/quota_bound.py``
    (``to``, ``wait``, ``lost``): one bucket for both, so the bound is the stand-in's rules."""

    def __init__(self, per_minute: float, burst_seconds: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_seconds)
        self.level = self.capacity
        self.at: float | None = None  # the first request's time: the bucket starts full then
        self.lost = 0.0  # refill and give-backs that found the bucket full

    def to(self, now: float) -> None:
        """Refilled to ``now``. Requests timed on arrival reach the lock out of order: an earlier one refills
        nothing (it would take back what the later one was given)."""
        if self.at is None:
            self.at = now
        grown = self.level + max(0.0, now - self.at) * self.rate
        self.lost += max(0.0, grown - self.capacity)
        self.level = min(self.capacity, grown)
        self.at = max(now, self.at)

    def allows(self, amount: float, now: float) -> bool:
        """Refilled to ``now``: whether a request of ``amount`` may pass (one larger than the bucket once it
        is full)."""
        self.to(now)
        return self.level >= min(amount, self.capacity)

    def wait(self, amount: float) -> float:
        """Seconds from the last refill until it holds ``amount`` (the bucket full, for one larger)."""
        return max(0.0, min(amount, self.capacity) - self.level) / self.rate

    def take(self, amount: float, now: float | None = None) -> None:
        self.level -= amount

    def give_back(self, amount: float, now: float) -> None:
        """Refilled to ``now``, then ``amount`` back (a negative one taken): a request settled at its end."""
        self.to(now)
        self.lost += max(0.0, self.level + amount - self.capacity)
        self.level = min(self.capacity, self.level + amount)

    def settle(self, ticket: object, reserved: float, kept: float, now: float) -> None:
        self.give_back(reserved - kept, now)


def window_quota(
    window: Window, per_minute: float, *, burst_seconds: float, wall: Callable[[float], float]
) -> Quota:
    """A per-minute quota counted in ``window``."""
    if window == "clock-minute":
        return FixedWindow(per_minute, MINUTE, wall)
    if window == "sliding-minute":
        return SlidingWindow(per_minute, MINUTE)
    if window == "bucket":
        return TokenBucket(per_minute, burst_seconds)
    raise ValueError(f"window {window!r}: one of {', '.join(WINDOWS)}")
