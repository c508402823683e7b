"""``pip install`` of the built wheel gives a ``ckb`` that works against a deployed stack, without this
repository. The deployed stack is the one we can have offline: ``ckb local`` (a Knowledge Base speaking the
AWS APIs over HTTP on 127.0.0.1, the stack's outputs in a local CloudFormation, ingestion running the real
handler), itself run from a fresh venv holding the wheel with the extras docs/CLI.md names for it
(``cli,local``). The client is the wheel's ``ckb`` from another fresh venv with the ``cli`` extra alone (what
a user querying a deployed stack installs), run in a temporary folder, reaching the stack through the
variables ``ckb local`` printed and nothing else: upload, sync, query, ask, doctor, each checked on what it
prints. Nothing of the checkout is importable in either process (tests/packaging/wheel.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextual_kb.local.s3server import stop_child
from tests.conftest import EVENTS
from tests.packaging.wheel import environment, install, installed_package, run_outside

pytestmark = pytest.mark.long

SOURCE = "s3://contextual-kb-local-source/docs"


def _clean_environment(venv: Path) -> dict[str, str]:
    """The venv's environment with no AWS, model or ckb setting of the test run's: a user's shell, with any
    AWS profile file out of reach."""
    env = {
        k: v
        for k, v in environment(venv).items()
        if not k.startswith(("AWS_", "CONTEXT_", "ANTHROPIC_", "CKB_", "POWERTOOLS_"))
    }
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    return env


@pytest.fixture(scope="module")
def client(wheel_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install "contextual-kb[cli]"``: the venv of a user who queries a deployed stack."""
    return install(wheel_dist, tmp_path_factory.mktemp("venv-cli"), "cli")


@pytest.fixture(scope="module")
def deployed(wheel_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``ckb local`` from ``pip install "contextual-kb[cli,local]"``, until the module ends; the variables
    it printed."""
    venv = install(wheel_dist, tmp_path_factory.mktemp("venv-local"), "cli,local")
    where = tmp_path_factory.mktemp("local-stack")
    child = subprocess.Popen(
        [str(venv / "bin" / "ckb"), "local", "--strategy", "claude", "--until-stdin-closes"],
        cwd=where,
        env=_clean_environment(venv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        variables: dict[str, str] = {}
        while "CKB_STACK" not in variables:
            line = child.stdout.readline()
            assert line, f"ckb local ended: {child.stderr.read()[-3000:]}"
            name, value = line.removeprefix("export ").strip().split("=", 1)
            variables[name] = value
        yield variables
    finally:
        stop_child(child)


def ckb(client: Path, deployed: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_outside(
        client, "ckb", *args, cwd=cwd, env={**_clean_environment(client), **deployed}, timeout=180
    )
    assert done.returncode == 0, f"ckb {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


def test_the_client_has_the_cli_extra_alone(client: Path, tmp_path: Path) -> None:
    """What the client runs is the wheel's (under its venv), and it holds no local stack's parts."""
    installed_package(client, tmp_path)
    for module in ("moto", "bm25s", "aws_cdk"):
        found = run_outside(client, "python", "-c", f"import {module}", cwd=tmp_path)
        assert found.returncode != 0, f"{module} is in the cli-only venv"


def test_the_wheels_ckb_uploads_syncs_queries_asks_and_checks_a_deployed_stack(
    client: Path, deployed: dict[str, str], tmp_path: Path
) -> None:
    documents = tmp_path / "docs"
    shutil.copytree(EVENTS / "documents", documents)  # the user's files, in their own folder
    # A Knowledge Base refuses .py (its supported formats): code goes up as text.
    (documents / "token_bucket.py").rename(documents / "token_bucket.py.txt")

    uploaded = ckb(client, deployed, tmp_path, "upload", "docs", "--prefix", "docs/")
    assert "uploaded 3 file(s)" in uploaded.stdout, uploaded.stdout

    synced = ckb(client, deployed, tmp_path, "sync", "--interval", "0.1")
    assert "started ingestion job" in synced.stdout and "COMPLETE" in synced.stdout, synced.stdout

    found = ckb(client, deployed, tmp_path, "query", "how does the token bucket refill", "--k", "3", "--json")
    results = json.loads(found.stdout)
    assert len(results) == 3 and results[0]["source"] == f"{SOURCE}/token_bucket.py.txt", results
    top = results[0]
    # The context the deployed handler wrote (the stand-in model's) and the original chunk, apart.
    assert top["context"].startswith("This chunk is from") and top["context"] not in top["text"]
    assert top["text"] in (documents / "token_bucket.py.txt").read_text()
    assert top["rerank_score"] is not None

    table = ckb(client, deployed, tmp_path, "query", "service availability each calendar month", "--k", "2")
    assert "context" in table.stdout and "chunk" in table.stdout and "Services" in table.stdout

    asked = ckb(client, deployed, tmp_path, "ask", "how does the token bucket refill?", "--k", "3")
    answer = asked.stdout.split("\n\n")[0]
    assert "[1]" in answer, asked.stdout  # the answer cites its source, and the source is listed
    assert f"[1] {SOURCE}/token_bucket.py.txt" in asked.stdout, asked.stdout

    checked = ckb(client, deployed, tmp_path, "doctor", "--json")
    checks = {c["name"]: c["status"] for c in json.loads(checked.stdout)}
    for name in ("transformation", "function settings", "model", "embedding model", "reranker",
                 "intermediate bucket"):  # fmt: skip
        assert checks[name] == "ok", checks
    assert checks["quotas"] == "warn"  # no quota is made up locally: said, not passed
