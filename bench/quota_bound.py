"""How much of a token-bound quota the fleet benchmark's workload can use at all, under the Bedrock stand-in's
rules (docs/BENCHMARKS.md, "Many invocations, one model quota"). Pure arithmetic: no model, no clock, no
network.

The stand-in (lambda/contextual_kb/local/bedrock_standin.py, its rules in local/bedrock_quotas.py) reserves
a call's input + cache write + max_tokens at its start (the cache read too with ``--reserve-cache-reads``)
and settles it at its end to input + cache write + output x the model's burndown. Under ``--window bucket``
it keeps a token bucket of ``burst`` seconds of the quota: a call passes when the bucket holds its
reservation (one larger than the bucket needs it full), and at the end the difference goes back (or, when
the output at its burndown is more than was reserved, is taken), the bucket never above full; a request
bucket of the same ``burst`` runs beside it when ``--rpm`` is set. From the corpus this derives each call
of ``bench/fleet.py``'s per-chunk run (reserved, kept, seconds, as the stand-in counts them) and then:

- the arithmetic bounds: the least time the quota needs for what is kept (the fleet's "least time"), and what
  a call larger than the bucket costs;
- a replay of every call against the stand-in's buckets (its own ``TokenBucket``) by a scheduler that
  knows the buckets exactly (an oracle: it sends a call the moment both buckets hold it, in the plan's
  order or any order), scored as
  ``bench/fleet.py`` scores a run (the binding quota's share, 5 s windows). In a given order no schedule
  ends sooner than this one: a call sent earlier never leaves a bucket lower afterwards (its give-back comes
  back sooner, less refill spills), so the replay in order is the bound for turns taken in that order.
  In any order it is one schedule an oracle reaches, not the best. ``--scheduler-burst`` puts the shared
  quota's own smaller bucket in front, to see what that costs.

Under the minute windows (``--window clock-minute`` or ``sliding-minute``) nothing spills: a minute holds
the whole quota, so the bound is the arithmetic alone (the least time for what is kept; a call reserving
more than the whole minute's quota never passes), printed without a replay.

    .venv/bin/python bench/quota_bound.py [--tpm 800000] [--rpm 0] [--burst 1.0] [--scheduler-burst 0.5]
        [--window bucket] [--model ID] [--reserve-cache-reads]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import MODEL_ID, binding_share, slices  # bench/fleet.py

from contextual_kb.local.bedrock_quotas import (
    TokenBucket,
    reservation,
    settled_charge,
)  # the stand-in's rules

LATENCY_SECONDS = 0.3  # the stand-in's defaults (bench/fleet.py passes them): 300 ms + 2 ms a token
PER_TOKEN_SECONDS = 0.002


@dataclass(frozen=True, slots=True)
class Call:
    document: int
    reserved: int  # what the stand-in reserves at the start
    kept: int  # what it keeps at the end
    seconds: float  # from its start to its end (when the rest goes back)
    writes: bool = False  # the first call of a cached document (the others read once it has started)
    reads: bool = False


def workload(
    documents: Sequence[dict[str, Any]], *, model: str = MODEL_ID, reserve_cache_reads: bool = False
) -> list[Call]:
    """The calls of a per-chunk run of ``documents``, as the stand-in counts them: the real prompts
    (prompts.chunk_request), the stand-in's token count, answers, latency and rules. Pure."""
    from contextual_kb.local.bedrock_standin import _contexts, count_tokens
    from contextual_kb.runtime.context.claude.pricing import min_cache_tokens, output_burndown
    from contextual_kb.runtime.context.claude.prompts import PromptSettings, chunk_request
    from contextual_kb.runtime.context.claude.windows import estimate_tokens

    prompt = PromptSettings(model_id=model)
    minimum = min_cache_tokens(model)
    burndown = output_burndown(model)
    calls: list[Call] = []
    for number, document in enumerate(documents):
        text, chunks = document["content"], document["chunks"]
        # the engine caches a document of more than one call whose prefix reaches the minimum (estimated)
        cached = len(chunks) > 1 and estimate_tokens(prompt.system) + estimate_tokens(text) >= minimum
        for index, chunk in enumerate(chunks):
            request = chunk_request(prompt, document=text, chunk=chunk, cache=cached)
            system = request["system"][0]["text"]
            block, question = (b["text"] for b in request["messages"][0]["content"])
            total = count_tokens(system) + count_tokens(block) + count_tokens(question)
            prefix = count_tokens(system) + count_tokens(block)
            cacheable = cached and prefix >= minimum  # the stand-in's own rule
            output = min(count_tokens(_contexts(block, question)), request["max_tokens"])
            read = prefix if cacheable and index else 0
            written = prefix if cacheable and not index else 0
            uncached = total - read - written
            reserved = reservation(
                uncached=uncached, cache_write=written, cache_read=read, max_tokens=request["max_tokens"],
                cache_reads=reserve_cache_reads,
            )  # fmt: skip
            kept = settled_charge(uncached=uncached, cache_write=written, output=output, burndown=burndown)
            seconds = LATENCY_SECONDS + PER_TOKEN_SECONDS * output
            calls.append(Call(number, reserved, kept, seconds, bool(written), bool(read)))
    return calls


@dataclass(frozen=True, slots=True)
class Replay:
    seconds: float  # first call to last answer
    binding: float  # the binding quota's share, 5 s windows (bench/fleet.py's figure)
    tokens_share: float  # kept tokens over the run, of the token quota
    requests_share: float
    lost_seconds: float  # token quota lost to a full bucket (refill or give-backs it could not hold)


def replay(
    calls: Sequence[Call],
    *,
    rpm: int,
    tpm: int,
    burst: float = 1.0,
    scheduler_burst: float = 0.0,
    in_order: bool = False,
) -> Replay:
    """Every call sent the moment the stand-in's buckets (and, with ``scheduler_burst``, a bucket of that
    many seconds in front, as the shared quota keeps) hold it; a cached document's reads once its write has
    started (the stand-in's rule). ``in_order``: strictly in the plan's order (a call waits for the one
    before it, as turns do); else any call that fits goes (small ones pass a large one waiting); ``rpm`` 0:
    no request quota. Pure."""
    tokens = TokenBucket(tpm, burst)
    requests = TokenBucket(rpm or 10**9, burst)  # no request quota: one that never binds
    front = TokenBucket(tpm, scheduler_burst) if scheduler_burst else None
    buckets = [b for b in (tokens, requests, front) if b is not None]
    for bucket in buckets:
        bucket.to(0.0)  # full at the plan's start
    readable: dict[int, float] = {}  # a cached document's reads may start then
    waiting = list(calls)
    ends: list[tuple[float, int, int]] = []  # (when, give-back, index) of calls under way
    admitted: list[tuple[float, int]] = []
    now, last_end = 0.0, 0.0
    while waiting:
        while ends and ends[0][0] <= now:
            at, back, _ = heapq.heappop(ends)
            tokens.give_back(back, at)
            if front is not None:
                front.give_back(back, at)
        for bucket in buckets:
            bucket.to(now)
        sent = False
        for call in list(waiting):
            ready = not call.reads or readable.get(call.document, math.inf) <= now
            fits = (
                ready
                and tokens.wait(call.reserved) == 0
                and requests.wait(1) == 0
                and (front is None or front.wait(call.reserved) == 0)
            )
            if fits:
                waiting.remove(call)
                tokens.take(call.reserved)
                requests.take(1)
                if front is not None:
                    front.take(call.reserved)
                if call.writes:
                    readable[call.document] = now + LATENCY_SECONDS
                heapq.heappush(ends, (now + call.seconds, call.reserved - call.kept, len(admitted)))
                admitted.append((now, call.kept))
                last_end = max(last_end, now + call.seconds)
                sent = True
            elif in_order:
                break
        if sent:
            continue
        # the next moment anything can change: a call ends, a cache becomes readable, a bucket holds a call
        candidates = [ends[0][0]] if ends else []
        candidates += [t for t in readable.values() if t > now]
        for call in waiting[:1] if in_order else waiting:
            if call.reads and readable.get(call.document, math.inf) > now:
                continue
            need = max(tokens.wait(call.reserved), requests.wait(1))
            if front is not None:
                need = max(need, front.wait(call.reserved))
            candidates.append(now + max(need, 1e-9))
        now = min(candidates)
    while ends:
        at, back, _ = heapq.heappop(ends)
        tokens.give_back(back, at)
    tokens.to(last_end)
    return _scored(admitted, last_end, tokens, requests if rpm else None, rpm=rpm, tpm=tpm)


def _scored(
    admitted: list[tuple[float, int]],
    last_end: float,
    tokens: TokenBucket,
    requests: TokenBucket | None,
    *,
    rpm: int,
    tpm: int,
) -> Replay:
    """The run scored as ``bench/fleet.py`` scores one: what passed, second by second, from its start."""
    by_second_requests: list[int] = []
    by_second_tokens: list[int] = []
    for at, kept in admitted:
        second = int(at)
        grow = second + 1 - len(by_second_requests)
        by_second_requests.extend([0] * grow)
        by_second_tokens.extend([0] * grow)
        by_second_requests[second] += 1
        by_second_tokens[second] += kept
    kept_total = sum(k for _, k in admitted)
    return Replay(
        seconds=last_end,
        binding=binding_share(by_second_requests, by_second_tokens, rpm, tpm),
        tokens_share=kept_total / (tokens.rate * last_end),
        requests_share=len(admitted) / (requests.rate * last_end) if requests is not None else 0.0,
        lost_seconds=tokens.lost / tokens.rate,
    )


@dataclass(frozen=True, slots=True)
class Bounds:
    calls: int
    reserved: int
    kept: int
    least_seconds: float  # the least time the quota needs: kept tokens or requests, whichever binds
    larger_than_bucket: int  # calls reserving more than the bucket holds (each needs it full)
    overflow_seconds: float  # what their give-backs alone spill from an empty bucket, at the least


def bounds(calls: Sequence[Call], *, rpm: int, tpm: int, burst: float = 1.0) -> Bounds:
    """The arithmetic: a call reserving more than the bucket holds passes only with the bucket full, and
    its give-back (reserved - kept) is more than an empty bucket holds; what is over spills, unless another
    such call has been let in meanwhile. Pure."""
    rate = tpm / 60
    capacity = rate * burst
    large = [c for c in calls if c.reserved > capacity]
    kept = sum(c.kept for c in calls)
    return Bounds(
        calls=len(calls),
        reserved=sum(c.reserved for c in calls),
        kept=kept,
        least_seconds=max(kept / rate, len(calls) / (rpm / 60) if rpm else 0.0),
        larger_than_bucket=len(large),
        overflow_seconds=sum(max(0.0, c.reserved - c.kept - capacity) for c in large) / rate,
    )


def main() -> int:
    from corpus import DEFAULT_DATASET, load_documents  # bench/corpus.py

    from contextual_kb.local.bedrock_quotas import WINDOWS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--rpm", type=int, default=0, help="requests a minute; 0: no request quota")
    parser.add_argument("--tpm", type=int, default=800_000)
    parser.add_argument("--window", choices=WINDOWS, default="bucket", help="the stand-in's window")
    parser.add_argument("--burst", type=float, default=1.0, help="the stand-in's buckets, seconds of quota")
    parser.add_argument("--scheduler-burst", type=float, default=0.5, help="the shared quota's bucket")
    parser.add_argument(
        "--model", default=MODEL_ID, help="the model id called (its burndown, its cache minimum)"
    )
    parser.add_argument("--reserve-cache-reads", action="store_true", help="the stand-in's switch")
    parser.add_argument("--orders", type=int, default=0, help="also replay the plan in this many orders")
    parser.add_argument("--fleet", default="4,16", help="also in the order of N invocations' calls in turn")
    args = parser.parse_args()
    documents = load_documents(args.dataset)
    shape = {"model": args.model, "reserve_cache_reads": args.reserve_cache_reads}
    calls = workload(documents, **shape)
    quota = {"rpm": args.rpm, "tpm": args.tpm, "burst": args.burst}
    b = bounds(calls, **quota)
    requests = f"{args.rpm} requests a minute" if args.rpm else "no request quota"
    print(
        f"{b.calls} calls reserve {b.reserved:,} tokens and keep {b.kept:,}: the quota's least time "
        f"{b.least_seconds:.1f} s ({args.tpm:,} tokens, {requests}); ",
        end="",
    )
    if args.window != "bucket":
        over = sum(c.reserved > args.tpm for c in calls)
        print(
            f"under {args.window} a minute holds the whole quota: {_calls(over)} more than it (never "
            f"let in); nothing spills, so the bound is {100.0 if not over else 0.0:.1f}% of the quota"
        )
        return 0
    print(
        f"{_calls(b.larger_than_bucket)} more than the {args.burst:g} s bucket holds, their give-backs "
        f"spilling at least {b.overflow_seconds:.1f} s of quota if each waits for the last to end\n"
    )
    print(
        "| sent when | order | seconds | binding, 5 s | tokens / requests, the run | lost to a full bucket |"
    )
    print("|---|---|---|---|---|---|")
    fronts = {
        0.0: "the stand-in's buckets hold it",
        args.scheduler_burst: f"and a {args.scheduler_burst:g} s in front",
    }
    for front, label in fronts.items():
        for in_order in (False, True):
            r = replay(calls, **quota, scheduler_burst=front, in_order=in_order)
            print(
                f"| {label} | {'the plan' if in_order else 'any that fits'} | {r.seconds:.1f} | "
                f"{100 * r.binding:.1f}% | {100 * r.tokens_share:.1f}% / {100 * r.requests_share:.1f}% | "
                f"{r.lost_seconds:.1f} s |"
            )
    # the plan's order is the corpus's; others: the documents shuffled, each one's calls in their order
    print()  # markdown: a list after the table
    draw = random.Random(7)
    for front, label in fronts.items() if args.orders else ():
        shares = []
        for _ in range(args.orders):
            order = list(range(len(documents)))
            draw.shuffle(order)
            rank = {d: i for i, d in enumerate(order)}
            shuffled = sorted(calls, key=lambda c: rank[c.document])  # stable
            shares.append(replay(shuffled, **quota, scheduler_burst=front, in_order=True).binding)
        print(
            f"- the plan in {args.orders} orders, {label}: {100 * min(shares):.1f}-{100 * max(shares):.1f}%"
        )
    for count in [int(n) for n in args.fleet.split(",") if n]:
        interleaved = fleet_order(documents, count, rpm=args.rpm, tpm=args.tpm, **shape)
        for front, label in fronts.items():
            r = replay(interleaved, **quota, scheduler_burst=front, in_order=True)
            print(f"- the plan of {count} invocations' calls in turn, {label}: {100 * r.binding:.1f}%")
    return 0


def _calls(count: int) -> str:
    return f"{count} call reserves" if count == 1 else f"{count} calls reserve"


def fleet_order(
    documents: Sequence[dict[str, Any]],
    count: int,
    *,
    rpm: int,
    tpm: int,
    model: str = MODEL_ID,
    reserve_cache_reads: bool = False,
) -> list[Call]:
    """The calls of ``bench/fleet.py``'s ``count`` slices, one of each slice in turn. Pure."""
    shape = {"model": model, "reserve_cache_reads": reserve_cache_reads}
    per_slice = [workload(part, **shape) for part in slices(list(documents), count, rpm, tpm, model)]
    ordered: list[Call] = []
    for number, calls in enumerate(per_slice):  # documents numbered apart across slices (cache reads)
        per_slice[number] = [replace(c, document=c.document * count + number) for c in calls]
    for i in range(max(len(c) for c in per_slice)):
        ordered.extend(calls[i] for calls in per_slice if i < len(calls))
    return ordered


if __name__ == "__main__":
    sys.exit(main())
