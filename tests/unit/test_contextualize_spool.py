"""ckb contextualize at scale: records spooled to disk while planning, S3 work several requests at a time,
results in order."""

from __future__ import annotations

import threading
import time

import pytest

from contextual_kb.deferred.concurrency import in_order
from contextual_kb.deferred.records import Planned
from contextual_kb.deferred.spool import Spool


def planned(n: int, model: str, text: str) -> Planned:
    line = f'{{"recordId": "{n}", "t": "{text}"}}\n'.encode()
    return Planned(f"R{n:010d}", f"doc{n}", model, 0, (n,), line, 7)


def test_a_job_input_is_its_records_lines_in_order_whatever_model_they_were_spooled_among(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextual_kb.deferred import spool as module

    monkeypatch.setattr(module, "COPY_BYTES", 16)  # lines read in several pieces
    records = [planned(n, "haiku" if n % 3 else "sonnet", "é" * n) for n in range(12)]
    with Spool() as spool:
        for record in records:
            spool.add(record)
        assert [r.size for r in spool.records] == [len(r.line) for r in records]
        haiku = [i for i, r in enumerate(records) if r.model_id == "haiku"]
        assert b"".join(spool.pieces(haiku)) == b"".join(records[i].line for i in haiku)
        mixed = [5, 0, 7, 3]  # on-demand records of both models
        assert b"".join(spool.pieces(mixed)) == b"".join(records[i].line for i in mixed)


def test_in_order_keeps_the_order_runs_several_at_a_time_and_holds_few_results() -> None:
    running, most, waiting_most = [0], [0], [0]
    lock = threading.Lock()
    consumed = [0]
    submitted = [0]

    def work(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01 if n % 2 else 0.002)  # later items finish first
        with lock:
            running[0] -= 1
        return n * n

    def items():  # type: ignore[no-untyped-def]
        for n in range(60):
            submitted[0] += 1
            waiting_most[0] = max(waiting_most[0], submitted[0] - consumed[0])
            yield n

    out = []
    for n, square in in_order(work, items(), workers=6):
        consumed[0] += 1
        out.append((n, square))
    assert out == [(n, n * n) for n in range(60)]
    assert most[0] > 1  # several at a time
    assert waiting_most[0] <= 7  # never more than the workers (and the one being submitted) ahead


def test_in_order_raises_at_the_failing_item_and_starts_nothing_after() -> None:
    started: list[int] = []

    def work(n: int) -> int:
        started.append(n)
        if n == 3:
            raise ValueError("item 3")
        return n

    seen = []
    with pytest.raises(ValueError, match="item 3"):
        for n, _ in in_order(work, range(1000), workers=2):
            seen.append(n)
    assert seen == [0, 1, 2] and max(started) < 10
