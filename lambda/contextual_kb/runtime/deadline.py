"""The invocation's time budget. Pure: the clock is injected.

``hard_stop`` is the Lambda's end minus a safety margin (``DEADLINE_RESERVE_SECONDS``): by then the handler
has returned. What must still happen after the model stops (the structural pass of every chunk left, the
batch objects read again, every output written) is the *tail*, estimated as the invocation goes
(``budget.WorkLeft``); model calls stop that much earlier, so a long tail stops them early:

- ``remaining()``: time for model work, the hard stop less the whole tail. No model call starts unless it is
  expected to end within it; at 0, calls still running are abandoned and their chunks get the fallback.
- ``compute_remaining()``: time for the structural pass, the hard stop less the S3 part of the tail. What
  cannot be outlined within it gets the document-level context.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

Clock = Callable[[], float]


class Tail(Protocol):
    def seconds(self) -> float:
        """Everything left to do once the model stops."""
        ...

    def io_seconds(self) -> float:
        """Of that, the S3 reads and writes."""
        ...

    def note_structural(self, chars: int, seconds: float) -> None:
        """A structural pass of ``chars`` took ``seconds``: its speed, measured."""
        ...

    def note_steps(self, chars: int, seconds: float, *, before: bool) -> None:
        """The user's steps before (or after) the model took ``seconds`` on a document of ``chars``."""
        ...


@dataclass(frozen=True, slots=True)
class Deadline:
    hard_stop: float  # on ``clock``'s scale
    clock: Clock = field(default=time.monotonic, compare=False)
    tail: Tail | None = field(default=None, compare=False)

    @classmethod
    def from_remaining(
        cls, remaining_seconds: float, *, reserve_seconds: float, clock: Clock = time.monotonic
    ) -> Deadline:
        return cls(clock() + max(0.0, remaining_seconds - reserve_seconds), clock)

    @classmethod
    def unlimited(cls) -> Deadline:
        return cls(float("inf"))

    def budgeted(self, tail: Tail) -> Deadline:
        """The same hard stop, with the work left after the model taken off the model's time."""
        return replace(self, tail=tail)

    def remaining(self) -> float:
        return self.hard_stop - self.clock() - (self.tail.seconds() if self.tail is not None else 0.0)

    def compute_remaining(self) -> float:
        return self.hard_stop - self.clock() - (self.tail.io_seconds() if self.tail is not None else 0.0)

    def note_structural(self, chars: int, seconds: float) -> None:
        if self.tail is not None:
            self.tail.note_structural(chars, seconds)

    def note_steps(self, chars: int, seconds: float, *, before: bool) -> None:
        if self.tail is not None:
            self.tail.note_steps(chars, seconds, before=before)

    def passed(self) -> bool:
        return self.remaining() <= 0

    def can_start(self, expected_seconds: float) -> bool:
        """A call expected to take ``expected_seconds`` would end before the model's time is up."""
        return self.remaining() > expected_seconds
