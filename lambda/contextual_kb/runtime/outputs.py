"""Output batch objects written several at a time; left in place when the call fails.

Writes run ``parallelism`` at a time on worker threads (one after another, 800 writes at 50 ms took 40 s of
a Lambda's time); no more wait than run, and at most ``MAX_PENDING_BYTES`` of bodies, so memory holds few
output bodies whatever the number of files. The first failed write is
raised by the next ``write`` or by ``finish``. A failed call stops writing (``abandon``) but deletes
nothing: output keys are deterministic, and AWS documents no retry or timeout for the transformation call,
so another call of the same event may run at the same time and have named those very keys in its response
(deleting them would take its chunks from the Knowledge Base). What a failed call wrote is named by no
response; a retry overwrites it, the bucket's lifecycle expires it.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

from contextual_kb.runtime.budget import WorkLeft

# Output bodies written or waiting at once, in bytes (besides the count): memory must follow the largest file.
MAX_PENDING_BYTES = 1024 * 1024
# How long a failed call waits for the writes still under way before it returns its error.
ABANDON_WAIT_SECONDS = 10.0


class WritingStore(Protocol):
    def write(self, bucket: str, key: str, body: bytes) -> None: ...


class OutputWriter:
    def __init__(self, store: WritingStore, bucket: str, *, parallelism: int, work: WorkLeft) -> None:
        self._store = store
        self._bucket = bucket
        self._work = work
        self._limit = max(1, parallelism)
        self._pool = ThreadPoolExecutor(max_workers=max(1, parallelism), thread_name_prefix="ckb-write")
        self._pending: deque[tuple[Future[None], int]] = deque()  # with each body's size

    def write(self, key: str, body: bytes) -> None:
        while self._pending and (
            len(self._pending) >= self._limit or self._pending_bytes() + len(body) > MAX_PENDING_BYTES
        ):
            self._pending.popleft()[0].result()  # a failed write raises here, naming its object
        self._pending.append((self._pool.submit(self._put, key, body), len(body)))

    def _pending_bytes(self) -> int:
        return sum(size for _, size in self._pending)

    def _put(self, key: str, body: bytes) -> None:
        started = time.perf_counter()
        self._store.write(self._bucket, key, body)
        self._work.wrote(time.perf_counter() - started)

    def finish(self) -> None:
        """Every output written, or the first failure raised."""
        try:
            while self._pending:
                self._pending.popleft()[0].result()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def abandon(self) -> None:
        """After a failure: no more writes; those under way get a moment to end (none lands later, during
        the environment's next invocation). Nothing is deleted: a concurrent call of the same event may own
        the same keys (the module's docstring)."""
        for future, _ in self._pending:
            future.cancel()
        wait([future for future, _ in self._pending], timeout=ABANDON_WAIT_SECONDS)
        self._pool.shutdown(wait=False, cancel_futures=True)
