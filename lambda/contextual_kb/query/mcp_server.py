"""``ckb mcp``: the query side for agents, as a Model Context Protocol server (the official ``mcp`` SDK).

Tools (modelled on AWS Labs' Bedrock KB retrieval MCP server 1.1.2, and what it lacks):

- ``list_knowledge_bases``: this project's deployed stacks (found by their CloudFormation outputs) and every
  Knowledge Base the credentials can list, with their data sources; with a tag key (``--tag-key``,
  ``CKB_MCP_TAG_KEY``), only the Knowledge Bases tagged ``<key>=true``, as AWS Labs' ``KB_INCLUSION_TAG_KEY``;
- ``describe_knowledge_base``: one stack's or Knowledge Base's search type, vector store, data sources and
  their chunking, and whether our transformation runs on them;
- ``query``: hybrid retrieval of ``candidates`` and reranking to the top ``k`` (``query/retrieval.py``, as
  ``ckb query``), with a Retrieve metadata filter and a data-source filter; each result carries the context
  and the original chunk apart, the source URI, the metadata and both scores;
- ``ask``: an answer from Claude on Bedrock citing the reranked chunks as [n], with the sources;
- ``doctor``: ``ckb doctor``'s checks of a stack.

Every failure is a tool error (``is_error``) whose text is the one line ``ckb`` prints for it (the command
line gives its explainer, ``explain``); the server never dies on a bad call. Endpoint URLs and account ids
are taken out of every message, and results name no credential or endpoint.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import Any, Literal

from contextual_kb.query import aws_clients
from contextual_kb.query.deployment import DEFAULT_STACK, Deployment
from contextual_kb.query.retrieval import DEFAULT_RERANKER, MAX_CANDIDATES, RERANKERS, Result, Retriever

Explain = Callable[[BaseException], str | None]  # an exception -> the command line's one line, or None
TAG_ENV = "CKB_MCP_TAG_KEY"
DATA_SOURCE_KEY = "x-amz-bedrock-kb-data-source-id"  # the metadata key Bedrock gives every chunk
MANAGED_DATA_SOURCE_KEY = "_data_source_id"  # a MANAGED Knowledge Base's (as AWS Labs' server 1.1.2 reads it)
INSTRUCTIONS = (
    "Search Amazon Bedrock Knowledge Bases whose chunks carry a context (contextual retrieval). Call "
    "list_knowledge_bases first when you do not know which Knowledge Base to search; then query to read the "
    "passages yourself, or ask for a short answer with numbered sources. Results keep each chunk's context "
    "(what the chunk is about, written at ingestion) apart from its original text: quote the text, not the "
    "context."
)
_URL = re.compile(r"https?://[^\s'\")]+")
_ACCOUNT = re.compile(r"(?<![0-9])[0-9]{12}(?![0-9])")


def redact(text: str) -> str:
    """``text`` without endpoint URLs or account ids (an agent's transcript is not the place for them)."""
    # The punctuation after a URL is the sentence's, not the URL's: kept.
    without = _URL.sub(lambda m: "<endpoint>" + m.group()[len(m.group().rstrip(".,:;")) :], text)
    return _ACCOUNT.sub("<account>", without)


class _ArgumentError(Exception):
    """A failure the server explains itself (a wrong argument, a refused model call), in the command line's
    words."""


def build_server(  # noqa: PLR0915 - the tools are closures over the server's settings, defined here
    *,
    explain: Explain,
    default_stack: str | None = None,
    region: str | None = None,
    tag_key: str | None = None,
) -> Any:
    """The MCP server with its tools; ``explain`` turns an exception into the command line's one line."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    stack_name = default_stack or os.environ.get("CKB_STACK") or DEFAULT_STACK
    tag = tag_key if tag_key is not None else os.environ.get(TAG_ENV, "")
    server: Any = MCPServer(name="contextual-kb", instructions=INSTRUCTIONS, log_level="WARNING")

    def guarded(tool: Callable[..., Any]) -> Callable[..., Any]:
        """Every failure of ``tool`` as a ToolError carrying one line; nothing escapes as a crash."""

        @functools.wraps(tool)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return tool(*args, **kwargs)
            except Exception as exc:
                line = str(exc) if isinstance(exc, _ArgumentError) else explain(exc)
                if line is None:
                    line = f"internal error: {type(exc).__name__}: {exc}"
                raise ToolError(redact(line)) from None

        return run

    def where() -> str:
        return aws_clients.region(region)

    def client(service: str) -> Any:
        return aws_clients.client(service, where())

    def deployment(stack: str | None) -> Deployment:
        region_name = where()
        return Deployment.from_stack(stack or stack_name, region_name, client("cloudformation"))

    @server.tool()
    @guarded
    def list_knowledge_bases() -> dict[str, Any]:
        """List what can be searched: this project's deployed stacks (by name: pass one as `stack` to the
        other tools) and the Knowledge Bases in the region with their data sources (pass an id as
        `knowledge_base_id`). Call this first when you do not know which Knowledge Base holds the answer."""
        agent = client("bedrock-agent")
        notices: list[str] = []
        stacks = _our_stacks(client("cloudformation"), notices)
        owned = {s["knowledge_base_id"]: s["stack"] for s in stacks}
        bases = []
        for summary in _pages(agent.list_knowledge_bases, "knowledgeBaseSummaries"):
            kb_id = summary["knowledgeBaseId"]
            described = agent.get_knowledge_base(knowledgeBaseId=kb_id)["knowledgeBase"]
            if tag:
                arn = described["knowledgeBaseArn"]
                tags = agent.list_tags_for_resource(resourceArn=arn).get("tags") or {}
                if str(tags.get(tag, "")).lower() != "true":
                    continue
            sources = _pages(
                functools.partial(agent.list_data_sources, knowledgeBaseId=kb_id), "dataSourceSummaries"
            )
            bases.append(
                {
                    "knowledge_base_id": kb_id,
                    "name": summary.get("name", ""),
                    "description": summary.get("description", ""),
                    "status": summary.get("status", ""),
                    "type": _kind(described),
                    "stack": owned.get(kb_id),
                    "data_sources": [
                        {"data_source_id": s["dataSourceId"], "name": s.get("name", "")} for s in sources
                    ],
                }
            )
        return {
            "region": where(),
            "stacks": stacks,
            "knowledge_bases": bases,
            "tag_filter": f"{tag}=true" if tag else None,
            "notices": notices,
        }

    @server.tool()
    @guarded
    def describe_knowledge_base(
        knowledge_base_id: str | None = None, stack: str | None = None
    ) -> dict[str, Any]:
        """Describe one Knowledge Base (by id) or one of this project's stacks (by name; the default stack
        when neither is given): its vector store and search type, its data sources, their chunking, and
        whether contextual retrieval's transformation runs on them."""
        kb_id, found_stack = _target(knowledge_base_id, stack)
        agent = client("bedrock-agent")
        kb = agent.get_knowledge_base(knowledgeBaseId=kb_id)["knowledgeBase"]
        store = (kb.get("storageConfiguration") or {}).get("type", "")
        kind = _kind(kb)
        sources = []
        for summary in _pages(
            functools.partial(agent.list_data_sources, knowledgeBaseId=kb_id), "dataSourceSummaries"
        ):
            source = agent.get_data_source(knowledgeBaseId=kb_id, dataSourceId=summary["dataSourceId"])[
                "dataSource"
            ]
            ingestion = source.get("vectorIngestionConfiguration") or {}
            chunking = ingestion.get("chunkingConfiguration") or {}
            steps = (ingestion.get("customTransformationConfiguration") or {}).get("transformations") or []
            sources.append(
                {
                    "data_source_id": source["dataSourceId"],
                    "name": source.get("name", ""),
                    "type": (source.get("dataSourceConfiguration") or {}).get("type", ""),
                    "chunking": chunking.get("chunkingStrategy", "DEFAULT (FIXED_SIZE)"),
                    "contextual_transformation": any(s.get("stepToApply") == "POST_CHUNKING" for s in steps),
                }
            )
        return {
            "knowledge_base_id": kb_id,
            "name": kb.get("name", ""),
            "description": kb.get("description", ""),
            "status": kb.get("status", ""),
            "stack": found_stack,
            "type": kind,
            "vector_store": store or None,
            "search": _search_of(kind, store),
            "data_sources": sources,
        }

    def _target(knowledge_base_id: str | None, stack: str | None) -> tuple[str, str | None]:
        if knowledge_base_id and stack:
            raise _ArgumentError("knowledge_base_id and stack: give one of them, not both")
        if knowledge_base_id:
            return knowledge_base_id, None
        found = deployment(stack)
        return found.knowledge_base_id, found.stack

    def retrieve(
        text: str,
        knowledge_base_id: str | None,
        stack: str | None,
        k: int,
        candidates: int,
        rerank: bool,
        reranker: str,
        search_type: str,
        metadata_filter: dict[str, Any] | None,
        data_source_ids: list[str] | None,
    ) -> tuple[Retriever, list[Result]]:
        if reranker not in RERANKERS:
            raise _ArgumentError(f"reranker: {reranker!r} is not one of {', '.join(RERANKERS)}")
        if search_type.lower() not in {"hybrid", "semantic"}:
            raise _ArgumentError(f"search: {search_type!r} is not hybrid or semantic")
        kb_id, _ = _target(knowledge_base_id, stack)
        semantic_only = False
        kind = "VECTOR"  # this project's stacks: a transformation Lambda needs a VECTOR Knowledge Base
        if knowledge_base_id is None:
            semantic_only = deployment(stack).vector_store == "s3vectors"
        else:  # anyone's: each type takes its own retrievalConfiguration
            kind = _kind(client("bedrock-agent").get_knowledge_base(knowledgeBaseId=kb_id)["knowledgeBase"])
        retriever = Retriever(
            kb_id,
            where(),
            reranker=reranker if rerank else None,
            search_type="SEMANTIC" if search_type.lower() == "semantic" else "HYBRID",
            client=client("bedrock-agent-runtime"),
            kind=kind,
        )
        if semantic_only:
            retriever.use_semantic_only("S3 Vectors has no lexical index")
        where_filter = _with_data_sources(metadata_filter, data_source_ids, kind)
        return retriever, retriever.search(text, k=k, candidates=candidates, filter=where_filter)

    @server.tool()
    @guarded
    def query(
        query: str,
        knowledge_base_id: str | None = None,
        stack: str | None = None,
        k: int = 10,
        candidates: int = MAX_CANDIDATES,
        rerank: bool = True,
        reranker: str = DEFAULT_RERANKER,
        search: Literal["hybrid", "semantic"] = "hybrid",
        metadata_filter: dict[str, Any] | None = None,
        data_source_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Search a Knowledge Base and return the best passages to read yourself: `candidates` (up to 100)
        retrieved by hybrid search (vectors + BM25), reranked (cohere.rerank-v3-5:0 by default;
        rerank=false keeps retrieval order) to the top `k`. Each result has `text` (the original chunk:
        quote this), `context` (what the chunk is about, written at ingestion), `source` (the document's
        URI), `metadata` and both scores. `metadata_filter` is a Retrieve filter, e.g. {"equals": {"key":
        "team", "value": "payments"}} (andAll, orAll, in, startsWith, greaterThan, ... too);
        `data_source_ids` keeps results from those data sources only. Give `knowledge_base_id` or `stack`
        (default: the configured stack). Prefer this to `ask` when you will reason over the passages."""
        retriever, results = retrieve(
            query,
            knowledge_base_id,
            stack,
            k,
            candidates,
            rerank,
            reranker,
            search,
            metadata_filter,
            data_source_ids,
        )
        return {
            "knowledge_base_id": retriever.knowledge_base_id,
            "search": retriever.search_name,
            "reranker": retriever.reranker,
            "notices": list(retriever.notices),
            "results": [r.as_dict() for r in results],
        }

    @server.tool()
    @guarded
    def ask(
        question: str,
        knowledge_base_id: str | None = None,
        stack: str | None = None,
        k: int = 10,
        model: str | None = None,
        rerank: bool = True,
        metadata_filter: dict[str, Any] | None = None,
        data_source_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Answer a question from a Knowledge Base: the top `k` reranked passages are given to Claude on
        Amazon Bedrock (MODEL_ID, or Claude Haiku 4.5), which answers from them alone citing [n]; the
        sources come back numbered. One paid model call. Use `query` instead when you want the passages."""
        from contextual_kb.query.answering import MODEL_ACCESS_TODO, answer_request
        from contextual_kb.runtime.context.claude.client import ClaudeClient, ModelCallError
        from contextual_kb.runtime.settings import DEFAULT_MODEL_ID

        _, results = retrieve(
            question,
            knowledge_base_id,
            stack,
            k,
            MAX_CANDIDATES,
            rerank,
            DEFAULT_RERANKER,
            "hybrid",
            metadata_filter,
            data_source_ids,
        )
        if not results:
            raise _ArgumentError("no answer: nothing in the knowledge base matches the question")
        model_id = model or os.environ.get("MODEL_ID") or DEFAULT_MODEL_ID
        claude = ClaudeClient(region=where(), timeout_seconds=120, max_retries=4, max_connections=1)
        try:
            reply = claude.invoke(answer_request(model_id, question, results))
        except ModelCallError as exc:  # as ckb ask words it
            raise _ArgumentError(f"the call to {model_id} failed: {exc}. {MODEL_ACCESS_TODO}") from None
        finally:
            claude.close()
        return {
            "answer": reply.text.strip(),
            "model": model_id,
            "sources": [{"n": r.rank, "source": r.source, "text": r.text} for r in results],
        }

    @server.tool()
    @guarded
    def doctor(stack: str | None = None) -> dict[str, Any]:
        """Check a deployed stack (default: the configured one) the way `ckb doctor` does: the transformation,
        the function's settings, model access, the embedding model and reranker, quotas, the intermediate
        bucket. Use it when a query or an ingestion fails for no clear reason."""
        from contextual_kb.query.doctor import run

        found = deployment(stack)
        checks = [c.as_dict() for c in run(found, lambda service: aws_clients.client(service, found.region))]
        return {
            "stack": found.stack,
            "passed": not any(c["status"] == "fail" for c in checks),
            "checks": [{k: redact(v) for k, v in c.items()} for c in checks],
        }

    return server


def _kind(knowledge_base: dict[str, Any]) -> str:
    """A Knowledge Base's type (GetKnowledgeBase's knowledgeBaseConfiguration.type; VECTOR when absent)."""
    return str((knowledge_base.get("knowledgeBaseConfiguration") or {}).get("type") or "VECTOR")


def _search_of(kind: str, store: str) -> str:
    if kind == "MANAGED":
        return "managed (Bedrock's own storage, search and reranking)"
    if kind == "KENDRA":
        return "Amazon Kendra GenAI index (Kendra's own search)"
    if kind == "SQL":
        return "structured data (SQL that Bedrock writes; `query` and `ask` refuse it)"
    return "semantic only (no lexical index)" if store == "S3_VECTORS" else "hybrid (vectors + BM25)"


def _with_data_sources(
    metadata_filter: dict[str, Any] | None, data_source_ids: list[str] | None, kind: str = "VECTOR"
) -> dict[str, Any] | None:
    """The Retrieve filter: the caller's, and the data sources' (by the metadata key Bedrock sets: a MANAGED
    Knowledge Base names it differently, and filtering on the other key matches nothing)."""
    if not data_source_ids:
        return metadata_filter or None
    key = MANAGED_DATA_SOURCE_KEY if kind == "MANAGED" else DATA_SOURCE_KEY
    sources = {"in": {"key": key, "value": list(data_source_ids)}}
    return {"andAll": [metadata_filter, sources]} if metadata_filter else sources


def _pages(call: Callable[..., dict[str, Any]], name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    request: dict[str, Any] = {"maxResults": 100}
    while True:
        page = call(**request)
        found.extend(page.get(name, []))
        if not page.get("nextToken"):
            return found
        request["nextToken"] = page["nextToken"]


def _our_stacks(cloudformation: Any, notices: list[str]) -> list[dict[str, Any]]:
    """This project's stacks in the region: those whose outputs name a Knowledge Base and a source bucket.

    Listing Knowledge Bases needs bedrock-agent permissions only: when DescribeStacks fails (a least-
    privilege reader without cloudformation:DescribeStacks), no stack is named and ``notices`` says why."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return _stacks_with_outputs(cloudformation)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        why = f"{error.get('Code', 'Unknown')}: {error.get('Message', '')}".rstrip(": ")
    except BotoCoreError as exc:  # unreachable endpoint, no credentials for it
        why = f"{type(exc).__name__}: {exc}"
    notices.append(
        f"stacks not looked up (CloudFormation DescribeStacks failed: {redact(why)}): the Knowledge Bases "
        "are listed without their stack; pass knowledge_base_id to the other tools, or allow "
        "cloudformation:DescribeStacks to use `stack`"
    )
    return []


def _stacks_with_outputs(cloudformation: Any) -> list[dict[str, Any]]:
    stacks = []
    for page in cloudformation.get_paginator("describe_stacks").paginate():
        for stack in page.get("Stacks", []):
            outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
            if {"KnowledgeBaseId", "DataSourceId", "SourceBucketName"} <= outputs.keys():
                stacks.append(
                    {
                        "stack": stack["StackName"],
                        "knowledge_base_id": outputs["KnowledgeBaseId"],
                        "data_source_id": outputs["DataSourceId"],
                        "vector_store": outputs.get("VectorStoreType", "opensearch"),
                        "mode": outputs.get("StackMode", "stack"),
                    }
                )
    return stacks
