"""Fault injection at the sizes the reliability issue names, for docs/RELIABILITY.md.

Every scenario of ``contextual_kb.local.faults`` (the same code the reliability tests run at a small scale)
at full size: the real handler on moto S3 (in process) against a fresh Bedrock stand-in (in a thread,
300 ms a call unless the scenario says otherwise), faults injected while it runs. Prints one table row per
scenario and every broken promise (there must be none).

    .venv/bin/python bench/reliability.py [--scale full|quick] [--only NAME] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from corpus import offline_environment  # bench/corpus.py


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("full", "quick"), default="full")
    parser.add_argument("--only", default="", help="run only the scenarios whose name contains this")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    offline_environment(log_level="INFO")
    # The promises are checked against the metrics too: emit them (to the captured output, as EMF).
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "false"
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "ContextualKB")

    from moto import mock_aws

    from contextual_kb.local import faults
    from contextual_kb.local.bedrock_standin import BedrockStandIn

    rows, broken = [], 0
    started = time.perf_counter()
    for scenario in faults.scenarios(args.scale):
        if args.only and args.only not in scenario.name:
            continue
        with mock_aws():
            standin = BedrockStandIn(faults.standin_config(latency_ms=300.0)).start()
            try:
                outcome = faults.run(scenario, standin)
            finally:
                standin.stop()
        problems = outcome.problems(
            scenario.expect_failure, scenario.must_see, scenario.must_not_see, wall_clock=True
        )
        broken += len(problems)
        row = {**outcome.as_row(), "description": scenario.description, "problems": problems}
        if scenario.expect_failure:
            row["error"] = outcome.error
            row["put attempts"] = outcome.put_attempts
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(
        "| scenario | what is injected | chunks | lost | model contexts | degraded (reasons) | s / timeout "
        "| calls | 429 | 5xx | hangs | cache writes | promises |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        status = "; ".join(r["problems"]) or ("failed loudly, as it must" if "error" in r else "all kept")
        print(
            f"| {r['scenario']} | {r['description']} | {r['chunks']} | {r['lost']} | {r['from model']} "
            f"| {r['degraded']} ({r['reasons']}) | {r['seconds']} / {r['timeout']:.0f} | {r['calls']} "
            f"| {r['429']} | {r['5xx']} | {r['hangs']} | {r['cache writes']} | {status} |"
        )
    print(f"\n{len(rows)} scenarios in {time.perf_counter() - started:.0f} s; broken promises: {broken}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
