"""Rate limiting for outbound API calls with a token bucket.

A bucket holds up to ``capacity`` tokens and refills at ``rate`` tokens per second. Each call takes one
token; when the bucket is empty the caller waits (or is refused, in non-blocking mode).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


class RateLimitExceeded(Exception):
    """Raised in non-blocking mode when no token is available."""


@dataclass
class BucketState:
    tokens: float
    updated_at: float


@dataclass
class TokenBucket:
    """A thread-safe token bucket."""

    capacity: int
    rate: float
    clock: callable = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError("capacity must be at least 1")
        if self.rate <= 0:
            raise ValueError("rate must be positive")
        self._state = BucketState(tokens=float(self.capacity), updated_at=self.clock())

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._state.updated_at)
        self._state.tokens = min(self.capacity, self._state.tokens + elapsed * self.rate)
        self._state.updated_at = now

    def try_acquire(self, tokens: int = 1) -> bool:
        """Take ``tokens`` if they are available right now; never waits."""
        with self._lock:
            self._refill(self.clock())
            if self._state.tokens >= tokens:
                self._state.tokens -= tokens
                return True
            return False

    def acquire(self, tokens: int = 1, timeout: float | None = None) -> None:
        """Wait until ``tokens`` are available, or raise RateLimitExceeded after ``timeout`` seconds."""
        deadline = None if timeout is None else self.clock() + timeout
        while True:
            with self._lock:
                now = self.clock()
                self._refill(now)
                if self._state.tokens >= tokens:
                    self._state.tokens -= tokens
                    return
                wait = (tokens - self._state.tokens) / self.rate
            if deadline is not None and now + wait > deadline:
                raise RateLimitExceeded(f"no token within {timeout} s")
            time.sleep(wait)


class KeyedLimiter:
    """One token bucket per key (for example per customer or per API route)."""

    def __init__(self, capacity: int, rate: float) -> None:
        self.capacity = capacity
        self.rate = rate
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def bucket(self, key: str) -> TokenBucket:
        with self._lock:
            if key not in self._buckets:
                self._buckets[key] = TokenBucket(self.capacity, self.rate)
            return self._buckets[key]

    def allow(self, key: str) -> bool:
        """True if a call for ``key`` may go ahead now."""
        return self.bucket(key).try_acquire()
