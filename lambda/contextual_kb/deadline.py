"""The invocation's time budget. Pure: the clock is injected.

``hard_stop`` is the Lambda's end minus the reserve kept to write every output object and return. No model
call starts unless it is expected to finish before it; at it, calls still running are abandoned and their
chunks get the fallback context.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Deadline:
    hard_stop: float  # on ``clock``'s scale
    clock: Clock = field(default=time.monotonic, compare=False)

    @classmethod
    def from_remaining(
        cls, remaining_seconds: float, *, reserve_seconds: float, clock: Clock = time.monotonic
    ) -> Deadline:
        return cls(clock() + max(0.0, remaining_seconds - reserve_seconds), clock)

    @classmethod
    def unlimited(cls) -> Deadline:
        return cls(float("inf"))

    def remaining(self) -> float:
        return self.hard_stop - self.clock()

    def passed(self) -> bool:
        return self.remaining() <= 0

    def can_start(self, expected_seconds: float) -> bool:
        """A call expected to take ``expected_seconds`` would end before the hard stop."""
        return self.remaining() > expected_seconds
