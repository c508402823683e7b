"""What an invocation still has to do once the model stops, and how long that will take: the deadline's tail.

Estimated from the event and measured as the invocation goes: the batch objects still to be read again and
written (S3 latency: the p95 of what this invocation has seen, reads measured while validating), and the
characters of documents still to be given their structural context (its speed as measured here). Writes go
``parallelism`` at a time; reads of kept-back batches one at a time. Updated from worker threads, hence
the lock. Pure otherwise: no I/O, no clock.
"""

from __future__ import annotations

import math
import threading
from collections import deque

from contextual_kb.runtime.context.claude.accounting import percentile

# Until measured. Conservative: S3 answers a small PUT in tens of milliseconds; the structural pass runs at
# about 10 MB/s on a laptop core (docs/BENCHMARKS.md), a Lambda at 1 GB has about half a vCPU.
DEFAULT_S3_SECONDS = 0.2
DEFAULT_CHARS_PER_SECOND = 1_000_000.0
SAMPLES = 200


class _Latency:
    def __init__(self) -> None:
        self._seen: deque[float] = deque(maxlen=SAMPLES)

    def add(self, seconds: float) -> None:
        self._seen.append(seconds)

    def p95(self, default: float) -> float:
        seen = list(self._seen)
        return percentile(seen, 0.95) if seen else default


class WorkLeft:
    def __init__(self, *, parallelism: int) -> None:
        self.parallelism = max(1, parallelism)
        self.writes = 0  # output batch objects not written yet
        self.rereads = 0  # validated batch objects not kept in memory, not read again yet
        self.chars = 0  # characters of files not written yet (their structural pass may be left)
        self.files = 0  # files not written yet
        # Seconds the user's steps after the model take on one file, as declared, until measured.
        self.after_steps_per_file = 0.0
        self._reads = _Latency()
        self._writes = _Latency()
        self._structural: list[float] = [0.0, 0.0]  # characters, seconds
        self.unloaded = 0  # characters of files not loaded yet (their steps before the model may be left)
        # The user's steps (runtime.sdk), before and after the context step: characters, seconds.
        self._steps = {True: [0.0, 0.0], False: [0.0, 0.0]}
        self._lock = threading.Lock()

    # --- what the event holds, then what got done ---
    def expect(self, *, writes: int = 0, rereads: int = 0, chars: int = 0, files: int = 0) -> None:
        with self._lock:
            self.files += files
            self.writes += writes
            self.rereads += rereads
            self.chars += chars
            self.unloaded += chars

    def read(self, seconds: float, *, reread: bool = False) -> None:
        with self._lock:
            self._reads.add(seconds)
            self.rereads -= int(reread)

    def wrote(self, seconds: float) -> None:
        with self._lock:
            self._writes.add(seconds)
            self.writes -= 1

    def file_done(self, chars: int) -> None:
        with self._lock:
            self.chars -= chars
            self.files -= 1

    def note_structural(self, chars: int, seconds: float) -> None:
        """A structural pass took ``seconds`` for ``chars``: the measured speed replaces the default."""
        with self._lock:
            self._structural[0] += chars
            self._structural[1] += seconds

    def file_loaded(self, chars: int) -> None:
        """A file was read and given to the strategy (the user's steps before it have run on it)."""
        with self._lock:
            self.unloaded -= chars

    def note_steps(self, chars: int, seconds: float, *, before: bool) -> None:
        """The user's steps (``runtime.sdk``) before (or after) the context step took ``seconds`` on a
        document of ``chars``: every file not loaded (or not written) yet will take them as long per
        character, besides its structural pass."""
        with self._lock:
            self._steps[before][0] += chars
            self._steps[before][1] += seconds

    # --- the tail (deadline.Tail) ---
    def io_seconds(self) -> float:
        with self._lock:
            read = self._reads.p95(DEFAULT_S3_SECONDS)
            write = self._writes.p95(max(read, DEFAULT_S3_SECONDS))
            batches = math.ceil(max(0, self.writes) / self.parallelism)
            return max(0, self.rereads) * read + batches * write

    def seconds(self) -> float:
        with self._lock:
            chars, spent = self._structural
            # The measured speed once 50 ms of passes were timed (fewer say little), and never more than 10x
            # the default: a few small, fast passes must not promise that a 50 MB one is quick.
            measured = chars / spent if spent > 0.05 else DEFAULT_CHARS_PER_SECOND
            speed = min(DEFAULT_CHARS_PER_SECOND * 10, measured)
            compute = max(0, self.chars) / speed
            for before, (stepped, step_seconds) in self._steps.items():
                if stepped > 0:
                    compute += max(0, self.unloaded if before else self.chars) * step_seconds / stepped
                elif not before:  # not measured yet: the steps after the model come last, as declared
                    compute += max(0, self.files) * self.after_steps_per_file
        return self.io_seconds() + compute
