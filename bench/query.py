"""The query side's own cost, offline: what ``ckb query`` and ``ckb mcp`` add to the Retrieve and Rerank
calls they make, against the local Knowledge Base (local/knowledge_base.py) over HTTP.

    .venv/bin/python bench/query.py            # make bench-query

The codebase corpus (the benchmark's documents, ``--dataset``) is uploaded to a local stack and synced (the
structural strategy: no model), then each of the dev split's queries (``--queries`` of them) is run:

- ``Retriever.search`` (query/retrieval.py): Retrieve (HYBRID, 100 results), then Rerank to the top 20;
  the time inside the two boto3 calls is summed apart, and our overhead is the rest (building requests,
  reading and splitting results into context and chunk, ordering by the reranker), on the same call;
- ``ckb query`` end to end, in a fresh process each (start-up included), ``--cli-runs`` times;
- the MCP server: from spawning ``ckb mcp`` to the client's handshake done (ready), and the ``query``
  tool's round trip through the SDK's client over stdio.

The stand-in answers in milliseconds, so the figures are our overhead and start-up, not Bedrock's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import DEFAULT_DATASET, load_documents, offline_environment


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"p50_ms": round(statistics.median(ms), 1), "p95_ms": round(percentile(ms, 0.95), 1), "n": len(ms)}


class Timed:
    """The bedrock-agent-runtime client, with the time spent inside its calls summed: what Retriever.search
    spends outside them is our overhead, measured on the same call (no pairing noise)."""

    def __init__(self, client: Any) -> None:
        self.client, self.inside = client, 0.0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def timed(**request: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(**request)
            finally:
                self.inside += time.perf_counter() - started

        return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--cli-runs", type=int, default=5)
    parser.add_argument("--mcp-starts", type=int, default=10)
    args = parser.parse_args()
    offline_environment()
    os.environ["CONTEXT_STRATEGY"] = "structural"

    import boto3

    from contextual_kb.evaluation.deployed import upload_corpus
    from contextual_kb.evaluation.lexical import ANALYZERS
    from contextual_kb.evaluation.offline import load_queries
    from contextual_kb.local import stack as local
    from contextual_kb.query.ingestion import Ingestion
    from contextual_kb.query.retrieval import Retriever

    documents = load_documents(args.dataset)
    questions = [q["query"] for q in load_queries(args.dataset / "evaluation_dev.jsonl")][: args.queries]
    results: dict[str, Any] = {"documents": len(documents), "queries": len(questions)}
    with local.local_stack(analyzer=ANALYZERS["index"]) as running:
        upload_corpus(boto3.client("s3"), local.SOURCE_BUCKET, documents)
        started = time.perf_counter()
        ingestion = Ingestion(local.KNOWLEDGE_BASE_ID, local.DATA_SOURCE_ID, local.REGION)
        job = list(ingestion.follow(ingestion.start(), interval=0.2))[-1]
        results["sync_seconds"] = round(time.perf_counter() - started, 1)
        results["chunks"] = len(running.knowledge_base.indexed_chunks(local.KNOWLEDGE_BASE_ID))
        if job.status != "COMPLETE":
            raise SystemExit(f"the sync ended {job.status}: {job.failure_reasons}")
        client = boto3.client("bedrock-agent-runtime")
        timed = Timed(client)
        retriever = Retriever(local.KNOWLEDGE_BASE_ID, local.REGION, client=timed)
        calls, ours, overhead = [], [], []
        for question in [questions[0], *questions]:  # the first is a warm-up, not counted
            timed.inside = 0.0
            started = time.perf_counter()
            retriever.search(question, k=20)  # Retrieve (HYBRID, 100), then Rerank to the top 20
            total = time.perf_counter() - started
            calls.append(timed.inside)
            ours.append(total)
            overhead.append(total - timed.inside)
        results["retrieve_and_rerank_calls"] = summary(calls[1:])
        results["retriever_search"] = summary(ours[1:])
        results["overhead"] = summary(overhead[1:])

        ckb = shutil.which("ckb", path=str(Path(sys.executable).parent)) or "ckb"
        env = {**os.environ, **running.environment()}
        cli = []
        for question in questions[: args.cli_runs]:
            t0 = time.perf_counter()
            subprocess.run([ckb, "query", question, "--json"], env=env, check=True, capture_output=True)
            cli.append(time.perf_counter() - t0)
        results["ckb_query_process"] = summary(cli)
        results["mcp"] = asyncio.run(mcp_figures(ckb, running.environment(), questions, args.mcp_starts))

    print(json.dumps(results, indent=2))


async def mcp_figures(
    ckb: str, environment: dict[str, str], questions: list[str], starts: int
) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=ckb, args=["mcp"], env=environment)
    ready = []
    for _ in range(starts):
        t0 = time.perf_counter()
        async with Client(params) as client:
            ready.append(time.perf_counter() - t0)
    calls = []
    async with Client(params) as client:
        for question in [questions[0], *questions]:
            t0 = time.perf_counter()
            result = await client.call_tool("query", {"query": question, "k": 20})
            calls.append(time.perf_counter() - t0)
            if result.is_error:
                raise SystemExit(f"the MCP query failed: {result.content}")
    return {"ready": summary(ready), "query_tool": summary(calls[1:])}


if __name__ == "__main__":
    main()
