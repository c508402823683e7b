"""bench/fleet.py as `make bench-fleet` runs it, on a small corpus: the invocations start together (each
stages its slice and builds its runtime first), and every chunk comes back. Before, a fixed start time left
sixteen workers on two cores starting up to 10 s apart, and the slowest / fastest figure measured that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import corpus

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("shared", ["0", "1.0"])
def test_the_fleet_starts_together_and_loses_nothing(tmp_path: Path, shared: str) -> None:
    """Each invocation alone, and taking turns of the shared quota (a DynamoDB table: moto's server)."""
    (tmp_path / "codebase_chunks.json").write_text(json.dumps(corpus(documents=6, chunks=3)))
    out = tmp_path / "fleet.json"
    subprocess.run(
        [sys.executable, "bench/fleet.py", "--fleet", "3", "--dataset", str(tmp_path), "--json", str(out),
         "--latency-ms", "20", "--per-token-ms", "0", "--shared-quota", shared],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    row = json.loads(out.read_text())["rows"][0]
    # 18 calls at 10 a second, half a second of them at once: with turns, most wait for theirs
    assert (row["quota_wait_seconds"] > 0) == (shared != "0")
    assert row["invocations"] == 3 and len(row["slices"]) == 3
    assert row["start_spread_seconds"] < 2.0  # the go reaches all three within milliseconds
    assert row["chunks"] == 18 and row["chunks_lost"] == 0
    assert row["fallbacks"] == 0 and not row["deadline_passed"]
    assert sum(s["from_model"] for s in row["slices"]) == 18
