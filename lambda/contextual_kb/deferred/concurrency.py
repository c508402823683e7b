"""Several S3 requests of ``ckb contextualize`` at a time: a run over many pending documents reads and writes
each of them more than once, and every request is a network wait, so a run is bound by how many are in
flight, not by the CPU (measured: docs/BENCHMARKS.md, "At scale")."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Requests in flight. The S3 client needs as many connections (``S3_CONNECTIONS``), or urllib3 drops them.
WORKERS = 16
S3_CONNECTIONS = WORKERS + 4


def in_order(fn: Callable[[T], R], items: Iterable[T], workers: int = WORKERS) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` in the order of ``items``, ``workers`` at a time. At most ``workers`` results wait
    to be consumed (a document's text is one): memory stays bounded however many items there are. An
    exception in ``fn`` is raised here, at its item, and what was not started is cancelled."""
    window: deque[tuple[T, Future[R]]] = deque()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckb-contextualize")
    try:
        for item in items:
            window.append((item, pool.submit(fn, item)))
            if len(window) >= workers:
                first, future = window.popleft()
                yield first, future.result()
        while window:
            first, future = window.popleft()
            yield first, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
