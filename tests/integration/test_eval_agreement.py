"""``ckb eval --stack`` on the local Knowledge Base measures what ``ckb eval --local`` measures on the same
corpus and queries: the same chunks (the corpus is chunked as the data source chunks it), the same contexts
(the same handler and strategy, and the same document names: ``evaluation/naming.py``), the same analysis
and BM25. The two paths agree to the figure, and per query but for the order of chunks tied on score."""

from __future__ import annotations

import json
import random
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.evaluation.offline import contextualized_bodies, rank_bm25
from contextual_kb.local import stack as local
from contextual_kb.local.environment import environment
from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.local.model_endpoint import model_endpoint
from contextual_kb.query import ingestion

MAX_TOKENS = 40
TOPICS = (
    "token bucket refill rate limiter capacity burst",
    "refund card payment settlement acquiring bank",
    "incident pager escalation runbook on-call rotation",
    "index analyzer stemmer stopwords tokenizer lucene",
    "invoice billing currency tax receipt ledger",
    "deploy rollback canary pipeline artifact release",
)
FILLER = "the a of and to in for with on by from that this which is are was be it as at".split()


def corpus(seed: int = 11) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Documents chunked as the data source chunks them (fixed size, no overlap), and a query per chunk
    from a few of its own words."""
    rng = random.Random(seed)
    documents, queries = [], []
    for n in range(12):
        words = [rng.choice(TOPICS[n % len(TOPICS)].split() + FILLER) for _ in range(160)]
        title = f"Doc {n} about {TOPICS[n % len(TOPICS)].split()[0]}"
        text = title + "\n\n" + " ".join(words) + "."
        chunks = fixed_size_chunks(text, max_tokens=MAX_TOKENS, overlap_percentage=0)
        uuid = f"doc{n:02d}"
        # Some names as users give them (a path, spaces, letters beyond ASCII): both paths name them alike.
        doc_id = (uuid, f"src/lib {n}/{uuid}.py", f"文档/{uuid} é")[n % 3]
        documents.append(
            {
                "original_uuid": uuid,
                "doc_id": doc_id,
                "content": text,
                "chunks": [{"original_index": i, "content": c} for i, c in enumerate(chunks)],
            }
        )
        for i, chunk in enumerate(chunks):
            content = [w for w in chunk.split() if w not in FILLER]
            if len(content) >= 4:
                queries.append({"query": " ".join(rng.sample(content, 4)), "golden_chunk_uuids": [[uuid, i]]})
    return documents, queries


def ckb(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.output[result.output.index("[") :])


@pytest.mark.parametrize("strategy", ["none", "structural", "claude"])
def test_eval_on_the_local_stack_equals_eval_local(
    strategy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claude: the model's contexts from the Bedrock stand-in (each path its own stand-in, which writes a
    context by rule from the document and the chunk), none falling back to the structural context."""
    if strategy == "claude":  # each path starts its stand-in as it does for a user (tests set a dead port)
        monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL")
    documents, queries = corpus()
    (tmp_path / "corpus.json").write_text(json.dumps(documents))
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    given = ["--corpus", str(tmp_path / "corpus.json"), "--queries", str(tmp_path / "queries.jsonl")]
    given += ["--k", "1,3,10", "--json"]
    offline = ckb("eval", "--local", "--strategies", strategy, "--analyzers", "index", *given)
    (row,) = offline
    # What eval --local ranked, per query (its own functions), before the stack's moto starts.
    with model_endpoint(latency_ms=0, per_token_ms=0) if strategy == "claude" else nullcontext() as endpoint:
        bodies, use = contextualized_bodies(documents, strategy, endpoint)
    if strategy == "claude":
        assert use is not None and use.calls > 0 and use.fell_back == 0, use
        assert row["endpoint"] == "stand-in" and row["model_calls"] > 0 and row["fallbacks"] == {}, row
    ids = [(d["original_uuid"], c["original_index"]) for d in documents for c in d["chunks"]]
    originals = {
        (d["original_uuid"], c["original_index"]): c["content"] for d in documents for c in d["chunks"]
    }
    local_rankings = rank_bm25([bodies[i] for i in ids], [q["query"] for q in queries], "index", 10)
    real = time.sleep
    monkeypatch.setattr(ingestion.time, "sleep", lambda seconds: real(min(seconds, 0.05)))
    with (
        environment(CONTEXT_STRATEGY=strategy, POWERTOOLS_METRICS_DISABLED="true"),
        local.local_stack(
            analyzer=ANALYZERS["index"], max_tokens=MAX_TOKENS, overlap_percentage=0, model_latency_ms=0
        ) as running,
    ):
        deployed = ckb("eval", *given, "--yes", "--state", str(tmp_path / "state.jsonl"))
        indexed = sorted(c.body for c in running.knowledge_base.indexed_chunks(local.KNOWLEDGE_BASE_ID))
    # The same bodies, chunk for chunk: the same chunks and the same contexts, the document's name included.
    assert indexed == sorted(bodies[i] for i in ids)
    if strategy == "structural":  # the name it writes is the key eval --stack uploaded, on both paths
        for d in documents:
            assert f"ckb-eval/{d['doc_id'].replace('/', '_')}.txt:" in bodies[(d["original_uuid"], 0)]
    (plain,) = [r for r in deployed if r["retrieval"] == "hybrid + no rerank"]
    assert len(queries) > 40 and row["queries"] == plain["queries"] == len(queries)
    for k in ("pass@1", "pass@3", "pass@10", "recall@10"):
        assert row[k] == plain[k], (k, row, plain)
    # Per query, the two top 10s hold chunks of the same BM25 scores at every rank: where they differ, they
    # differ only in the order of chunks tied on score (the MRR may then differ a little).
    stack_top = {
        entry["query"]: entry["retrieved"]
        for entry in map(json.loads, (tmp_path / "state.jsonl").read_text().splitlines())
        if entry["label"].split("|")[2] == "none"  # KB|search|reranker|corpus|settings
    }
    score_of = scorer(documents, queries, bodies)
    for query, ranking in zip(queries, local_rankings, strict=True):
        text = query["query"]
        local_scores = [score_of(text, originals[ids[i]]) for i in ranking]
        stack_scores = [score_of(text, chunk) for chunk in stack_top[text]]
        assert local_scores[: len(stack_scores)] == stack_scores, text
        assert all(s == 0 for s in local_scores[len(stack_scores) :])  # the KB returns no zero-score hit


def scorer(documents: list[dict[str, Any]], queries: list[dict[str, Any]], bodies: dict[Any, str]) -> Any:
    """(query, original chunk) -> the BM25 score of that chunk's indexed body, rounded (bm25s, as both)."""
    import bm25s

    analyze = ANALYZERS["index"]
    ids = [(d["original_uuid"], c["original_index"]) for d in documents for c in d["chunks"]]
    body_of = {
        c["content"]: bodies[(d["original_uuid"], c["original_index"])]
        for d in documents
        for c in d["chunks"]
    }
    model = bm25s.BM25(k1=1.5, b=0.75)
    model.index([analyze(bodies[i]) for i in ids], show_progress=False)
    position = {bodies[i]: n for n, i in enumerate(ids)}
    cache: dict[str, Any] = {}

    def score(query: str, original: str) -> float:
        if query not in cache:
            tokens = [t for t in analyze(query) if t in model.vocab_dict]
            cache[query] = model.get_scores(tokens)
        return round(float(cache[query][position[body_of[original]]]), 5)

    return score
