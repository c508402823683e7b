"""Offline means offline: `ckb transform`, `ckb demo`, `ckb eval --local` and `ckb contextualize --local`
read nothing of the user's AWS setup. Run as users run them (the installed `ckb`, in a child process) with a
foreign region in the environment and in ~/.aws/config, a profile that does not exist, and fake
credentials: each still works (a foreign region made local S3 refuse its bucket, a missing profile stopped
every command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CKB = str(Path(sys.executable).parent / "ckb")


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "config").write_text(
        "[default]\nregion = eu-west-1\n[profile other]\nregion = ap-south-1\n"
    )
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ANTHROPIC_", "CONTEXT_"))}
    return {
        **keep,
        "HOME": str(home),
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_PROFILE": "nope",
        "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKEFAKE",
        "AWS_SECRET_ACCESS_KEY": "fake",
    }


def ckb(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CKB, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_transform_ignores_the_users_aws_setup(hostile: dict[str, str]) -> None:
    ran = ckb(["transform", "events/markdown/event.json", "--json"], hostile)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout)["outputFiles"]


def test_demo_ignores_the_users_aws_setup(hostile: dict[str, str]) -> None:
    ran = ckb(["demo", "--no-eval", "--show", "0"], hostile)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_eval_local_ignores_the_users_aws_setup(hostile: dict[str, str], tmp_path: Path) -> None:
    corpus = [
        {
            "doc_id": "d1",
            "original_uuid": "u1",
            "content": "def refill(self): return tokens\n\ndef acquire(self): return True\n",
            "chunks": [
                {"chunk_id": "u1_0", "original_index": 0, "content": "def refill(self): return tokens"},
                {"chunk_id": "u1_1", "original_index": 1, "content": "def acquire(self): return True"},
            ],
        }
    ]
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"query": "how are tokens refilled", "golden_chunk_uuids": [["u1", 0]]}) + "\n"
    )
    ran = ckb(
        ["eval", "--local", "--strategies", "none,structural", "--k", "1,2",
         "--corpus", str(tmp_path / "corpus.json"), "--queries", str(tmp_path / "queries.jsonl"), "--json"],
        hostile,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert {row["chunks"] for row in json.loads(ran.stdout)} == {"raw", "structural"}


def test_contextualize_local_ignores_the_users_aws_setup(hostile: dict[str, str], tmp_path: Path) -> None:
    corpus = [
        {
            "doc_id": f"d{n}",
            "original_uuid": f"u{n}",
            "content": f"Section {n}.\n\nThe first part of document {n}.\n\nThe second part of document {n}.",
            "chunks": [
                {"chunk_id": f"u{n}_0", "original_index": 0, "content": f"The first part of document {n}."},
                {"chunk_id": f"u{n}_1", "original_index": 1, "content": f"The second part of document {n}."},
            ],
        }
        for n in range(3)
    ]
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    ran = ckb(["contextualize", "--local", "--corpus", str(tmp_path / "corpus.json"), "--json"], hostile)
    assert ran.returncode == 0, ran.stderr[-2000:]
