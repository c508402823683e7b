"""`ckb eval --local` on a small labelled set: the real handler, BM25, the metrics, the table and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextual_kb.cli.main import app

runner = CliRunner()


@pytest.fixture
def labelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("CONTEXT_STRATEGY", "structural")  # the command sets it per strategy; restored after
    documents = [
        {
            "doc_id": f"doc{d}",
            "original_uuid": f"u{d}",
            "content": "",
            "chunks": [
                {
                    "chunk_id": f"doc{d}_{i}",
                    "original_index": i,
                    "content": f"def handler_{d}_{i}(): return {i}",
                }
                for i in range(3)
            ],
        }
        for d in range(4)
    ]
    for document in documents:
        document["content"] = "\n".join(c["content"] for c in document["chunks"])
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(documents))
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "\n".join(
            json.dumps({"query": f"handler {d} {i}", "golden_chunk_uuids": [[f"u{d}", i]]})
            for d, i in ((0, 1), (2, 2), (3, 0))
        )
    )
    return corpus, queries


def test_eval_local_prints_each_configuration(labelled: tuple[Path, Path]) -> None:
    corpus, queries = labelled
    args = ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,3"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["chunks"], r["retrieval"]) for r in rows] == [
        ("raw", "bm25 index"),
        ("raw", "bm25 code-aware"),
        ("structural", "bm25 index"),
        ("structural", "bm25 code-aware"),
    ]
    for row in rows:  # 12 chunks, 3 queries each with one golden chunk: all found within 3
        assert row["queries"] == 3 and row["pass@3"] == 100.0 and row["recall@3"] == 100.0
        assert 0 < row["mrr"] <= 100.0 and row["pass@1"] <= row["pass@3"]
    # Contextualized rows say what they gained over raw chunks at the middle cut-off (3 of 1,3): nothing.
    assert ["vs_raw" in row for row in rows] == [False, False, True, True]
    assert rows[3]["vs_raw"] == {
        "k": 3,
        "points": 0.0,
        "margin95": 0.0,
        "better": 0,
        "worse": 0,
        "p_value": 1.0,
    }
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "P@1" in table.output and "structural" in table.output and "code-aware" in table.output
    assert "P@3 gain over raw chunks" in table.output
    assert "structural, bm25 code-aware" in table.output and "0 up, 0 down" in table.output


def test_eval_refuses_bad_input(labelled: tuple[Path, Path], tmp_path: Path) -> None:
    corpus, queries = labelled
    no_cutoff = runner.invoke(
        app, ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--k", ","]
    )
    assert no_cutoff.exit_code == 2 and "expected positive cut-offs" in no_cutoff.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no query field"}\n')
    refused = runner.invoke(app, ["eval", "--local", "--corpus", str(corpus), "--queries", str(bad)])
    assert refused.exit_code == 2 and "expected labelled queries" in " ".join(refused.output.split())


class _BagOfWords:
    """A stand-in for MiniLM: hashed word counts, normalised, so dense ranking is deterministic and fast."""

    name = "minilm"

    def embed(self, texts: list[str]) -> object:
        import numpy as np

        vectors = np.zeros((len(texts), 64))
        for row, text in enumerate(texts):
            for word in text.replace("_", " ").split():
                vectors[row, sum(map(ord, word)) % 64] += 1
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)

    def chunk_windows(self, context: str, chunk: str) -> list[str]:
        return [f"{context}\n\n{chunk}" if context else chunk]


def test_eval_local_dense_and_hybrid_rows(
    labelled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextual_kb.cli import extras
    from contextual_kb.evaluation import dense

    monkeypatch.setattr(dense, "MiniLm", _BagOfWords)
    monkeypatch.setattr(extras, "MODULES", {**extras.MODULES, "dense": ()})  # the stub is the dense extra
    corpus, queries = labelled
    args = ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,3", "--json"]
    result = runner.invoke(
        app, [*args, "--strategies", "none", "--analyzers", "code-aware", "--retrieval", "bm25,dense,hybrid"]
    )
    assert result.exit_code == 0, result.output
    rows = {r["retrieval"]: r for r in json.loads(result.stdout)}
    assert list(rows) == ["bm25 code-aware", "dense minilm", "hybrid code-aware+minilm"]
    # Each query names its chunk's digits, which hashed words match: every golden chunk is within 3.
    assert all(row["pass@3"] == 100.0 and row["queries"] == 3 for row in rows.values())


def test_eval_dense_without_its_extra_says_how_to_install(
    labelled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from contextual_kb.evaluation import dense

    dense._model.cache_clear()
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails as if not installed
    corpus, queries = labelled
    args = ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--strategies", "none"]
    refused = runner.invoke(app, [*args, "--retrieval", "hybrid"])
    dense._model.cache_clear()
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "ckb eval --retrieval hybrid needs the dense extra" in said
    assert "install it with pip install -e '" in said and "[cli,eval,local,dense]'" in said
    unknown = runner.invoke(app, [*args, "--retrieval", "sparse"])
    assert unknown.exit_code == 2 and "unknown retrieval" in unknown.output


def test_eval_claude_runs_against_the_standin_and_says_so(
    labelled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline claude calls the stand-in as `ckb demo` does, with no region or endpoint from the user, and
    every model-backed row says what it measured."""
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    corpus, queries = labelled
    args = ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,3"]
    chosen = ["--strategies", "none,structural,claude", "--analyzers", "code-aware"]
    result = runner.invoke(app, [*args, *chosen, "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["chunks"]: r for r in json.loads(result.stdout)}
    claude = rows["claude"]
    assert claude["endpoint"] == "stand-in" and claude["model_calls"] == 12
    assert claude["fallbacks"] == {} and claude["mostly_fallback"] is False
    assert "model_calls" not in rows["structural"] and "endpoint" not in rows["raw"]
    table = runner.invoke(app, [*args, *chosen])
    text = " ".join(table.output.split())
    assert "claude (stand-in)" in text
    assert "claude: 12 model calls to the local Bedrock stand-in; 0 of 12 chunks fell back" in text


def test_eval_flags_a_claude_row_that_mostly_fell_back(
    labelled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that cannot be reached gives structural contexts: the row says so, never passing them off
    as the model's."""
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("MODEL_MAX_RETRIES", "0")
    monkeypatch.setenv("BREAKER_COOLDOWN_SECONDS", "0")
    corpus, queries = labelled
    args = ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,3"]
    chosen = ["--strategies", "claude", "--analyzers", "code-aware"]
    result = runner.invoke(app, [*args, *chosen, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["endpoint"] == "custom endpoint" and row["mostly_fallback"] is True
    assert sum(row["fallbacks"].values()) == 12
    table = " ".join(runner.invoke(app, [*args, *chosen]).output.split())
    assert "claude (fell back)" in table
    assert "these rows measure structural contexts, not the model's" in table


def test_chunkers_are_compared_on_whole_documents_at_the_same_length(labelled: tuple[Path, Path]) -> None:
    """--chunkers: each document whole through the real handler (fixed-size, and ours), the golden chunks'
    coverage by the top k; the fixed size matched to our average chunk length."""
    corpus, queries = labelled
    args = ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,3"]
    result = runner.invoke(app, [*args, "--chunkers", "fixed,structure", "--chunk-tokens", "20", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["chunker"], r["retrieval"]) for r in rows] == [
        ("fixed", "bm25 index"),
        ("fixed", "bm25 code-aware"),
        ("structure", "bm25 index"),
        ("structure", "bm25 code-aware"),
    ]
    assert all(r["length_matched"] and 0 <= r["coverage@1"] <= r["coverage@3"] <= 100 for r in rows)
    assert rows[0]["setting"].endswith("20% overlap") and rows[2]["setting"] == "max 20 tokens"
    assert "vs_fixed" in rows[2] and "vs_fixed" not in rows[0]
    table = runner.invoke(app, [*args, "--chunkers", "fixed,structure", "--chunk-tokens", "20"])
    assert table.exit_code == 0 and "Cov@3" in table.stdout and "ours minus fixed-size" in table.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--chunkers", "semantic", "--local"], "unknown chunker 'semantic'"),
        (["--chunkers", "structure"], "Add --local"),
        (
            ["--chunkers", "structure", "--local", "--chunk-tokens", "40", "--chunk-overlap", "30"],
            "more than half",
        ),
    ],
)
def test_chunker_mistakes_are_one_line(labelled: tuple[Path, Path], extra: list[str], message: str) -> None:
    corpus, queries = labelled
    result = runner.invoke(app, ["eval", "--corpus", str(corpus), "--queries", str(queries), *extra])
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("command", ["eval", "local"])
def test_a_dense_extra_that_fails_to_import_names_this_installs_pip_line(
    labelled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Past the extras check (its modules are found) the import can still fail (a broken torch): the line
    said `pip install -e '.[dense]'`, a checkout's command, to every install; it is cli/extras.py's."""
    import sys

    from contextual_kb.cli import extras, local
    from contextual_kb.cli.errors import CliError
    from contextual_kb.evaluation import dense

    dense._model.cache_clear()
    monkeypatch.setattr(extras, "MODULES", {**extras.MODULES, "dense": ()})  # the check finds it
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # and its import fails
    corpus, queries = labelled
    if command == "eval":
        args = ["eval", "--local", "--corpus", str(corpus), "--queries", str(queries), "--strategies", "none"]
        refused = runner.invoke(app, [*args, "--retrieval", "dense"])
        assert refused.exit_code == 2, refused.output
        said = " ".join(refused.output.split())
    else:  # ckb local --dense's stack, as its commands open it
        with pytest.raises(CliError) as raised, local.running_stack(dense=True):
            pass
        said = str(raised.value)
    dense._model.cache_clear()
    assert "dense extra (torch, CPU): " in said and " is missing: install it with " in said, said
    assert extras.install_command(["dense"]) in said and "'.[dense]'" not in said, said
