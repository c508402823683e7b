"""Every benchmark script answers --help with its usage and what it measures, and runs nothing: asking how to
run a bench that loads both cores for minutes must not start it (bench/cold_start.py used to), nor end in a
traceback (bench/structural.py used to)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py") if '__name__ == "__main__"' in p.read_text())


def test_every_bench_script_answers_help_without_running() -> None:
    assert {"structural.py", "cold_start.py", "chunking.py"} <= {p.name for p in SCRIPTS}
    # All at once: each is a Python start-up and its imports, not a bench.
    running = {
        path.name: subprocess.Popen(
            [sys.executable, str(path), "--help"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in SCRIPTS
    }
    try:
        for name, process in running.items():
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, (name, err[-2000:])
            assert out.startswith("usage: "), (name, out[:300])
            assert "Traceback" not in err, (name, err[-2000:])
            assert "|---" not in out, (name, out)  # no table printed: nothing measured
    finally:  # a script that ran its bench instead is stopped, not left loading the machine
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
