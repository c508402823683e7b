"""A user's first mistakes end in one line on stderr (``error: <what>: <why>. <what to do>``), no traceback, a
non-zero exit: 2 for usage (a bad option or file), 1 for the rest. One class of mistake per test, each case a
command a person will type."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from tests.conftest import EVENTS, ROOT

runner = CliRunner()


@pytest.fixture(autouse=True)
def _here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("CONTEXT_STRATEGY", "structural")
    monkeypatch.delenv("CKB_DEBUG", raising=False)
    monkeypatch.chdir(ROOT)


def one_line(result: Any, code: int) -> str:
    """The command's single error line; asserts it is the only thing on stderr, with no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.rstrip("\n").splitlines()  # nothing before it either, not even an empty line
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in result.output
    return lines[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {
        "not-json": "not json {",
        "empty": "",
        "array": "[1, 2]",
        "bad-queries": '{"query": "x"\n',
        "bad-corpus": '{"not": "a list"}',
    }
    out = {}
    for name, text in made.items():
        out[name] = tmp_path / f"{name}.json"
        out[name].write_text(text)
    out["folder"] = tmp_path
    return out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["transform", "{not-json}"], "not JSON (line 1, column 1"),
        (["transform", "{empty}"], "the file is empty"),
        (["transform", "{array}"], "a JSON list, not an object"),
        (["transform", "{folder}"], "is a directory"),
        (["eval", "--local", "--queries", "{bad-queries}"], "bad-queries.json:1: not JSON"),
        (["eval", "--local", "--corpus", "{bad-corpus}"], "bad-corpus.json: not the expected shape"),
    ],
)
def test_unreadable_or_malformed_files_are_named(
    files: dict[str, Path], args: list[str], expected: str
) -> None:
    filled = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    line = one_line(runner.invoke(app, filled), 2)
    assert expected in line
    assert "expected" in line or "--help" in line  # it says what to give


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["demo", "--strategy", "foo"], {}, "'--strategy'"),
        (["demo"], {"CONTEXT_STRATEGY": "foo"}, "env var: 'CONTEXT_STRATEGY'"),
        (
            ["transform", str(EVENTS / "markdown" / "event.json")],
            {"CONTEXT_STRATEGY": "foo"},
            "CONTEXT_STRATEGY",
        ),
        (["demo", "--max-tokens", "0"], {}, "'--max-tokens'"),
        (["demo", "--overlap", "150"], {}, "'--overlap'"),
        (["demo", "--chunks-per-batch", "0"], {}, "'--chunks-per-batch'"),
        (["transform", str(EVENTS / "markdown" / "event.json"), "--objects", "/nowhere"], {}, "'--objects'"),
        (["eval", "--local", "--strategies", "foo"], {}, "--strategies: unknown strategy 'foo'"),
        (["eval", "--local", "--analyzers", "foo"], {}, "--analyzers: unknown analyzer 'foo'"),
        (["eval", "--local", "--k", "abc"], {}, "--k: 'abc'"),
        (["query", "x", "--k", "abc"], {}, "'--k'"),
        (["query", "x", "--filter", "{bad"], {}, "--filter: not JSON"),
        (["query", "x", "--filter", "[1]"], {}, "--filter: not a JSON object"),
        (["query", "x", "--search", "sparse"], {}, "'--search'"),
        (["nope"], {}, "No such command 'nope'"),
    ],
)
def test_usage_errors_name_the_option_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # A bad --filter is reported before credentials or the stack are looked for: none are reachable here.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    line = one_line(runner.invoke(app, args), 2)
    assert named in line


@pytest.mark.parametrize(
    "args",
    [
        ["query", "refund policy", "--region", "us-east-1"],
        # Its progress bar is shown from the first job: not an empty line before the error.
        ["contextualize", "--dry-run", "--region", "us-east-1"],
    ],
)
def test_no_credentials_says_how_to_configure_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]
) -> None:
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # its credentials were found (and kept) earlier
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    line = one_line(runner.invoke(app, args), 1)
    assert line.startswith("error: no AWS credentials")
    assert "aws configure" in line and "AWS_PROFILE" in line


def test_no_region_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    line = one_line(runner.invoke(app, ["sync"]), 1)
    assert line == "error: no AWS region: none is configured. Pass --region or set AWS_REGION"


def test_an_endpoint_that_does_not_answer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's own form, with nothing listening: the S3 upload before the handler fails."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("S3_MAX_ATTEMPTS", "1")
    line = one_line(runner.invoke(app, ["transform", str(EVENTS / "markdown" / "event.json")]), 1)
    assert line.startswith("error: cannot reach http://127.0.0.1:9")
    assert "AWS_ENDPOINT_URL" in line


def test_a_failed_transformation_is_one_line_and_fails_fast() -> None:
    """A malformed event is refused before any server starts; a malformed batch object by the handler."""
    line = one_line(runner.invoke(app, ["transform", str(EVENTS / "malformed-event" / "event.json")]), 1)
    assert line.startswith(
        "error: transformation failed: event: inputFiles[1].contentBatches: Field required"
    )
    line = one_line(runner.invoke(app, ["transform", str(EVENTS / "malformed-batch" / "event.json")]), 1)
    assert line.startswith("error: transformation failed: s3://") and "contentBody" in line


def test_debug_shows_the_traceback_and_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["transform", str(EVENTS / "malformed-event" / "event.json")]
    result = runner.invoke(app, ["--debug", *args])
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and result.stderr.strip().splitlines()[-1].startswith("error: ")
    monkeypatch.setenv("CKB_DEBUG", "1")
    assert "Traceback" in runner.invoke(app, args).stderr


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextual_kb.local import runner as local_runner

    def broken(path: Path) -> dict[str, Any]:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(local_runner, "load_event", broken)
    result = runner.invoke(app, ["transform", str(EVENTS / "markdown" / "event.json")])
    assert isinstance(result.exception, ZeroDivisionError)  # not turned into a tidy line


def test_json_and_logs_stay_apart_and_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """--json: stdout holds the response and nothing else; --logs: stderr holds one JSON object a line,
    unwrapped, whatever the terminal's width."""
    monkeypatch.setenv("COLUMNS", "40")
    event = EVENTS / "markdown" / "event.json"
    result = runner.invoke(app, ["transform", str(event), "--json", "--logs"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outputFiles"]
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    assert any(line.get("message") == "transformation complete" for line in logged)


def test_the_summary_tells_files_apart_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    # The summary table alone (--question '': no query panels after it).
    result = runner.invoke(
        app, ["demo", "--strategy", "structural", "--show", "0", "--no-eval", "--question", ""]
    )
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table)
    rows = [line for line in table if line.startswith("│") and "total" not in line]
    assert len(rows) == 3
    names = [row.split("│")[1].strip() for row in rows]
    assert len(set(names)) == 3
    assert names[1:] == ["payments-runbook.md", "token_bucket.py.txt"]  # .py goes up as text
    assert names[0].endswith("services-agreement.txt")


def test_help_is_plain_and_whole_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for command in ("transform", "demo", "eval", "upload", "sync", "query", "ask"):
        text = runner.invoke(app, [command, "--help"]).stdout
        assert "<bool>" not in text and "<str>" not in text and "<list[" not in text, command
        assert "{" not in text.split("\n", 1)[0], command  # the usage line
        assert not re.search(r" \.(\s|$)", text), command  # what Rich's markup once ate: "AWS region ."
        assert all(len(line) <= 80 for line in text.splitlines()), command
    eval_help = " ".join(runner.invoke(app, ["eval", "--help"]).stdout.split())
    assert "the codebase benchmark (fetched once into the cache, or --dataset): its dev split" in eval_help
    assert "../shared" not in eval_help
    assert "[default: index,code-aware]" in eval_help


def test_demo_skips_what_is_not_text_and_reads_latin_1(tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.7\n\x00\x01\x02 binary streams")
    (tmp_path / "notes.txt").write_bytes("café crème brûlée, naïve résumé. ".encode("latin-1") * 20)
    result = runner.invoke(
        app, ["demo", "--documents", str(tmp_path), "--strategy", "structural", "--no-eval", "--show", "1"]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "note: skipped report.pdf: PDF, not text" in said
    assert "note: notes.txt is not UTF-8: read as Latin-1" in said
    assert (
        "café crème brûlée" in said
        and "every chunk back exactly once, in order, original text intact: yes" in said
    )


def test_demo_with_no_text_document_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "scan.pdf").write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3")
    line = one_line(runner.invoke(app, ["demo", "--documents", str(tmp_path), "--no-eval"]), 2)
    assert "no text documents in this folder (1 skipped: skipped scan.pdf: PDF, not text" in line


def test_demo_outside_the_repository_says_where_to_run_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line(runner.invoke(app, ["demo", "--no-eval"]), 2)
    assert "run ckb demo from the repository's folder, or give --documents FOLDER" in line


def test_eval_without_the_benchmark_and_offline_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A clone with nothing beside it, on a machine that cannot reach the benchmark's source.
    monkeypatch.setenv("CKB_DATA_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["eval", "--local"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    progress, line = result.stderr.rstrip("\n").splitlines()  # one progress line, one error line
    assert progress.startswith("Fetching the codebase benchmark once (4.7 MB): Anthropic's, ")
    assert "(MIT licence, Copyright (c) 2023 Anthropic)" in progress
    assert line.startswith("error: could not fetch the codebase benchmark (http://127.0.0.1:9/")
    assert "github.com/anthropics/anthropic-cookbook at 4b36a1e, skills/contextual-embeddings/data" in line
    assert "pass --dataset FOLDER" in line
    assert [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []  # nothing half-written


def test_a_dataset_folder_without_the_benchmark_files_is_a_usage_error(tmp_path: Path) -> None:
    line = one_line(runner.invoke(app, ["eval", "--local", "--dataset", str(tmp_path)]), 2)
    assert line == (
        f"error: --dataset: {tmp_path}: no codebase_chunks.json with evaluation_dev.jsonl or "
        "evaluation_set.jsonl in it"
    )


def test_eval_with_lucene_not_built_says_so_before_any_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CKB_LUCENE_HOME", str(tmp_path))
    line = one_line(runner.invoke(app, ["eval", "--local", "--engine", "lucene"]), 2)
    assert line.startswith("error: --engine: ") and line.endswith("run make lucene")


def test_a_model_endpoint_nobody_listens_at_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 36 s of retries, exit 0, every context a structural fallback and nothing said."""
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", "http://127.0.0.1:9")  # the discard port: refused
    result = runner.invoke(
        app, ["transform", str(EVENTS / "markdown" / "event.json"), "--strategy", "claude"]
    )
    line = one_line(result, 1)
    assert line == (
        "error: cannot reach the model endpoint http://127.0.0.1:9 (ANTHROPIC_BEDROCK_BASE_URL): connection "
        "refused. Start it, or unset ANTHROPIC_BEDROCK_BASE_URL for the local stand-in; --allow-fallback "
        "runs anyway with structural contexts"
    )
    assert "Transformation summary" not in result.output  # found before the handler spent its retries


@pytest.mark.parametrize("engine", ["python,lucene", "lucen"])
def test_eval_with_an_engine_it_does_not_know_is_a_usage_line(engine: str) -> None:
    line = one_line(runner.invoke(app, ["eval", "--local", "--engine", engine]), 2)
    assert f"Invalid value for '--engine': '{engine}' is not one of python, lucene" in line
