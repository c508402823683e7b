"""What agents read from ``ckb mcp``'s schema and get back, through the ``mcp`` SDK's client (in memory):
every tool parameter described and bounded, the schema's bounds enforced before any AWS call, ``user_id``
passed to Retrieve, and a result bounded in size with a note of what was cut (k=100 over 2 KB chunks used to
come back whole: 219,477 characters, twice)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp import Client

from contextual_kb.cli.agents import _one_line
from contextual_kb.query import aws_clients
from contextual_kb.query.mcp_server import MAX_CHARACTERS, build_server
from tests.integration.test_mcp_kb_types import REGION, Bedrock

KB = "VKB0000001"
CHUNK = "Refunds are paid within five days of the request. " * 40  # 2,000 characters


class Wide(Bedrock):
    """A VECTOR Knowledge Base answering 100 chunks of 2 KB."""

    def retrieve(self, **params: Any) -> dict[str, Any]:
        self._check("bedrock-agent-runtime", "Retrieve", params)
        count = params["retrievalConfiguration"]["vectorSearchConfiguration"]["numberOfResults"]
        return {
            "retrievalResults": [
                {
                    "content": {"type": "TEXT", "text": f"{i:03d} {CHUNK}"},
                    "location": {"type": "S3", "s3Location": {"uri": f"s3://docs/{i:03d}.md"}},
                    "score": 1 - i / 1000,
                    "metadata": {"x-amz-bedrock-kb-data-source-id": "DS00000001"},
                }
                for i in range(count)
            ]
        }


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch) -> Wide:
    fake = Wide()
    monkeypatch.setattr(aws_clients, "client", lambda service, region_name, **_: fake)
    return fake


def session(*calls: tuple[str, dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    async def run() -> tuple[list[Any], list[Any]]:
        async with Client(build_server(explain=_one_line, region=REGION)) as client:
            tools = (await client.list_tools()).tools
            return tools, [await client.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(run())


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_every_parameter_is_described_and_bounded() -> None:
    tools, _ = session()
    for tool in tools:
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert len(schema.get("description", "")) > 20, (tool.name, name)
            types = {schema.get("type")} | {kind.get("type") for kind in schema.get("anyOf", [])}
            if "integer" in types:
                assert "minimum" in schema and "maximum" in schema, (tool.name, name)
            if "string" in types:
                assert {"maxLength", "pattern", "enum"} & schema.keys(), (tool.name, name)
            if "array" in types:
                assert "maxItems" in schema and "pattern" in schema["items"], (tool.name, name)
    query = next(t for t in tools if t.name == "query").input_schema["properties"]
    assert (query["k"]["minimum"], query["k"]["maximum"]) == (1, 100)
    assert query["reranker"]["enum"] == ["cohere.rerank-v3-5:0", "amazon.rerank-v1:0"]


def test_the_schema_refuses_before_any_call(bedrock: Wide) -> None:
    calls = {
        "k must be between 1 and 100": {"k": 101},
        "candidates must be between 1 and 100": {"candidates": 0},
        "the query is empty": {"query": " "},
        "query: 20,001 characters; Retrieve takes at most 20,000": {"query": "x" * 20_001},
        "knowledge_base_id: '../../etc' is not a Knowledge Base id (10 letters or digits)": {
            "knowledge_base_id": "../../etc"
        },
        "stack: 'a b' is not a CloudFormation stack name": {"knowledge_base_id": None, "stack": "a b"},
        "reranker: 'nope' is not one of cohere.rerank-v3-5:0, amazon.rerank-v1:0": {"reranker": "nope"},
        "data_source_ids: '../x' is not a data source id": {"data_source_ids": ["../x"]},
        "user_id: 1 to 2,048 characters": {"user_id": ""},
        "max_characters must be between 1,000 and 400,000": {"max_characters": 10},
    }
    base = {"query": "refunds", "knowledge_base_id": KB}
    _, results = session(*(("query", {**base, **arguments}) for arguments in calls.values()))
    lines = [text_of(r).removeprefix("Error executing tool query: ") for r in results]
    assert all(r.is_error for r in results) and lines == list(calls)  # each in one line, ckb's words
    assert bedrock.sent == []


def test_a_result_is_bounded_and_says_what_was_cut(bedrock: Wide) -> None:
    arguments = {"query": "refunds", "knowledge_base_id": KB, "k": 100, "rerank": False}
    _, (wide, tight, one) = session(
        ("query", arguments),
        ("query", {**arguments, "max_characters": 1_000}),
        ("query", {**arguments, "k": 1, "max_characters": 400_000}),
    )
    found = wide.structured_content
    assert len(json.dumps(found["results"], ensure_ascii=False)) <= MAX_CHARACTERS
    assert 10 < len(found["results"]) < 100
    kept = len(found["results"])
    assert [r["rank"] for r in found["results"]] == list(range(1, kept + 1))  # the best, in order
    (note,) = found["notices"]
    assert note.startswith(f"{100 - kept} lower-ranked of 100 results left out (positions {kept + 1}-100")
    assert len(text_of(wide)) < 2 * MAX_CHARACTERS  # was 219,477 characters

    (first,) = tight.structured_content["results"]
    assert first["text_cut"] == len(f"000 {CHUNK}") and len(json.dumps(first)) <= 1_000
    assert "its text cut to" in tight.structured_content["notices"][0]
    assert one.structured_content["notices"] == [] and "text_cut" not in one.structured_content["results"][0]


def test_user_id_reaches_retrieve(bedrock: Wide) -> None:
    session(("query", {"query": "refunds", "knowledge_base_id": KB, "k": 1, "user_id": "alice@example.com"}))
    (retrieve,) = [p for op, p in bedrock.sent if op == "Retrieve"]
    assert retrieve["userContext"] == {"userId": "alice@example.com"}


def test_image_results_are_left_out_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    class WithImage(Wide):
        def retrieve(self, **params: Any) -> dict[str, Any]:
            found = super().retrieve(**params)
            image = {"content": {"type": "IMAGE", "byteContent": "aGk="}, "location": {}, "score": 0.9}
            return {"retrievalResults": [image, *found["retrievalResults"][:2]]}

    fake = WithImage()
    monkeypatch.setattr(aws_clients, "client", lambda service, region_name, **_: fake)
    _, (found,) = session(("query", {"query": "refunds", "knowledge_base_id": KB, "k": 3, "rerank": False}))
    results = found.structured_content["results"]
    assert len(results) == 2 and all(r["text"] for r in results)
    said = "1 non-text results left out (IMAGE): only text is read and reranked"
    assert said in found.structured_content["notices"]
