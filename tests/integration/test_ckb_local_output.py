"""`ckb local` as a user runs it: its standard output holds the export lines alone through a sync (no
metrics line among them), and paid-work estimates against it say the work is free (its stand-ins say what
they are: local/identity.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contextual_kb.local.identity import standin_at
from contextual_kb.local.s3server import stop_child


def test_ckb_local_stdout_is_its_exports_and_its_paid_work_is_free(tmp_path: Path) -> None:
    ckb = shutil.which("ckb", path=str(Path(sys.executable).parent))
    assert ckb is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ANTHROPIC_", "POWERTOOLS_"))}
    child = subprocess.Popen(
        [ckb, "local", "--strategy", "structural", "--until-stdin-closes"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert child.stdout is not None
        variables: dict[str, str] = {}
        while "CKB_STACK" not in variables:
            line = child.stdout.readline()
            assert line.startswith("export "), line
            name, value = line.removeprefix("export ").strip().split("=", 1)
            variables[name] = value
        assert standin_at(variables["AWS_ENDPOINT_URL_BEDROCK_AGENT"]) == "knowledge-base"
        assert standin_at(variables["ANTHROPIC_BEDROCK_BASE_URL"]) == "bedrock-runtime"
        documents = tmp_path / "docs"
        documents.mkdir()
        (documents / "a.md").write_text("# Limits\n\nThe token bucket refills at ten tokens a second.")
        user = {**env, **variables}
        for command in (["upload", str(documents)], ["sync", "--interval", "0.1"]):
            done = subprocess.run(
                [ckb, *command], check=False, env=user, capture_output=True, text=True, timeout=180
            )
            assert done.returncode == 0, done.stdout + done.stderr
        # Paid work against the local stack: free, said so, and nothing to confirm (no --yes, no terminal).
        done = subprocess.run(
            [ckb, "sync", "--reprocess", "--interval", "0.1"],
            check=False,
            env=user,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "free: ingesting 1 document(s) again" in done.stderr
        assert "(ckb local), which charge nothing" in done.stderr
        assert "paid:" not in done.stderr
    finally:
        stop_child(child)
    rest = child.stdout.read()
    assert rest == "", rest  # was the handler's ColdStart metric, as a JSON line


def test_one_endpoint_left_to_aws_makes_the_work_paid(monkeypatch: pytest.MonkeyPatch) -> None:
    """ANTHROPIC_BEDROCK_BASE_URL at a stand-in says nothing of where a stack's batch jobs go; and a local
    Knowledge Base with Bedrock's own endpoint left to AWS is paid work."""
    from contextual_kb.cli.paid import STANDIN_ENDPOINTS, local_standin
    from contextual_kb.local.bedrock_standin import running_standin

    with running_standin() as model:
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", model.url)
        for name in STANDIN_ENDPOINTS:
            monkeypatch.delenv(name, raising=False)
        assert local_standin() is None
        for name in STANDIN_ENDPOINTS:
            monkeypatch.setenv(name, model.url)
        assert local_standin() == model.url
        monkeypatch.delenv("AWS_ENDPOINT_URL_BEDROCK")  # batch inference: AWS's
        assert local_standin() is None


def test_a_url_that_is_not_loopback_is_never_asked() -> None:
    assert standin_at("https://bedrock-agent.us-east-1.amazonaws.com") is None
    assert standin_at("http://127.0.0.1:9") is None  # nothing listens: no stand-in
