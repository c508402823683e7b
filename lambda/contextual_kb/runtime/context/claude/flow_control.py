"""How many model calls may run at once, and whether the model may be called at all. Pure (clock injected).

``AdaptiveLimit`` is additive-increase / multiplicative-decrease, like TCP congestion control: a 429 cuts
the limit by ``decrease`` (at most once per ``cooldown`` so one burst of 429s counts once), each success
grows it by 1/limit, up to the configured maximum. It is told of 429s from worker threads, hence the lock.

``Breaker`` stops calls to a model that keeps failing: ``threshold`` consecutive failed calls open it, when
they come from more than one document (or from the only document with work left: failures of one document
among healthy others are that document's, contained by the planner, not the model's); after ``cooldown``
one probe call may go; a failed probe opens it again, and after ``max_probes`` failed probes (or one fatal
error: access denied, no such model) it gives up for the invocation.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from contextual_kb.runtime.deadline import Clock


class AdaptiveLimit:
    def __init__(
        self, maximum: int, *, decrease: float = 0.7, cooldown: float = 1.0, clock: Clock = time.monotonic
    ) -> None:
        self.maximum = maximum
        self.decrease = decrease
        self.cooldown = cooldown
        self._clock = clock
        self._limit = float(maximum)
        self._last_cut = float("-inf")
        self._lock = threading.Lock()
        self.cuts = 0

    @property
    def allowed(self) -> int:
        with self._lock:
            return max(1, int(self._limit))

    def on_throttle(self) -> None:
        with self._lock:
            now = self._clock()
            if now - self._last_cut < self.cooldown:
                return
            self._last_cut = now
            self._limit = max(1.0, self._limit * self.decrease)
            self.cuts += 1

    def on_success(self) -> None:
        with self._lock:
            self._limit = min(float(self.maximum), self._limit + 1.0 / self._limit)


@dataclass
class Breaker:
    threshold: int = 5
    cooldown: float = 20.0
    max_probes: int = 3
    clock: Clock = field(default=time.monotonic, repr=False)
    failures: int = 0  # consecutive
    failed_probes: int = 0
    open_until: float | None = None
    probing: bool = False
    gave_up: bool = False
    reason: str = ""
    opened: int = 0
    sources: set[int] = field(default_factory=set)  # documents of the current run of failures

    def allows(self) -> bool:
        """A call may start now (in half-open state, only the one probe)."""
        if self.gave_up:
            return False
        if self.open_until is None:
            return True
        if self.probing or self.clock() < self.open_until:
            return False
        self.probing = True
        return True

    def next_probe_in(self) -> float | None:
        """Seconds until a probe may go, when open and waiting; None otherwise."""
        if self.gave_up or self.open_until is None or self.probing:
            return None
        return max(0.0, self.open_until - self.clock())

    def on_success(self) -> None:
        self.failures = 0
        self.failed_probes = 0
        self.open_until = None
        self.probing = False
        self.sources.clear()

    def on_failure(
        self,
        reason: str,
        *,
        fatal: bool = False,
        probe: bool = False,
        source: int | None = None,
        alone: bool = True,
    ) -> None:
        """A call failed after its retries; ``probe``: it was the half-open state's probe call (a call that
        was already running when the breaker opened is not the probe); ``source``: its document; ``alone``:
        no other document has work (its failures cannot be told from the model's)."""
        self.reason = reason
        if fatal:
            self.gave_up = True
            return
        self.failures += 1
        if source is not None:
            self.sources.add(source)
        if probe and self.probing:
            self.probing = False
            self.failed_probes += 1
            if self.failed_probes >= self.max_probes:
                self.gave_up = True
                return
            self.open_until = self.clock() + self.cooldown
            self.opened += 1
            return
        across = len(self.sources) > 1 or alone
        if self.failures >= self.threshold and across and self.open_until is None:
            self.open_until = self.clock() + self.cooldown
            self.opened += 1

    def on_abandoned(self) -> None:
        """The probe was not answered (deadline): let a later call probe again."""
        self.probing = False
