"""`ckb demo` says what each long step does while it runs, and labels a `--dataset` by what it is."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextual_kb.cli import demo
from contextual_kb.cli.main import app

runner = CliRunner()


def test_the_demo_shows_its_long_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shown: list[str] = []

    @contextmanager
    def recorded(first: str, **_: object) -> Iterator[Callable[[str], None]]:
        shown.append(first)
        yield shown.append

    monkeypatch.setattr(demo, "status_line", recorded)
    documents = tmp_path / "docs"
    documents.mkdir()
    (documents / "big.md").write_text("# Big\n\n" + "A line of the big document.\n" * 2000)
    args = ["demo", "--documents", str(documents), "--no-eval", "--show", "0", "--strategy", "structural"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + result.stderr
    assert any(line.startswith("chunking and staging big.md (1 of 1, ") for line in shown), shown
    assert any(line.startswith("the handler gives ") for line in shown), shown
    assert "a local Knowledge Base syncs the 1 documents for the query" in shown


def test_a_dataset_that_is_not_the_benchmark_is_not_labelled_the_benchmark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    folder = tmp_path / "mine"
    folder.mkdir()
    documents = [
        {
            "doc_id": f"doc{d}",
            "original_uuid": f"u{d}",
            "content": "\n".join(f"def handler_{d}_{i}(): return {i}" for i in range(2)),
            "chunks": [
                {
                    "chunk_id": f"doc{d}_{i}",
                    "original_index": i,
                    "content": f"def handler_{d}_{i}(): return {i}",
                }
                for i in range(2)
            ],
        }
        for d in range(3)
    ]
    (folder / "codebase_chunks.json").write_text(json.dumps(documents))
    (folder / "evaluation_dev.jsonl").write_text(
        json.dumps({"query": "handler 1 1", "golden_chunk_uuids": [["u1", 1]]}) + "\n"
    )
    args = ["demo", "--dataset", str(folder), "--show", "0", "--strategy", "structural", "--question", ""]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output + result.stderr
    assert f"the dataset in {folder} (not the codebase benchmark), dev split: 1 queries" in result.output
    assert "codebase benchmark, dev split" not in result.output.replace(
        "(not the codebase benchmark), dev", ""
    )
