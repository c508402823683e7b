"""Knowledge Bases that are not VECTOR, through the ``mcp`` SDK's client (in memory, the server built as
``ckb mcp`` builds it): each is described by its type, listed with it, and queried the way Bedrock takes
it. Bedrock's side is a stand-in that checks every request against botocore's API model and refuses what
Bedrock refuses: a MANAGED Knowledge Base asked with ``vectorSearchConfiguration``."""

from __future__ import annotations

import asyncio
from typing import Any

import botocore.session
import pytest
from botocore.exceptions import ClientError
from botocore.validate import ParamValidator
from mcp import Client

from contextual_kb.cli.agents import _one_line
from contextual_kb.query import aws_clients
from contextual_kb.query.mcp_server import build_server

REGION = "us-east-1"
KINDS = {"MKB0000001": "MANAGED", "KKB0000001": "KENDRA", "SKB0000001": "SQL", "VKB0000001": "VECTOR"}
_SESSION = botocore.session.get_session()


class Bedrock:
    """bedrock-agent, bedrock-agent-runtime and cloudformation as far as the tools call them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def _check(self, service: str, operation: str, params: dict[str, Any]) -> None:
        shape = _SESSION.get_service_model(service).operation_model(operation).input_shape
        report = ParamValidator().validate(params, shape)
        assert not report.has_errors(), report.generate_report()
        self.sent.append((operation, params))

    # bedrock-agent
    def list_knowledge_bases(self, **params: Any) -> dict[str, Any]:
        self._check("bedrock-agent", "ListKnowledgeBases", params)
        return {
            "knowledgeBaseSummaries": [
                {"knowledgeBaseId": kb, "name": kind.lower(), "status": "ACTIVE", "updatedAt": "2026-01-01"}
                for kb, kind in KINDS.items()
            ]
        }

    def get_knowledge_base(self, **params: Any) -> dict[str, Any]:
        self._check("bedrock-agent", "GetKnowledgeBase", params)
        kb = params["knowledgeBaseId"]
        described: dict[str, Any] = {
            "knowledgeBaseId": kb,
            "knowledgeBaseArn": f"arn:aws:bedrock:{REGION}:123456789012:knowledge-base/{kb}",
            "name": KINDS[kb].lower(),
            "status": "ACTIVE",
            "knowledgeBaseConfiguration": {"type": KINDS[kb]},
        }
        if KINDS[kb] == "VECTOR":
            described["storageConfiguration"] = {"type": "OPENSEARCH_SERVERLESS"}
        return {"knowledgeBase": described}

    def list_data_sources(self, **params: Any) -> dict[str, Any]:
        self._check("bedrock-agent", "ListDataSources", params)
        return {"dataSourceSummaries": []}

    # bedrock-agent-runtime
    def retrieve(self, **params: Any) -> dict[str, Any]:
        self._check("bedrock-agent-runtime", "Retrieve", params)
        kind, config = KINDS[params["knowledgeBaseId"]], params.get("retrievalConfiguration") or {}
        if kind == "MANAGED" and "vectorSearchConfiguration" in config:
            raise ClientError(
                {
                    "Error": {
                        "Code": "ValidationException",
                        "Message": "vectorSearchConfiguration is not supported for managed knowledge bases. "
                        "Use managedSearchConfiguration instead.",
                    }
                },
                "Retrieve",
            )
        return {
            "retrievalResults": [
                {
                    "content": {"type": "TEXT", "text": f"a passage from the {kind} knowledge base"},
                    "location": {"type": "S3", "s3Location": {"uri": "s3://docs/a.md"}},
                    "score": 0.5,
                    "metadata": {},
                }
            ]
        }

    # cloudformation
    def get_paginator(self, name: str) -> Any:
        assert name == "describe_stacks"
        return type("Pages", (), {"paginate": lambda _self: iter([{"Stacks": []}])})()


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch) -> Bedrock:
    fake = Bedrock()
    monkeypatch.setattr(aws_clients, "client", lambda service, region_name, **_: fake)
    return fake


def call(*calls: tuple[str, dict[str, Any]]) -> list[Any]:
    async def session() -> list[Any]:
        async with Client(build_server(explain=_one_line, region=REGION)) as client:
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(session())


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_each_knowledge_base_is_listed_and_described_by_its_type(bedrock: Bedrock) -> None:
    listed, *described = call(
        ("list_knowledge_bases", {}),
        *(("describe_knowledge_base", {"knowledge_base_id": kb}) for kb in KINDS),
    )
    assert {
        kb["knowledge_base_id"]: kb["type"] for kb in listed.structured_content["knowledge_bases"]
    } == KINDS
    searches = {d.structured_content["type"]: d.structured_content["search"] for d in described}
    assert searches["VECTOR"] == "hybrid (vectors + BM25)"
    assert searches["MANAGED"].startswith("managed") and searches["KENDRA"].startswith("Amazon Kendra")
    assert searches["SQL"].startswith("structured data")
    assert not any("BM25" in searches[kind] for kind in ("MANAGED", "KENDRA", "SQL"))
    assert all(d.structured_content["vector_store"] is None for d in described[:3])


def test_each_knowledge_base_is_queried_the_way_bedrock_takes_it(bedrock: Bedrock) -> None:
    arguments = {"query": "refunds", "k": 2, "rerank": False, "data_source_ids": ["DS00000001"]}
    managed, kendra, sql, vector = call(*(("query", {**arguments, "knowledge_base_id": kb}) for kb in KINDS))
    assert not managed.is_error and not kendra.is_error and not vector.is_error, text_of(managed)
    assert (
        managed.structured_content["search"] == "managed" and kendra.structured_content["search"] == "kendra"
    )
    sent = {p["knowledgeBaseId"]: p["retrievalConfiguration"] for op, p in bedrock.sent if op == "Retrieve"}
    assert sent["MKB0000001"] == {
        "managedSearchConfiguration": {
            "numberOfResults": 100,  # candidates (default): retrieved wide, the top k kept
            "filter": {"in": {"key": "_data_source_id", "value": ["DS00000001"]}},
        }
    }
    assert "overrideSearchType" not in sent["KKB0000001"]["vectorSearchConfiguration"]
    assert sent["VKB0000001"]["vectorSearchConfiguration"]["overrideSearchType"] == "HYBRID"
    assert sql.is_error and "SKB0000001" not in sent
    line = text_of(sql).removeprefix("Error executing tool query: ")
    assert line.startswith("knowledge base SKB0000001 is a SQL (structured data) Knowledge Base:")
    assert "\n" not in line


class DescribeDenied(Bedrock):
    """A least-privilege role: it may list, list data sources and Retrieve, not bedrock:GetKnowledgeBase."""

    def get_knowledge_base(self, **params: Any) -> dict[str, Any]:
        self._check("bedrock-agent", "GetKnowledgeBase", params)
        raise ClientError(
            {
                "Error": {
                    "Code": "AccessDeniedException",
                    "Message": "User: arn:aws:sts::123456789012:assumed-role/reader/s is not authorized to "
                    "perform: bedrock:GetKnowledgeBase",
                }
            },
            "GetKnowledgeBase",
        )


def test_a_role_without_get_knowledge_base_still_lists_and_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing and querying by id needed no bedrock:GetKnowledgeBase before the types were looked up; a role
    without it still lists (type unknown) and queries (as VECTOR, as before), each saying so in one notice."""
    fake = DescribeDenied()
    monkeypatch.setattr(aws_clients, "client", lambda service, region_name, **_: fake)
    listed, queried = call(
        ("list_knowledge_bases", {}),
        ("query", {"query": "refunds", "k": 1, "rerank": False, "knowledge_base_id": "VKB0000001"}),
    )
    assert not listed.is_error and not queried.is_error, (text_of(listed), text_of(queried))
    assert {kb["type"] for kb in listed.structured_content["knowledge_bases"]} == {None}
    (notice,) = [n for n in listed.structured_content["notices"] if "GetKnowledgeBase" in n]
    assert notice.startswith("types not looked up (GetKnowledgeBase failed: AccessDeniedException")
    assert "123456789012" not in notice
    assert queried.structured_content["results"]
    (said,) = [n for n in queried.structured_content["notices"] if "GetKnowledgeBase" in n]
    assert said.startswith("type not looked up (GetKnowledgeBase failed: AccessDeniedException")
    config = next(p["retrievalConfiguration"] for op, p in fake.sent if op == "Retrieve")
    assert config["vectorSearchConfiguration"]["overrideSearchType"] == "HYBRID"


def test_an_unknown_id_still_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    class Missing(Bedrock):
        def get_knowledge_base(self, **params: Any) -> dict[str, Any]:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "KB NOPE000001 not found"}},
                "GetKnowledgeBase",
            )

    monkeypatch.setattr(aws_clients, "client", lambda service, region_name, **_: Missing())
    (queried,) = call(("query", {"query": "refunds", "rerank": False, "knowledge_base_id": "NOPE000001"}))
    assert queried.is_error and "\n" not in text_of(queried)


def test_an_s3_vectors_knowledge_base_by_id_is_searched_and_said_semantic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3 Vectors has no lexical index (Bedrock answers HYBRID semantically): a query by id, now that the
    Knowledge Base is described, asks for and says what it gets, as a query by stack does."""

    class S3Vectors(Bedrock):
        def get_knowledge_base(self, **params: Any) -> dict[str, Any]:
            described = super().get_knowledge_base(**params)
            described["knowledgeBase"]["storageConfiguration"] = {"type": "S3_VECTORS"}
            return described

    fake = S3Vectors()
    monkeypatch.setattr(aws_clients, "client", lambda service, region_name, **_: fake)
    (queried,) = call(("query", {"query": "refunds", "rerank": False, "knowledge_base_id": "VKB0000001"}))
    assert not queried.is_error, text_of(queried)
    assert queried.structured_content["search"] == "semantic"
    assert "semantic search only: S3 Vectors has no lexical index" in queried.structured_content["notices"]
    config = next(p["retrievalConfiguration"] for op, p in fake.sent if op == "Retrieve")
    assert config["vectorSearchConfiguration"]["overrideSearchType"] == "SEMANTIC"
