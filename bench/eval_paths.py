"""The two evaluation paths on the codebase benchmark's dev split (docs/BENCHMARKS.md, "The two paths side
by side"): ``ckb eval --local --analyzers index`` (the benchmark's own chunks, exact
text) and ``ckb eval`` against ``ckb local`` (the data source's fixed-size chunks, a golden chunk found when
at least half of it lies in a retrieved chunk), each context strategy on both. Every command is run as a
user runs it, as a child process; the rows are their ``--json``.

    .venv/bin/python bench/eval_paths.py [--strategies none,structural,claude] [--max-tokens 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CKB = shutil.which("ckb", path=str(Path(sys.executable).parent)) or "ckb"
K = "5,10,20"


def run(args: list[str], env: dict[str, str]) -> list[dict]:
    done = subprocess.run([CKB, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def stack_rows(strategy: str, max_tokens: int, overlap: int, state: Path, env: dict[str, str]) -> list[dict]:
    """``ckb local --strategy S`` in a child, then ``ckb eval`` against it."""
    local = [CKB, "local", "--strategy", strategy, "--max-tokens", str(max_tokens), "--overlap", str(overlap)]
    child = subprocess.Popen(
        [*local, "--until-stdin-closes"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        variables: dict[str, str] = {}
        while "CKB_STACK" not in variables:
            line = child.stdout.readline()
            if not line:
                sys.exit(f"{' '.join(local)} ended before it was ready")
            if line.startswith("export "):
                name, value = line.removeprefix("export ").strip().split("=", 1)
                variables[name] = value
        return run(["eval", "--k", K, "--yes", "--state", str(state), "--json"], {**env, **variables})
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategies", default="none,structural,claude")
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--overlap", type=int, default=20)
    given = parser.parse_args()
    strategies = given.strategies.split(",")
    # Each path its own Bedrock stand-in, as for a user (claude: contexts made by rule, no paid call).
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_BEDROCK_BASE_URL"}
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores)", flush=True)
    started = time.perf_counter()
    offline = run(
        ["eval", "--local", "--strategies", ",".join(strategies), "--analyzers", "index", "--k", K, "--json"],
        env,
    )
    print(f"eval --local: {time.perf_counter() - started:.0f} s", flush=True)
    table = [("eval --local, bm25 index", row) for row in offline]
    with tempfile.TemporaryDirectory() as folder:
        for strategy in strategies:
            started = time.perf_counter()
            rows = stack_rows(
                strategy, given.max_tokens, given.overlap, Path(folder) / f"{strategy}.jsonl", env
            )
            print(f"eval --stack on ckb local --strategy {strategy}: {time.perf_counter() - started:.0f} s")
            table += [(f"eval --stack, ckb local --strategy {strategy}", row) for row in rows]
    print(f"load average at end: {os.getloadavg()[0]:.1f}\n")
    print("| path | chunks | retrieval | Pass@5 | Pass@10 | Pass@20 | Recall@20 | MRR |")
    print("|---|---|---|---|---|---|---|---|")
    for path, row in table:
        chunks = row["chunks"] + (f" ({row['endpoint']})" if row.get("endpoint") else "")
        figures = " | ".join(
            f"{row[key]:.2f}" for key in ("pass@5", "pass@10", "pass@20", "recall@20", "mrr")
        )
        print(f"| {path} | {chunks} | {row['retrieval']} | {figures} |")


if __name__ == "__main__":
    main()
