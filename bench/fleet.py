"""Many invocations, one model quota: N invocations of the real handler at once, in separate processes, each
on its own slice of the codebase corpus, against one Bedrock stand-in that enforces one account quota for
the model (tokens per minute, and requests per minute when ``--rpm`` is set, counted as Bedrock counts them,
local/bedrock_quotas.py: a request reserves input + cache write + max_tokens at its start and settles to
input + cache write + output x the model's burndown at its end), the minute counted as ``--window`` says.

Each invocation runs as the Lambda would: its own process, its own S3 (moto, in process), the real anthropic
SDK, its runtime built before the start (a warm environment's); they start together, once every one is
ready, each on a slice of equal work for both quotas. Reported per N: aggregate chunks/s, the share of the
quota used (``binding_quota_used``, measured as fits the window: under the minute windows the settled
charges of each full wall-clock minute of the run against the quota, the stand-in's
``EstimatedTPMQuotaUsage``-like series, its clock started at the first request so that the run's first
minute is whole; the last, partial, minute in which the work ran out is not counted; under ``bucket`` the
binding quota's share in 5 s windows), each quota's share over the time the stand-in was busy, throttles
(429s), the SDK's retries, chunks given the structural fallback, the slowest invocation against the
fastest, whether any passed its deadline, and whether every chunk came back exactly once with its text.

    .venv/bin/python bench/fleet.py [--fleet 1,4,16] [--rpm 0] [--tpm 800000] [--window clock-minute]
        [--burst-seconds 1.0] [--model ID] [--mode per_chunk] [--timeout 900] [--throttle-rate 0]
        [--output-burndown 0] [--shared-quota 1.0] [--dataset DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from corpus import DEFAULT_DATASET, load_documents, offline_environment  # bench/corpus.py

from contextual_kb.local.bedrock_quotas import DEFAULT_WINDOW, WINDOWS

BUCKET = "fleet-intermediate"
MODEL_ID = "global.anthropic.claude-haiku-4-5-20251001-v1:0"


# What one per-chunk call adds to its document in what the quota keeps: the chunk and the instruction, and
# the answer (about 60 tokens at the model's burndown; the rest of max_tokens is given back), about.
CALL_TOKENS, ANSWER_TOKENS = 200, 60


def quota_demand(document: dict[str, Any], model: str = MODEL_ID) -> tuple[int, int]:
    """Tokens and requests the quota keeps for a document in per-chunk mode: the document's tokens once when
    the model caches it (cache reads never count), else once a chunk; a request a chunk. Pure."""
    from contextual_kb.local.bedrock_standin import count_tokens
    from contextual_kb.runtime.context.claude.pricing import min_cache_tokens, output_burndown

    tokens, calls = count_tokens(document["content"]), len(document["chunks"])
    cached = calls > 1 and tokens >= min_cache_tokens(model)
    call = CALL_TOKENS + ANSWER_TOKENS * output_burndown(model)
    return (tokens + calls * call if cached else calls * (tokens + call)), calls


def quota_seconds(tokens: int, requests: int, rpm: int, tpm: int) -> float:
    """Seconds of the quota that many tokens and requests take at the least: the binding one's. Pure."""
    return max(tokens / (tpm / 60) if tpm else 0.0, requests / (rpm / 60) if rpm else 0.0)


def slices(
    documents: list[dict[str, Any]], count: int, rpm: int, tpm: int, model: str = MODEL_ID
) -> list[list[dict[str, Any]]]:
    """``count`` slices of about equal work for the quota in both its counts, tokens and requests: the
    heaviest document first, into the slice it leaves lightest. Equal chunks are not equal slices (an
    uncached document's every call counts it whole), nor are equal tokens (a cached document of many chunks
    is many small requests, which the request quota binds). Pure."""
    out: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    loads = [(0, 0)] * count

    def after(i: int, demand: tuple[int, int]) -> tuple[float, float]:
        """The slice's seconds of the binding quota with the document, then of both quotas."""
        tokens, requests = loads[i][0] + demand[0], loads[i][1] + demand[1]
        return quota_seconds(tokens, requests, rpm, tpm), quota_seconds(tokens, 0, rpm, tpm) + quota_seconds(
            0, requests, rpm, tpm
        )

    demands = sorted(
        ((d, quota_demand(d, model)) for d in documents), key=lambda pair: -quota_seconds(*pair[1], rpm, tpm)
    )
    for document, demand in demands:
        best = min(range(count), key=lambda i: after(i, demand))
        out[best].append(document)
        loads[best] = (loads[best][0] + demand[0], loads[best][1] + demand[1])
    return out


def worker(args: argparse.Namespace) -> int:
    """One invocation: stage this slice in its own S3, wait for the common start, run the handler."""
    offline_environment(log_level="INFO")
    os.environ.update(
        {
            "CONTEXT_STRATEGY": "claude",
            "ANTHROPIC_BEDROCK_BASE_URL": args.url,
            "MODEL_ID": args.model,
            "CONTEXT_MODE": args.mode,
            "MODEL_OUTPUT_BURNDOWN": str(args.output_burndown),
        }
    )
    import boto3
    from moto import mock_aws

    from contextual_kb.evaluation.offline import stage_corpus
    from contextual_kb.local.kb_staging import build_event
    from contextual_kb.local.lambda_context import LocalLambdaContext
    from contextual_kb.local.runner import invoke

    rpm, tpm = args.rpm, args.tpm
    documents = slices(load_documents(args.dataset), args.of, rpm, tpm, args.model)[args.slice]
    tokens = sum(quota_demand(d, args.model)[0] for d in documents)
    chunks = sum(len(d["chunks"]) for d in documents)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        staged = stage_corpus(s3, BUCKET, documents)
        event = build_event(BUCKET, staged)
        from contextual_kb.runtime import handler

        ablate(args.without)
        handler.runtime()  # the cold start's init (the client), before the common start
        # A common start: the fleet says go once every worker has staged its slice and initialised (on two
        # cores sixteen of them take longer than any fixed start time allowed: they started up to 10 s apart).
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.time()
        context = LocalLambdaContext(timeout_seconds=args.timeout)
        result = invoke(event, context, fresh=False)  # the runtime built above, as a warm Lambda keeps it
        intact = True
        for source, produced in zip(staged, result.response["outputFiles"], strict=True):
            items = [i for ref in produced["contentBatches"] for i in result.after[ref["key"]].file_contents]
            intact &= len(items) == len(source.chunks) and all(
                i.content_body.endswith(c) for i, c in zip(items, source.chunks, strict=True)
            )
    summary = next(
        (json.loads(line) for line in result.log.splitlines() if '"transformation complete"' in line), {}
    )
    model = summary.get("model", {})
    print(
        json.dumps(
            {
                "slice": args.slice,
                "chunks": chunks,
                "tokens": tokens,
                "requests": chunks,  # a call a chunk
                "work": quota_seconds(tokens, chunks, rpm, tpm),
                "started": started,
                "seconds": round(result.seconds, 2),
                "deadline_passed": result.seconds > args.timeout,
                "calls": model.get("calls", 0),
                "retries": model.get("retries", 0),
                "throttles": model.get("throttles", 0),
                "requeued": model.get("requeued_calls", 0),
                "fallbacks": model.get("fallbacks", {}),
                "from_model": model.get("chunks_from_model", 0),
                "quota_wait_seconds": model.get("quota_wait_seconds", 0.0),
                "quota_table_errors": model.get("quota_table_errors", 0),
                "attempts_without_turns": model.get("attempts_without_turns", 0),
                "quota_resets": model.get("quota_resets", 0),
                "quota_booked_seconds": model.get("quota_booked_seconds", 0.0),
                "quota_given_back_seconds": model.get("quota_given_back_seconds", 0.0),
                "intact": intact,
            }
        ),
        flush=True,
    )
    return 0


ABLATIONS = ("pacing", "hold", "short-requeue")


def ablate(without: str) -> None:
    """Turn off, in this worker, what ``--without`` names: to measure what each part of the throttle path
    is worth."""
    from contextual_kb.runtime.context.claude import client, engine, scheduling

    names = {n for n in without.split(",") if n}
    if "pacing" in names:
        client.ThrottlePacing.handle = lambda self, request, call_next: call_next(request)  # type: ignore[method-assign]
    if "hold" in names:
        scheduling.STARVING = 10**9
    if "short-requeue" in names:
        engine._MAX_THROTTLE_PAUSE = 30.0
        engine.MAX_THROTTLED_CALLS = 12


def standin_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/_standin/stats", timeout=10) as response:
        return json.loads(response.read())


def run_fleet(count: int, args: argparse.Namespace, url: str, quota_table: str = "") -> dict[str, Any]:
    command = [
        sys.executable, __file__, "--worker", "--url", url, "--of", str(count), "--mode", args.mode,
        "--timeout", str(args.timeout), "--dataset", str(args.dataset),
        "--rpm", str(args.rpm), "--tpm", str(args.tpm), "--without", args.without,
        "--output-burndown", str(args.output_burndown), "--model", args.model,
    ]  # fmt: skip
    env = dict(os.environ)
    if quota_table:  # the quota shared through a table (runtime/context/claude/shared_quota.py)
        env.update(
            {
                "MODEL_QUOTA_TABLE": quota_table,
                "AWS_ENDPOINT_URL_DYNAMODB": os.environ["AWS_ENDPOINT_URL_DYNAMODB"],
                "MODEL_REQUESTS_PER_MINUTE": str(int(args.rpm * args.shared_quota)),
                "MODEL_TOKENS_PER_MINUTE": str(int(args.tpm * args.shared_quota)),
            }
        )
        if args.window == "bucket":  # half the stand-in's bucket; under a minute window the function's own
            env["MODEL_QUOTA_BURST_SECONDS"] = str(args.burst_seconds / 2)
    processes = [
        subprocess.Popen(
            [*command, "--slice", str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        for i in range(count)
    ]
    for process in processes:  # every worker ready (staged, initialised), then all go at once
        assert process.stdout is not None
        if not any(line.strip() == "ready" for line in iter(process.stdout.readline, "")):
            for other in processes:
                other.kill()
            raise RuntimeError(f"a worker failed before the start ({process.wait(timeout=60)})")
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    results = []
    for process in processes:
        out, _ = process.communicate(timeout=args.timeout + 120)
        lines = [line for line in out.splitlines() if line.startswith('{"slice"')]
        if process.returncode != 0 or not lines:
            raise RuntimeError(f"a worker failed ({process.returncode}): {out[-2000:]}")
        results.append(json.loads(lines[-1]))
    wall = max(r["seconds"] for r in results)
    stats = standin_stats(url)
    busy = stats["busy_seconds"] or wall
    chunks = sum(r["chunks"] for r in results)
    fallbacks = sum(sum(r["fallbacks"].values()) for r in results)
    seconds = [r["seconds"] for r in results]
    starts = [r["started"] for r in results]
    per_work_time = [r["seconds"] / r["work"] for r in results]
    # the least time the quota lets the fleet's calls through in (what the stand-in counted): no invocation
    # ends before it, and a starved one ends well after it
    ideal = quota_seconds(stats["quota_tokens"], stats["answered"], args.rpm, args.tpm)
    minutes = full_minutes(stats["estimated_tpm_quota_usage"].get(args.model, []), stats["busy_seconds"])
    if args.window == "bucket":
        binding: float | None = binding_share(
            stats["quota_requests_by_second"], stats["quota_tokens_by_second"], args.rpm, args.tpm
        )
    else:
        binding = sum(minutes) / (args.tpm * len(minutes)) if minutes and args.tpm else None
    request_share = stats["answered"] / (args.rpm / 60 * busy) if args.rpm else None
    token_share = stats["quota_tokens"] / (args.tpm / 60 * busy) if args.tpm else None
    return {
        "invocations": count,
        "chunks": chunks,
        "wall_seconds": round(wall, 1),
        "chunks_per_second": round(chunks / wall, 2),
        "requests_answered": stats["answered"],
        "quota_requests_used": None if request_share is None else round(request_share, 3),
        "quota_tokens_used": None if token_share is None else round(token_share, 3),
        "quota_used": round(max(s for s in (request_share, token_share, 0.0) if s is not None), 3),
        "binding_quota_used": None if binding is None else round(binding, 3),
        "window": args.window,
        "model": args.model,
        # the settled charges of each full minute, of the token quota
        "minute_shares": [round(m / args.tpm, 3) for m in minutes] if args.tpm else [],
        "throttles": stats["throttled"],
        # which quota refused them, and how many reserved more than the token bucket holds (they pass only
        # with it full, so any call let in before them makes them wait)
        "throttles_by_requests": stats["throttled_by_requests"],
        "throttles_by_tokens": stats["throttled_by_tokens"],
        "throttles_over_bucket": stats["throttled_over_bucket"],
        "retries": sum(r["retries"] for r in results),
        "requeued": sum(r["requeued"] for r in results),
        "fallbacks": fallbacks,
        "fallback_share": round(fallbacks / chunks, 4),
        "fallback_reasons": _merged([r["fallbacks"] for r in results]),
        "shared_quota": args.shared_quota,
        "quota_wait_seconds": round(sum(r["quota_wait_seconds"] for r in results), 1),
        "quota_table_errors": sum(r["quota_table_errors"] for r in results),
        "attempts_without_turns": sum(r["attempts_without_turns"] for r in results),
        "quota_resets": sum(r["quota_resets"] for r in results),
        # seconds of the quota the turns booked (what Bedrock reserves) and the replies gave back
        "quota_booked_seconds": round(sum(r["quota_booked_seconds"] for r in results), 1),
        "quota_given_back_seconds": round(sum(r["quota_given_back_seconds"] for r in results), 1),
        "reserved_tokens": stats["reserved_tokens"],
        "slowest_seconds": max(seconds),
        "fastest_seconds": min(seconds),
        "slowest_vs_fastest": round(max(seconds) / min(seconds), 2),
        "slowest_vs_ideal": round(max(seconds) / ideal, 2),
        "slowest_vs_fastest_per_work": round(max(per_work_time) / min(per_work_time), 2),
        # how far apart the invocations started (the fleet's go reaches them all within milliseconds)
        "start_spread_seconds": round(max(starts) - min(starts), 3),
        "slice_work_spread": round(max(r["work"] for r in results) / min(r["work"] for r in results), 2),
        "deadline_passed": any(r["deadline_passed"] for r in results),
        "chunks_lost": 0 if all(r["intact"] for r in results) else "SOME",
        "quota_requests_by_second": stats["quota_requests_by_second"],
        "quota_tokens_by_second": stats["quota_tokens_by_second"],
        "slices": results,
    }


@contextlib.contextmanager
def quota_tables() -> Iterator[Callable[[int], str]]:
    """A local DynamoDB (moto's server on 127.0.0.1) for the shared quota; yields a maker of a fresh table
    for each fleet (a fresh timeline, as each fleet gets a fresh stand-in)."""
    import boto3
    from moto.server import ThreadedMotoServer

    from contextual_kb.local.quota_table import create_quota_table
    from contextual_kb.local.s3server import free_port

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = f"http://127.0.0.1:{port}"

    def table(count: int) -> str:
        return create_quota_table(boto3.client("dynamodb"), f"fleet-quota-{count}-{time.time_ns()}")

    try:
        yield table
    finally:
        server.stop()
        os.environ.pop("AWS_ENDPOINT_URL_DYNAMODB", None)


def binding_share(requests: list[int], tokens: list[int], rpm: int, tpm: int, window: int = 5) -> float:
    """The share of the quota used, window by window (``window`` seconds), of whichever quota binds in that
    window (the larger share), averaged over the time the stand-in was busy. Over a whole run neither
    quota's share says it: while the calls left are small (cache reads) the request quota binds and the
    token quota cannot be filled, and the other way round. Not second by second: one call may carry more
    tokens than a second of quota (a cache write), and the seconds after it get none. Pure."""
    # each window's binding share, weighted by its seconds: the quota's seconds its calls took, over all
    used = sum(
        quota_seconds(sum(tokens[start : start + window]), sum(requests[start : start + window]), rpm, tpm)
        for start in range(0, len(requests), window)
    )
    return used / len(requests) if requests else 0.0


def full_minutes(series: list[list[int]] | list[tuple[int, int]], busy_seconds: float) -> list[int]:
    """The settled charges of each whole minute of the run, from the stand-in's per-minute series ((minute
    start, tokens), its clock started at the first request): the minute the last answer fell in is partial
    and not counted; a whole minute with nothing settled counts as 0. Pure."""
    charged = {int(start): tokens for start, tokens in series}
    return [charged.get(start, 0) for start in range(0, int(busy_seconds) - 59, 60)]


def _merged(counts: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for count in counts:
        for reason, n in count.items():
            total[reason] = total.get(reason, 0) + n
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--fleet", default="1,4,16", help="numbers of invocations at once")
    parser.add_argument(
        "--rpm",
        type=int,
        default=0,
        help="the account's requests per minute for the model; 0: none (token-bound)",
    )
    parser.add_argument(
        "--tpm", type=int, default=800_000, help="the account's tokens per minute for the model"
    )
    parser.add_argument(
        "--window",
        choices=WINDOWS,
        default=DEFAULT_WINDOW,
        help="how the stand-in counts a minute (AWS does not document it): fixed wall-clock minutes, the "
        "last 60 s, or the former per-second bucket of --burst-seconds",
    )
    parser.add_argument(
        "--model", default=MODEL_ID, help="the model id the function calls (Haiku 4.5's profile)"
    )
    parser.add_argument("--mode", default="per_chunk", help="CONTEXT_MODE")
    parser.add_argument("--timeout", type=int, default=900, help="each invocation's Lambda timeout, seconds")
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument("--throttle-rate", type=float, default=0.0, help="share of calls answered 429 anyway")
    parser.add_argument(
        "--burst-seconds",
        type=float,
        default=1.0,
        help="--window bucket: the stand-in's buckets, in seconds of quota (Bedrock documents none); the "
        "shared quota's MODEL_QUOTA_BURST_SECONDS is half of it (its default 0.5 against 1.0)",
    )
    parser.add_argument(
        "--output-burndown",
        type=int,
        default=0,
        help="quota tokens an output token keeps, in the stand-in and the function (MODEL_OUTPUT_BURNDOWN); "
        "0: the model table's (5 for Haiku 4.5 and Sonnet 4.6, 10 for Sonnet 5, 15 for Opus 4.8)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--shared-quota",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="the invocations take turns of one shared quota (a DynamoDB table, moto here), SHARE of the "
        "stand-in's (1.0: all of it); 0: off, each invocation adapts alone",
    )
    parser.add_argument(
        "--without",
        default="",
        help="ablation, comma-separated: pacing (the SDK's own waits after a 429), hold (no starving job "
        "holds the others), short-requeue (a throttled call's requeue waits up to 30 s, as before)",
    )
    # A worker (one invocation), started by the fleet.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--slice", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--of", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if unknown := sorted({n for n in args.without.split(",") if n} - set(ABLATIONS)):
        parser.error(f"--without: unknown {', '.join(unknown)} (known: {', '.join(ABLATIONS)})")
    share = args.shared_quota
    if share < 0 or (share and not (int(args.rpm * share) or int(args.tpm * share))):
        parser.error(f"--shared-quota {share:g}: 0 (off), or a share giving 1 a minute or more")
    if args.worker:
        return worker(args)
    load_documents(args.dataset)  # a corpus that cannot be read: one line here, not one from every worker
    offline_environment()
    from contextual_kb.local.bedrock_standin import standin_subprocess
    from contextual_kb.runtime.context.claude.pricing import output_burndown

    rows = []
    with contextlib.ExitStack() as stack:
        tables = stack.enter_context(quota_tables()) if args.shared_quota else None
        for count in [int(n) for n in args.fleet.split(",")]:
            with standin_subprocess(
                args.latency_ms,
                args.per_token_ms,
                args.rpm,
                args.tpm,
                args.throttle_rate,
                args.output_burndown,
                args.burst_seconds,
                args.window,
                clock_from_first_request=True,  # the first minute whole (the module docstring)
            ) as url:  # a fresh quota (and cache) for each fleet
                result = run_fleet(count, args, url, tables(count) if tables else "")
            rows.append(result)
        print(json.dumps(result), flush=True)
    burndown = output_burndown(args.model, args.output_burndown)
    measured = "5 s windows" if args.window == "bucket" else "full minutes, settled"
    print(
        f"\nmodel {args.model} (output burndown {burndown}); quota: {args.tpm:,} tokens/min"
        f"{f', {args.rpm} requests/min' if args.rpm else ', no request quota'}; window {args.window}"
        f"{f' ({args.burst_seconds:g} s)' if args.window == 'bucket' else ''}; CONTEXT_MODE={args.mode}"
        f"{'; without: ' + args.without if args.without else ''}"
        f"{f'; shared quota: {args.shared_quota:g} of it' if args.shared_quota else ''}\n"
        f"| N | chunks/s | quota used (binding, {measured}) | requests / tokens over the run | throttles "
        "| retries | fallbacks | slowest / fastest | slowest / the quota's least time | deadline passed "
        "| chunks lost |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    holder = "bucket" if args.window == "bucket" else "quota"
    for r in rows:
        used = "n/a" if r["binding_quota_used"] is None else f"{100 * r['binding_quota_used']:.1f}%"
        if args.window != "bucket":
            used += f" ({', '.join(f'{100 * m:.1f}%' for m in r['minute_shares']) or 'no full minute'})"
        print(
            f"| {r['invocations']} | {r['chunks_per_second']} | {used} | "
            f"{_pct(r['quota_requests_used'])} / {_pct(r['quota_tokens_used'])} | {r['throttles']} "
            f"({r['throttles_over_bucket']} larger than the {holder}) | "
            f"{r['retries']} | {r['fallbacks']} ({100 * r['fallback_share']:.2f}%) | "
            f"{r['slowest_vs_fastest']}x ({r['slowest_seconds']} / {r['fastest_seconds']} s) | "
            f"{r['slowest_vs_ideal']}x | {'yes' if r['deadline_passed'] else 'no'} | {r['chunks_lost']} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"rpm": args.rpm, "tpm": args.tpm, "window": args.window, "rows": rows}, indent=2)
            + "\n"
        )
    return 0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


if __name__ == "__main__":
    sys.exit(main())
