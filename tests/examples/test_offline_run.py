"""Each example's "Run it offline" commands, exactly as its README gives them: ``ckb transform --handler``
runs the example's handler (not ours) on the sample event, and ``ckb local --handler`` ingests with it;
and every way a handler file can be wrong is one line."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from tests.conftest import ROOT
from tests.examples import EXAMPLES

runner = CliRunner()
EVENT = ROOT / "events" / "markdown" / "event.json"


def readme_command(name: str, starts: str) -> list[str]:
    """The README's one bash line that starts with ``starts``, as arguments (without ``ckb``)."""
    text = (EXAMPLES / name / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    (line,) = [line for block in blocks for line in block.splitlines() if line.startswith(starts)]
    words = shlex.split(line)
    assert words[0] == "ckb" and "--handler" in words
    return words[1:]


@pytest.mark.parametrize("name", ["path_metadata", "redact_emails"])
def test_the_readmes_transform_command_runs_the_examples_handler(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL", raising=False)  # the command's own stand-in
    for name_set_by_the_command in ("CONTEXT_STRATEGY", "CHUNKING"):  # as in a fresh shell, restored after
        monkeypatch.delenv(name_set_by_the_command, raising=False)
    result = runner.invoke(app, readme_command(name, "ckb transform"))
    assert result.exit_code == 0, result.output + result.stderr
    out = " ".join(result.stdout.split())
    assert f"handler: yours, examples/{name}/handler.py:handler" in out
    if name == "path_metadata":  # the example's keys: ours would set none of them
        assert 'chunk 1: metadata set: folder="docs" top_folder="docs" file_name="payments-runbook.md"' in out
    else:
        assert "chunk 1: metadata set: ckb_context=" in out  # the stand-in's context for Claude's
        assert "chunk 2: metadata set:" in out and "text: This chunk is from Payments Service Runbook" in out
    shown = result.stdout[result.stdout.index("s3://") :].split("model calls:")[0]  # the handler's chunks
    assert all(len(line) <= 80 for line in shown.splitlines()), shown


def ckb_path() -> str:
    found = shutil.which("ckb", path=str(Path(sys.executable).parent))
    assert found is not None
    return found


def start_local(args: list[str]) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """``ckb local ARGS`` in a child (its own Bedrock stand-in); the environment that points at it."""
    own = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_BEDROCK_BASE_URL"}
    child = subprocess.Popen(
        [ckb_path(), *args, "--until-stdin-closes"],
        cwd=ROOT,
        env=own,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    variables: dict[str, str] = {}
    while "CKB_STACK" not in variables:
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else "no output"
        if line.startswith("export "):
            key, value = line.removeprefix("export ").strip().split("=", 1)
            variables[key] = value
    return child, {**os.environ, **variables}


def ckb(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [ckb_path(), *args], env=env, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("name", ["path_metadata", "redact_emails"])
def test_ckb_local_with_the_readmes_handler_ingests_through_it(name: str, tmp_path: Path) -> None:
    from contextual_kb.local.s3server import stop_child

    docs = tmp_path / "docs"
    (docs / "team-a" / "guides").mkdir(parents=True)
    (docs / "team-a" / "guides" / "setup.md").write_text(
        "---\ntitle: First day\nauthor: Ana\n---\n# Setup\n\nYour laptop arrives on the first day; "
        "write to ops@example.com if it does not."
    )
    child, env = start_local(readme_command(name, "ckb local"))
    try:
        ckb(env, "upload", str(docs))
        ckb(env, "sync")
        (top,) = json.loads(ckb(env, "query", "first day laptop", "--k", "1", "--json"))
    finally:
        stop_child(child)
    if name == "path_metadata":
        assert top["metadata"]["top_folder"] == "team-a" and top["metadata"]["title"] == "First day", top
    else:
        assert "[email]" in top["text"] and "ops@example.com" not in json.dumps(top), top


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mine.py"
    path.write_text(text)
    return str(path)


SDK = "from contextual_kb.runtime.sdk import Chunk, Document, transformation\n"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (lambda t: str(t / "missing.py"), "no such file"),
        (str, "a folder, not a Python file"),
        (lambda t: write(t, "x = 1\n").replace(".py", ".py:nope"), "no function 'nope' in it"),
        (
            lambda t: write(t, "def step(d):\n    return d\n"),
            "no function 'handler' in it (its functions: step",
        ),
        (lambda t: write(t, "handler = 3\n"), "'handler' is a int, not a function"),
        (lambda t: write(t, "def handler(document):\n    return []\n"), "takes 1 argument(s)"),
        (lambda t: write(t, "import not_a_module_here\n"), "raised ModuleNotFoundError at line 1"),
        (lambda t: write(t, "def handler(:\n"), "importing it raised SyntaxError at line 1"),
    ],
    ids=["missing", "folder", "named-absent", "no-handler", "not-callable", "not-lambda", "import", "syntax"],
)
def test_a_wrong_handler_file_is_one_line(given, expected: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = given(tmp_path)
    for command in (["transform", str(EVENT)], ["local"]):
        result = runner.invoke(app, [*command, "--handler", spec, "--strategy", "structural"])
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: --handler: ") and expected in line, line
        assert "Traceback" not in result.output


def test_a_handler_that_raises_is_one_line_and_its_traceback_only_with_debug(tmp_path: Path) -> None:
    spec = write(
        tmp_path,
        SDK + "@transformation\ndef handler(document: Document) -> list[Chunk]:\n"
        "    raise KeyError('owner')\n",
    )
    args = ["transform", str(EVENT), "--handler", spec, "--strategy", "structural"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: your handler {spec}:handler failed: ") and "KeyError" in line, line
    assert "--debug shows its traceback" in line
    debug = runner.invoke(app, ["--debug", *args])
    assert debug.exit_code == 1 and "Traceback" in debug.stderr and "raise KeyError('owner')" in debug.stderr


def test_a_plain_function_that_breaks_the_contract_is_one_line(tmp_path: Path) -> None:
    spec = write(tmp_path, "def handler(event, context):\n    return {'files': []}\n")
    args = ["transform", str(EVENT), "--handler", spec, "--strategy", "structural"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "not the contract's response" in line and line.startswith("error: your handler "), line


def test_what_a_handler_file_prints_on_import_stays_out_of_the_json(tmp_path: Path) -> None:
    spec = write(
        tmp_path,
        SDK
        + "print('loading my handler')\n@transformation\ndef handler(document: Document) -> list[Chunk]:\n"
        "    return list(document.chunks)\n",
    )
    args = ["transform", str(EVENT), "--handler", spec, "--strategy", "structural", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["outputFiles"]) == 1 and "loading my handler" in result.stderr
