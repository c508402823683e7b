"""Claude on Bedrock through ``anthropic[bedrock]``: the only module that calls the model.

Region and endpoint come from configuration and the SDK's environment (``MODEL_REGION`` or ``AWS_REGION``;
``ANTHROPIC_BEDROCK_BASE_URL`` for a local stand-in). Retries with exponential backoff and jitter on 429,
5xx and timeouts are the SDK's; a middleware, which the SDK runs once per HTTP attempt, counts the attempts
and the 429s and reports each 429 at once so the concurrency limit can shrink while the SDK waits. Another
sets how long the SDK waits after a 429 (``ThrottlePacing``).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import anthropic
import httpx2
from anthropic import AnthropicBedrock, Middleware

from contextual_kb.runtime.context.claude.accounting import Usage
from contextual_kb.runtime.context.claude.shared_quota import Booking, NoTurnError, SharedQuota
from contextual_kb.runtime.errors import TransformationError

FailureKind = Literal["throttled", "transient", "rejected", "fatal"]

# The SDK logs every request, the whole document in it, at DEBUG: with ANTHROPIC_LOG=debug, or whenever the
# root logger is at DEBUG (Lambda's log-level control sets it). Documents must never reach the logs, so its
# loggers stay at WARNING or above, whatever is asked (docs/SECURITY.md). Not INFO: httpx2 logs each request's
# URL there (the model endpoint) and the SDK each retry, one unstructured line per model call in the
# function's logs and on ckb mcp's stderr; the function counts attempts and 429s itself (the middleware
# below, its summary line and metrics).
for _name in ("anthropic", "httpx2"):
    _sdk_logger = logging.getLogger(_name)
    _sdk_logger.setLevel(max(logging.WARNING, _sdk_logger.level))


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    usage: Usage
    stop_reason: str
    seconds: float
    attempts: int
    throttles: int
    quota_wait: float = 0.0  # seconds waited for turns of the shared quota
    # what the answered attempt booked of the shared quota (None: no shared quota), for ``settle``
    quota_booking: Booking | None = None


class ModelCallError(Exception):
    """A call that failed after the SDK's retries.

    ``kind``: throttled (429 to the end), transient (5xx, timeouts, connection errors), rejected (this
    request is invalid: 400), fatal (the model cannot be called at all: 401/403/404, no region).
    """

    def __init__(
        self, kind: FailureKind, message: str, *, status: int | None, attempts: int, throttles: int
    ) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.status = status
        self.attempts = attempts
        self.throttles = throttles


class _AttemptCounter(Middleware):
    """Counts HTTP attempts and 429s per calling thread (each call runs on one worker thread)."""

    def __init__(self, on_throttle: Callable[[], None] | None) -> None:
        self._local = threading.local()
        self._on_throttle = on_throttle

    def reset(self) -> None:
        self._local.attempts = 0
        self._local.throttles = 0
        self._local.last = None

    def counts(self) -> tuple[int, int]:
        return getattr(self._local, "attempts", 0), getattr(self._local, "throttles", 0)

    def last_status(self) -> int | None:
        """The last attempt's HTTP status (0: no response; None: no attempt reached the model)."""
        return getattr(self._local, "last", None)

    def handle(self, request: Any, call_next: Any) -> Any:
        try:
            response = call_next(request)
        except NoTurnError:  # never sent: not an attempt
            raise
        except Exception:
            self._local.attempts = getattr(self._local, "attempts", 0) + 1
            self._local.last = 0
            raise
        self._local.attempts = getattr(self._local, "attempts", 0) + 1
        self._local.last = response.status_code
        if response.status_code == 429:
            self._local.throttles = getattr(self._local, "throttles", 0) + 1
            if self._on_throttle is not None:
                self._on_throttle()
        return response


class ThrottlePacing(Middleware):
    """How long the SDK waits after a 429: decorrelated jitter (each wait uniform between ``base`` and three
    times the last, at most ``cap``; AWS Architecture Blog, "Exponential Backoff and Jitter"), handed to the
    SDK as ``retry-after-ms``, which it honours.

    Why not the SDK's own backoff: Bedrock's 429s carry no Retry-After, so the SDK waits 0.5 s doubling to 8
    s. A quota is a bucket refilled every second; while every throttled caller sleeps for seconds the
    bucket fills and what overflows is quota lost (bench/fleet.py: 87-89% of the quota used with one or
    four invocations). Shorter, spread waits keep a caller ready when the bucket refills. A Retry-After the
    server sends is kept. ``draw`` is injectable for tests.
    """

    def __init__(
        self, *, base: float = 0.1, cap: float = 2.0, draw: Callable[[float, float], float] = random.uniform
    ) -> None:
        self.base = base
        self.cap = cap
        self._draw = draw
        self._local = threading.local()

    def reset(self) -> None:
        self._local.last = self.base

    def next_wait(self) -> float:
        """The next wait of the calling thread's call, in seconds."""
        last = getattr(self._local, "last", self.base)
        wait = min(self.cap, self._draw(self.base, max(self.base, 3 * last)))
        self._local.last = wait
        return wait

    def handle(self, request: Any, call_next: Any) -> Any:
        response = call_next(request)
        if response.status_code == 429 and not (
            "retry-after" in response.headers or "retry-after-ms" in response.headers
        ):
            response.headers["retry-after-ms"] = str(round(1000 * self.next_wait()))
        return response


class _QuotaGate(Middleware):
    """Each HTTP attempt, retries included, waits for its turn of the shared quota (``shared_quota``): the
    calling thread's call says what it counts and until when it may wait. Innermost, so the time waited is
    not an attempt's: a NoTurnError raised here reaches the caller as it is (the SDK's rule for
    middleware)."""

    def __init__(self, quota: SharedQuota) -> None:
        self.quota = quota
        self._local = threading.local()

    def set_call(self, tokens: int, max_wait: float, wait_until: float) -> None:
        self._local.tokens = tokens
        self._local.max_wait = max_wait
        self._local.wait_until = wait_until
        self._local.waited = 0.0
        self._local.booking = None

    def waited(self) -> float:
        """Seconds the calling thread's call has waited for its turns."""
        return getattr(self._local, "waited", 0.0)

    def booking(self) -> Booking | None:
        """What the calling thread's last attempt booked (what its reply settles)."""
        return getattr(self._local, "booking", None)

    def handle(self, request: Any, call_next: Any) -> Any:
        local = self._local
        # each attempt may wait max_wait (a retry after a slow attempt gets its own), none past wait_until
        give_up_at = min(time.time() + getattr(local, "max_wait", 0.0), getattr(local, "wait_until", 0.0))
        local.booking = None
        booking = self.quota.book(getattr(local, "tokens", 0), give_up_at)
        local.waited = self.waited() + booking.waited
        response = call_next(request)
        if response.status_code == 429:  # refused at its reservation: Bedrock counts none of it
            self.quota.settle(booking, 0)
        else:
            local.booking = booking
        return response


def resolve_region(configured: str) -> str:
    region = configured or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise TransformationError(
            "no region for Bedrock: set MODEL_REGION or AWS_REGION (Lambda sets AWS_REGION itself)"
        )
    return region


class ClaudeClient:
    def __init__(
        self,
        *,
        region: str,
        timeout_seconds: float,
        max_retries: int,
        max_connections: int,
        on_throttle: Callable[[], None] | None = None,
        shared_quota: SharedQuota | None = None,
    ) -> None:
        self._counter = _AttemptCounter(on_throttle)
        self._pacing = ThrottlePacing()
        self._gate = _QuotaGate(shared_quota) if shared_quota is not None else None
        # Room for calls abandoned at a deadline that still hold a connection into the next invocation.
        limits = httpx2.Limits(
            max_connections=2 * max_connections + 4, max_keepalive_connections=max_connections
        )
        self._client = AnthropicBedrock(
            aws_region=region,
            max_retries=max_retries,
            timeout=httpx2.Timeout(timeout_seconds, connect=min(10.0, timeout_seconds)),
            http_client=anthropic.DefaultHttpxClient(limits=limits),
            middleware=[self._counter, self._pacing, *([self._gate] if self._gate else [])],
        )

    def invoke(
        self,
        request: dict[str, Any],
        *,
        quota_tokens: int = 0,
        max_wait: float = 60.0,
        wait_until: float = float("inf"),
    ) -> Reply:
        """One ``messages.create`` with the SDK's retries; raises ModelCallError. With a shared quota, each
        attempt first waits its turn for ``quota_tokens`` (what Bedrock reserves for the call), at most
        ``max_wait`` seconds, and never past ``wait_until`` (epoch seconds); the reply says what the
        answered attempt booked, for the caller to settle."""
        self._counter.reset()
        self._pacing.reset()
        if self._gate is not None:
            self._gate.set_call(quota_tokens, max_wait, wait_until)
        started = time.monotonic()
        try:
            message = self._client.messages.create(**request)
        except NoTurnError as exc:
            # no turn for the first attempt: throttled; for a retry: the failure that asked for it
            last = self._counter.last_status()
            kind: FailureKind = "throttled" if last in (None, 429) else _kind(last) if last else "transient"
            raise self._error(kind, str(exc), last or None) from None
        except anthropic.APIStatusError as exc:
            raise self._error(
                _kind(exc.status_code), f"{exc.status_code} {_error_type(exc)}", exc.status_code
            ) from None
        except anthropic.APITimeoutError:
            raise self._error("transient", "timed out") from None
        except anthropic.APIConnectionError as exc:
            raise self._error("transient", f"connection error ({type(exc.__cause__).__name__})") from None
        except anthropic.APIResponseValidationError as exc:
            raise self._error("transient", f"unreadable response ({exc.message})") from None
        attempts, throttles = self._counter.counts()
        quota_wait = self._gate.waited() if self._gate else 0.0
        text = "".join(block.text for block in message.content if getattr(block, "type", "") == "text")
        usage = message.usage
        return Reply(
            text=text,
            usage=Usage(
                input_tokens=usage.input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
            ),
            stop_reason=message.stop_reason or "",
            # the model's time: the turns waited for are the quota's, not the model's latency
            seconds=time.monotonic() - started - quota_wait,
            quota_wait=quota_wait,
            quota_booking=self._gate.booking() if self._gate else None,
            attempts=max(1, attempts),
            throttles=throttles,
        )

    def _error(self, kind: FailureKind, message: str, status: int | None = None) -> ModelCallError:
        attempts, throttles = self._counter.counts()
        return ModelCallError(kind, message, status=status, attempts=attempts, throttles=throttles)

    def close(self) -> None:
        self._client.close()


def _kind(status: int) -> FailureKind:
    if status == 429:
        return "throttled"
    if status in (408, 409, 424) or status >= 500:  # 424: Bedrock's ModelErrorException, worth a retry
        return "transient"
    if status in (401, 403, 404):
        return "fatal"
    return "rejected"


def _error_type(exc: anthropic.APIStatusError) -> str:
    """Bedrock's error type (``x-amzn-ErrorType``) and message; never the request's content."""
    kind = exc.response.headers.get("x-amzn-errortype", "").split(":")[0]
    body = exc.body if isinstance(exc.body, dict) else {}
    message = str(body.get("message") or body.get("Message") or "")[:300]
    return " ".join(part for part in (kind, message) if part) or type(exc).__name__
