"""A missing extra is one line naming the extra and the pip line that adds it, exit 2, for every command and
option docs/CLI.md says needs one (cli/extras.py), and that table is the code's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contextual_kb.cli import extras

ROOT = Path(__file__).resolve().parents[2]

# For each row of the table: an invocation that reaches the check (the options the row names, set up so the
# command would otherwise go on).
INVOCATIONS = {
    "ckb": ["--version"],
    "ckb transform": ["transform", str(ROOT / "events" / "markdown" / "event.json")],
    "ckb demo": ["demo", "--no-eval"],
    "ckb demo --eval": ["demo"],
    "ckb local": ["local"],
    "ckb local --dense": ["local", "--dense"],
    "ckb eval": ["eval", "--stack", "Nope"],
    "ckb eval --local": ["eval", "--local"],
    "ckb eval --retrieval dense": ["eval", "--local", "--retrieval", "bm25,dense"],
    "ckb eval --retrieval hybrid": ["eval", "--local", "--retrieval", "hybrid"],
    "ckb contextualize --local": ["contextualize", "--local"],
    "ckb mcp": ["mcp"],
}


def documented() -> list[tuple[str, tuple[str, ...]]]:
    """(command, extras) of each row of docs/CLI.md's table."""
    text = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    section = text.split("## Which command needs which extra", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`ckb"):
            rows.append((cells[0].strip("`"), tuple(e.strip() for e in cells[1].split(","))))
    return rows


def test_the_table_in_cli_md_is_the_codes() -> None:
    assert documented() == [(need.shown, need.extras) for need in extras.NEEDS]


def test_every_row_has_an_invocation() -> None:
    assert set(INVOCATIONS) == {need.shown for need in extras.NEEDS}


def _run(args: list[str], blocked: tuple[str, ...], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``ckb ARGS`` through the console script's entry with ``blocked`` modules made unimportable (Python's
    own ``sys.modules[name] = None``), in a fresh interpreter, offline."""
    code = (
        "import sys\n"
        f"for name in {list(blocked)!r}: sys.modules[name] = None\n"
        f"sys.argv = ['ckb', *{args!r}]\n"
        "from contextual_kb.cli.entry import main\n"
        "main()\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AWS_REGION": "us-east-1", "NO_COLOR": "1"}
    env |= {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize("need", extras.NEEDS, ids=lambda n: n.shown)
def test_each_missing_extra_is_one_line(need: extras.Need, tmp_path: Path) -> None:
    extra = need.extras[-1]
    others = {m for name, modules in extras.MODULES.items() if name != extra for m in modules}
    blocked = tuple(m for m in extras.MODULES[extra] if m not in others)[:1]  # this extra's alone
    done = _run(INVOCATIONS[need.shown], blocked, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {need.shown} needs the {extra} extra ({blocked[0]}"), lines[0]
    assert " not installed): install it with pip install " in lines[0]
    assert re.search(r"install it with pip install (-e )?'.*\[cli,.*\]'$", lines[0]) or need.shown == "ckb"
    assert "Traceback" not in done.stderr


def test_ckb_without_typer_is_one_line(tmp_path: Path) -> None:
    done = _run(["query", "x"], ("typer",), tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "ckb needs the cli extra (typer not installed): install it with pip install" in done.stderr


def test_a_module_the_table_missed_is_the_same_line() -> None:
    """A module of an extra imported where no row of the table foresaw it still ends in the extra's line."""
    from contextual_kb.cli.errors import CkbGroup, explain

    CkbGroup.invoked = ("query", {})
    error = explain(ModuleNotFoundError("No module named 'mcp'", name="mcp"))
    assert error is not None
    assert error.code == 2
    assert error.line().startswith("ckb query needs the mcp extra (mcp not installed): install it with pip")
    assert "[cli,mcp]" in error.line()
    assert explain(ModuleNotFoundError("No module named 'nope'", name="nope")) is None  # a bug: traceback


class _Dist:
    def __init__(self, direct: dict | None) -> None:
        self.direct = direct

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct is None else json.dumps(self.direct)


@pytest.mark.parametrize(
    ("direct", "expected"),
    [
        (
            {"url": "file:///home/me/contextual-kb", "dir_info": {"editable": True}},
            "pip install -e '/home/me/contextual-kb[cli,local]'",
        ),
        ({"url": "file:///home/me/ckb", "dir_info": {}}, "pip install '/home/me/ckb[cli,local]'"),
        (
            {"url": "file:///tmp/w/contextual_kb-0.2.0-py3-none-any.whl", "archive_info": {}},
            "pip install '/tmp/w/contextual_kb-0.2.0-py3-none-any.whl[cli,local]'",
        ),
        (
            {"url": "https://github.com/o/r.git", "vcs_info": {"vcs": "git", "commit_id": "abc"}},
            "pip install 'contextual-kb[cli,local] @ git+https://github.com/o/r.git@abc'",
        ),
        (None, "pip install 'contextual-kb[cli,local]'"),
        ({"url": "file:///a%20b/ckb", "dir_info": {}}, "pip install '/a b/ckb[cli,local]'"),
        (
            {"url": "file:///home/o%27brien/ckb", "dir_info": {}},
            "pip install '/home/o'\"'\"'brien/ckb[cli,local]'",
        ),
    ],
)
def test_the_install_line_follows_the_install(direct: dict | None, expected: str) -> None:
    assert extras.install_command(["cli", "local"], distribution=_Dist(direct)) == expected


def test_no_credentials_says_what_the_offline_commands_need(monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.exceptions import NoCredentialsError

    from contextual_kb.cli.errors import explain

    monkeypatch.setitem(sys.modules, "moto", None)
    error = explain(NoCredentialsError())
    assert error is not None
    assert "ckb demo" in error.line()
    assert "[cli,local,eval]" in error.line()
    monkeypatch.delitem(sys.modules, "moto")
    assert "[cli" not in (explain(NoCredentialsError()) or error).line() or extras.missing(["local", "eval"])
