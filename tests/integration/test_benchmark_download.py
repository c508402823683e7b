"""Fetching the codebase benchmark once (evaluation/datasets.py), against a local HTTP server serving a
fixture in its place: a whole, verified copy in the cache, or one line and nothing half-written."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextual_kb.evaluation import datasets
from contextual_kb.evaluation.datasets import CORPUS, DEV_QUERIES, QUERIES, DatasetUnavailableError, Published
from tests.support import corpus


def fixture_files() -> dict[str, bytes]:
    """A small corpus and five labelled queries in the benchmark's formats."""
    documents = corpus(documents=3, chunks=4)
    queries = [
        {"query": f"when is the valve {d}-{i}-0 inspected", "golden_chunk_uuids": [[f"u{d}", i]]}
        for d, i in [(0, 1), (1, 2), (2, 3), (0, 0), (1, 1)]
    ]
    return {
        CORPUS: json.dumps(documents).encode(),
        QUERIES: b"".join(json.dumps(q).encode() + b"\n" for q in queries),
    }


@dataclass
class Server:
    """Serves ``bodies`` at /data/<name>; ``declared`` overrides a Content-Length (a cut connection)."""

    bodies: dict[str, bytes]
    status: dict[str, int] = field(default_factory=dict)
    declared: dict[str, int] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Server]:
    files = fixture_files()
    served = Server(dict(files))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.rsplit("/", 1)[-1]
            served.requests.append(name)
            body = served.bodies.get(name)
            status = served.status.get(name, 200 if body is not None else 404)
            self.send_response(status)
            length = served.declared.get(name, len(body or b"")) if status == 200 else 0
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if status == 200 and body:
                self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{httpd.server_address[1]}/data"
    # The fixture's files stand for the published ones: their sizes and hashes.
    published = tuple(Published(n, len(b), hashlib.sha256(b).hexdigest()) for n, b in files.items())
    monkeypatch.setattr(datasets, "FILES", published)
    monkeypatch.setattr(datasets, "TIMEOUT_S", 5.0)
    monkeypatch.setenv("CKB_DATASET_URL", served.url)
    monkeypatch.setenv("CKB_DATA_DIR", str(tmp_path / "cache"))
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()


def cached(tmp_path: Path) -> list[str]:
    """Every file in the cache, hidden ones too (a half-written download would be one)."""
    return sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file())


def test_the_first_use_fetches_verifies_and_keeps_it(server: Server, tmp_path: Path) -> None:
    said: list[str] = []
    corpus_path, dev = datasets.ensure_codebase(said.append)
    assert cached(tmp_path) == sorted([CORPUS, QUERIES, DEV_QUERIES, "SOURCE.txt"])
    assert corpus_path.read_bytes() == server.bodies[CORPUS]
    assert corpus_path.stat().st_mode & 0o777 == 0o644  # readable as any cache file, not mkstemp's 0600
    published = server.bodies[QUERIES].splitlines(keepends=True)
    assert dev.read_bytes() == b"".join(published[0::2])  # the 1st, 3rd and 5th queries
    (line,) = said
    assert line.startswith("Fetching the codebase benchmark once (") and "MIT licence" in line
    source = (tmp_path / "cache" / "codebase" / "SOURCE.txt").read_text()
    assert "MIT licence, Copyright (c) 2023 Anthropic" in source and server.url in source
    # Once there, it is read from the cache: no request, no progress line.
    assert datasets.ensure_codebase(said.append) == (corpus_path, dev)
    assert len(server.requests) == 2 and len(said) == 1


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        ("hash", "sha256 "),
        ("short", "truncated, "),
        ("cut", "truncated, "),
        ("404", "HTTP 404"),
        ("long", "more than the published"),
    ],
)
def test_a_bad_download_is_one_line_and_leaves_nothing_half_written(
    server: Server, tmp_path: Path, spoil: str, expected: str
) -> None:
    body = server.bodies[QUERIES]
    if spoil == "hash":
        server.bodies[QUERIES] = body[:-2] + b"x\n"  # same size, other bytes
    elif spoil == "short":
        server.bodies[QUERIES] = body[:-10]  # a whole response, shorter than published
    elif spoil == "cut":
        server.bodies[QUERIES] = body[: len(body) // 2]
        server.declared[QUERIES] = len(body)  # the connection ends before the length it promised
    elif spoil == "404":
        server.status[QUERIES] = 404
    else:
        server.bodies[QUERIES] = body + b"{}\n"
    with pytest.raises(DatasetUnavailableError) as raised:
        datasets.ensure_codebase()
    message = str(raised.value)
    assert "\n" not in message and expected in message, message
    assert f"{server.url}/{QUERIES}" in message and "pass --dataset FOLDER" in message
    # The corpus came whole and verified, so it stays; nothing of the failed file is left, not even a part.
    assert cached(tmp_path) == [CORPUS]
    # The next try fetches only what is missing.
    server.bodies[QUERIES], server.status, server.declared = body, {}, {}
    datasets.ensure_codebase()
    assert server.requests.count(CORPUS) == 1 and cached(tmp_path) == sorted(
        [CORPUS, QUERIES, DEV_QUERIES, "SOURCE.txt"]
    )


def test_no_network_is_one_line(server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CKB_DATASET_URL", "http://127.0.0.1:9/closed")
    with pytest.raises(DatasetUnavailableError, match=r"^could not fetch the codebase benchmark \(http"):
        datasets.ensure_codebase()
    assert cached(tmp_path) == []


def test_a_folder_with_the_published_queries_gets_its_dev_split(tmp_path: Path) -> None:
    files = fixture_files()
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    found = datasets.locate(tmp_path)
    assert found == (tmp_path / CORPUS, tmp_path / DEV_QUERIES)
    assert found[1].read_bytes().count(b"\n") == 3


def test_the_dev_split_is_the_odd_numbered_lines() -> None:
    assert datasets.dev_split(b"a\nb\nc\nd\n") == b"a\nc\n"
    assert datasets.dev_split(b"a\r\n\nb\nc") == b"a\r\nc\n"  # blank lines are not queries


def test_ckb_eval_local_fetches_on_first_use_and_evaluates(server: Server, tmp_path: Path) -> None:
    from contextual_kb.cli.main import app

    result = CliRunner().invoke(app, ["eval", "--local", "--k", "5", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("Fetching the codebase benchmark once") == 1
    rows = json.loads(result.stdout)
    assert [row["chunks"] for row in rows] == ["raw", "raw", "structural", "structural"]  # two analyses each
    assert all(0 <= row["pass@5"] <= 100 for row in rows)
    again = CliRunner().invoke(app, ["eval", "--local", "--k", "5", "--json"])
    assert again.exit_code == 0 and "Fetching" not in again.stderr and len(server.requests) == 2


def test_the_demo_without_the_benchmark_goes_on_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from contextual_kb.cli.main import app
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("CKB_DATA_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["demo", "--strategy", "structural", "--show", "0"])
    assert result.exit_code == 0, result.output
    assert "note: could not fetch the codebase benchmark (http://127.0.0.1:9/" in result.stderr
    assert "(no codebase benchmark: skipping the retrieval table)" in result.stdout
