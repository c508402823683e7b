"""``ckb mcp`` end to end: the official ``mcp`` SDK's client starts the server over stdio (a child process)
and calls its tools against the local Knowledge Base (local/stack.py) of a synced corpus, over HTTP."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.local import stack as local
from contextual_kb.local.environment import environment
from contextual_kb.query.ingestion import Ingestion
from tests.conftest import EVENTS

TOOLS = {"list_knowledge_bases", "describe_knowledge_base", "query", "ask", "doctor"}
TAG = "mcp-multirag-kb"
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "list": ("list_knowledge_bases", {}),
    "describe": ("describe_knowledge_base", {}),
    "query": ("query", {"query": "how does the token bucket refill", "k": 3}),
    "filtered": (
        "query",
        {"query": "incident", "metadata_filter": {"equals": {"key": "team", "value": "payments"}}},
    ),
    "other_source": ("query", {"query": "token bucket", "data_source_ids": ["NOSUCHDS01"]}),
    "ask": ("ask", {"question": "how does the token bucket refill?", "k": 3}),
    "doctor": ("doctor", {}),
}


@pytest.fixture(scope="module")
def stack() -> Iterator[local.LocalStack]:
    with (
        environment(CONTEXT_STRATEGY="claude", POWERTOOLS_METRICS_DISABLED="true"),
        local.local_stack(analyzer=ANALYZERS["index"], max_tokens=120, tags={TAG: "true"}) as running,
    ):
        s3 = boto3.client("s3")
        for path in sorted((EVENTS / "documents").iterdir()):
            # A Knowledge Base refuses .py (its supported formats): code goes up as text.
            name = path.name if path.suffix != ".py" else f"{path.name}.txt"
            s3.put_object(Bucket=local.SOURCE_BUCKET, Key=f"docs/{name}", Body=path.read_bytes())
        s3.put_object(
            Bucket=local.SOURCE_BUCKET,
            Key="docs/payments-runbook.md.metadata.json",
            Body=json.dumps({"metadataAttributes": {"team": "payments"}}).encode(),
        )
        ingestion = Ingestion(local.KNOWLEDGE_BASE_ID, local.DATA_SOURCE_ID, local.REGION)
        job = list(ingestion.follow(ingestion.start(), interval=0.05))[-1]
        assert job.status == "COMPLETE" and job.statistics["numberOfNewDocumentsIndexed"] == 3
        yield running


def server(stack: local.LocalStack, *args: str, **env: str) -> StdioServerParameters:
    ckb = shutil.which("ckb", path=str(Path(sys.executable).parent))
    assert ckb is not None
    # Only what an MCP client's configuration would give it: the stack's variables, no test setup.
    variables = {**stack.environment(), "POWERTOOLS_LOG_LEVEL": "WARNING", **env}
    return StdioServerParameters(command=ckb, args=["mcp", *args], env=variables)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_an_mcp_client_lists_and_calls_every_tool(stack: local.LocalStack) -> None:
    async def session() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        started = time.perf_counter()
        async with Client(server(stack)) as client:
            seen["ready"] = time.perf_counter() - started
            seen["tools"] = {t.name: t for t in (await client.list_tools()).tools}
            for name, (tool, arguments) in CALLS.items():
                seen[name] = await client.call_tool(tool, arguments)
        return seen

    seen = run(session())
    assert set(seen["tools"]) == TOOLS
    assert "context" in seen["tools"]["query"].description and "ask" in seen["tools"]["query"].description
    for name in ("list", "describe", "query", "filtered", "other_source", "ask", "doctor"):
        assert not seen[name].is_error, (name, text_of(seen[name]))
        assert "127.0.0.1" not in text_of(seen[name]) and local.ACCOUNT not in text_of(seen[name])

    listed = seen["list"].structured_content
    assert listed["stacks"][0]["stack"] == local.STACK
    (kb,) = listed["knowledge_bases"]
    assert kb["knowledge_base_id"] == local.KNOWLEDGE_BASE_ID and kb["stack"] == local.STACK
    assert kb["data_sources"] == [{"data_source_id": local.DATA_SOURCE_ID, "name": "local-data-source"}]

    described = seen["describe"].structured_content
    assert (
        described["search"].startswith("hybrid") and described["data_sources"][0]["contextual_transformation"]
    )

    results = seen["query"].structured_content["results"]
    assert len(results) == 3 and results[0]["source"].endswith("docs/token_bucket.py.txt")
    assert results[0]["context"] and results[0]["context"] not in results[0]["text"]
    assert results[0]["rerank_score"] is not None and results[0]["retrieval_score"] > 0

    filtered = seen["filtered"].structured_content["results"]
    assert filtered and {r["source"] for r in filtered} == {
        f"s3://{local.SOURCE_BUCKET}/docs/payments-runbook.md"
    }
    assert seen["other_source"].structured_content["results"] == []

    asked = seen["ask"].structured_content
    assert "[1]" in asked["answer"] and asked["sources"][0]["n"] == 1
    assert seen["doctor"].structured_content["passed"] is True


def test_every_failure_is_a_tool_error_in_one_line_and_the_server_goes_on(stack: local.LocalStack) -> None:
    async def session() -> list[Any]:
        async with Client(server(stack)) as client:
            return [
                await client.call_tool("query", {"query": "x", "knowledge_base_id": "NOSUCHKB01"}),
                await client.call_tool("query", {"query": "x", "k": 0}),
                await client.call_tool(
                    "query", {"query": "x", "metadata_filter": {"in": {"key": "a", "value": 1}}}
                ),
                await client.call_tool("query", {"query": "x", "stack": "NoSuchStack"}),
                await client.call_tool("query", {"query": "x", "reranker": "nope"}),
                await client.call_tool("query", {"query": "token bucket", "k": 1}),  # still serving
            ]

    *failed, fine = run(session())
    assert all(r.is_error for r in failed) and not fine.is_error
    # The SDK names the tool in front; the rest is the line ckb prints for the same failure.
    prefix = "Error executing tool query: "
    assert all(text_of(r).startswith(prefix) for r in failed)
    lines = [text_of(r).removeprefix(prefix) for r in failed]
    assert lines[0] == (  # its type is looked up first (each type takes its own retrievalConfiguration)
        "GetKnowledgeBase failed: ResourceNotFoundException: Knowledge base NOSUCHKB01 does not exist. Check "
        "the id and the region"
    )
    assert lines[1] == "k must be between 1 and 100"
    assert lines[2].startswith("Retrieve failed: ValidationException: in takes a list of values")
    assert lines[3].startswith("stack NoSuchStack in us-east-1:")
    assert lines[4] == "reranker: 'nope' is not one of cohere.rerank-v3-5:0, amazon.rerank-v1:0"
    assert all("\n" not in line and "127.0.0.1" not in line for line in lines)
    for arguments, line in (
        (["--stack", "NoSuchStack"], lines[3]),
        (["--k", "1", "--filter", '{"in": {"key": "a", "value": 1}}'], lines[2]),
    ):
        cli = CliRunner().invoke(app, ["query", "x", *arguments])
        assert cli.stderr.strip() == f"error: {line}"  # the same line as ckb's


def test_tag_discovery_lists_only_the_knowledge_bases_tagged(stack: local.LocalStack) -> None:
    async def listed(key: str) -> list[str]:
        async with Client(server(stack, "--tag-key", key)) as client:
            found = (await client.call_tool("list_knowledge_bases", {})).structured_content
            return [kb["knowledge_base_id"] for kb in found["knowledge_bases"]]

    assert run(listed(TAG)) == [local.KNOWLEDGE_BASE_ID]
    assert run(listed("another-key")) == []


def test_streamable_http_binds_loopback_and_serves_the_same_tools(stack: local.LocalStack) -> None:
    import os
    import subprocess

    from contextual_kb.local.s3server import free_port, stop_child
    from tests.integration.test_security import _refused_from_outside

    port = free_port()
    ckb = shutil.which("ckb", path=str(Path(sys.executable).parent))
    assert ckb is not None
    child = subprocess.Popen(
        [ckb, "mcp", "--transport", "streamable-http", "--port", str(port)],
        env={**os.environ, **stack.environment()},
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    async def tools() -> set[str]:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            return {t.name for t in (await client.list_tools()).tools}

    try:
        deadline = time.monotonic() + 60
        while True:  # bounded: the server has a minute to listen
            try:
                found = run(tools())
                break
            except Exception:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise
                time.sleep(0.2)
        assert found == TOOLS
        _refused_from_outside(port)  # bound to 127.0.0.1: the host's other address is refused
        _refused_from_outside(stack.knowledge_base._server.address[1])  # type: ignore[union-attr]
    finally:
        stop_child(child)


def test_ask_logs_no_endpoint_and_nothing_below_warning(stack: local.LocalStack, tmp_path: Path) -> None:
    """MCP.md: the server logs at WARNING on stderr, and no endpoint. The model SDK's INFO lines name the
    model endpoint's URL (``HTTP Request: POST http://127.0.0.1:.../model/.../invoke``)."""
    from mcp.client.stdio import stdio_client

    stderr = tmp_path / "stderr.log"

    async def session() -> Any:
        with stderr.open("w") as errlog:
            async with Client(stdio_client(server(stack), errlog=errlog)) as client:
                return await client.call_tool(
                    "ask", {"question": "how does the token bucket refill?", "k": 2}
                )

    asked = run(session())
    assert not asked.is_error, text_of(asked)
    logged = stderr.read_text()
    assert "HTTP Request" not in logged and "127.0.0.1" not in logged and "/invoke" not in logged, logged
    assert not [line for line in logged.splitlines() if line.lstrip().startswith(("INFO", "DEBUG"))], logged


DENIED = (
    '<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>Sender</Type>'
    "<Code>AccessDenied</Code><Message>User: arn:aws:sts::123456789012:assumed-role/kb-reader/agent is not "
    "authorized to perform: cloudformation:DescribeStacks because no identity-based policy allows the "
    "cloudformation:DescribeStacks action</Message></Error><RequestId>1</RequestId></ErrorResponse>"
)


@contextmanager
def cloudformation_denied() -> Iterator[str]:
    """A CloudFormation endpoint that refuses every call as IAM does for a role without its permissions."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Deny(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = DENIED.encode()
            self.send_response(403)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    denier = ThreadingHTTPServer(("127.0.0.1", 0), Deny)
    thread = threading.Thread(target=denier.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{denier.server_address[1]}"
    finally:
        denier.shutdown()
        denier.server_close()


def test_listing_needs_no_cloudformation(stack: local.LocalStack) -> None:
    """A least-privilege reader without cloudformation:DescribeStacks still lists the Knowledge Bases (and
    queries one by id); the stacks are said not looked up, in one line."""

    async def session(url: str) -> tuple[Any, Any]:
        async with Client(server(stack, AWS_ENDPOINT_URL_CLOUDFORMATION=url)) as client:
            return (
                await client.call_tool("list_knowledge_bases", {}),
                await client.call_tool(
                    "query", {"query": "token bucket", "k": 1, "knowledge_base_id": local.KNOWLEDGE_BASE_ID}
                ),
            )

    with cloudformation_denied() as url:
        listed, queried = run(session(url))
    assert not listed.is_error and not queried.is_error, (text_of(listed), text_of(queried))
    found = listed.structured_content
    assert found["stacks"] == []
    (kb,) = found["knowledge_bases"]
    assert kb["knowledge_base_id"] == local.KNOWLEDGE_BASE_ID and kb["stack"] is None
    (notice,) = found["notices"]
    assert notice.startswith("stacks not looked up (CloudFormation DescribeStacks failed: AccessDenied: ")
    assert "\n" not in notice and "123456789012" not in notice and "127.0.0.1" not in notice
    assert queried.structured_content["results"]
