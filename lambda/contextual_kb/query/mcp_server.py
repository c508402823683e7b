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
import json
import os
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

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
# Each tool parameter's description and bounds, in the schema agents read (the API's own limits: Retrieve's
# query text 1-20,000 characters and numberOfResults 1-100, knowledgeBaseId 10 letters or digits). The tools
# check the bounds themselves (_check_arguments), so a value outside them is a one-line tool error in ckb's
# words; pydantic's own refusal would be several lines with a link.
_ID = r"[0-9a-zA-Z]{10}"
_STACK = r"[A-Za-z][A-Za-z0-9-]{0,127}"
TEXT_MAX_CHARS = 20_000  # Retrieve's retrievalQuery.text
USER_ID_MAX_CHARS = 2048


def _described(description: str, **bounds: Any) -> Any:
    return Field(description=description, json_schema_extra=bounds or None)


KnowledgeBaseId = Annotated[
    str | None,
    _described(
        "A Knowledge Base id (10 letters or digits) from list_knowledge_bases; give this or `stack`, not "
        "both. Default: the configured stack's.",
        pattern=f"^{_ID}$",
    ),
]
StackName = Annotated[
    str | None,
    _described(
        "One of this project's stacks by name (list_knowledge_bases' `stacks`). Default: the configured "
        "stack (CKB_STACK, else ContextualKb).",
        pattern=f"^{_STACK}$",
    ),
]
K = Annotated[
    int, _described("Results to return, 1-100 (after reranking).", minimum=1, maximum=MAX_CANDIDATES)
]
Candidates = Annotated[
    int,
    _described(
        "Chunks retrieved before reranking, 1-100 (at least `k` are): more finds more, costs a little more "
        "reranking.",
        minimum=1,
        maximum=MAX_CANDIDATES,
    ),
]
Rerank = Annotated[
    bool, _described("Rerank the candidates by relevance (true), or keep the retrieval order (false).")
]
Reranker = Annotated[
    str,
    _described(
        "The rerank model; each is offered in some regions only (amazon.rerank-v1:0 not in us-east-1).",
        enum=list(RERANKERS),
    ),
]
Search = Annotated[
    str,
    _described(
        "VECTOR Knowledge Bases: hybrid (vectors + BM25 over the contextualized text) or semantic (vectors "
        "only). S3 Vectors is semantic whatever is asked; other types search their own way.",
        enum=["hybrid", "semantic"],
    ),
]
MetadataFilter = Annotated[
    dict[str, Any] | None,
    _described(
        'A Retrieve metadata filter, e.g. {"equals": {"key": "team", "value": "payments"}}; operators: '
        "equals, notEquals, greaterThan(OrEquals), lessThan(OrEquals), in, notIn, startsWith, listContains, "
        "stringContains, andAll and orAll (2 or more filters each)."
    ),
]
DataSourceIds = Annotated[
    list[str] | None,
    _described(
        "Keep results from these data sources only (ids from list_knowledge_bases, 10 letters or digits).",
        minItems=1,
        maxItems=100,
        items={"type": "string", "pattern": f"^{_ID}$"},
    ),
]
UserId = Annotated[
    str | None,
    _described(
        "The end user's identity, for data sources with per-document access control (SharePoint, OneDrive, "
        "Confluence ACLs): Retrieve's userContext. Omit for sources without ACLs.",
        minLength=1,
        maxLength=USER_ID_MAX_CHARS,
    ),
]
MaxCharacters = Annotated[
    int,
    _described(
        "Bound on the size of what comes back (the results as JSON): lower-ranked results past it are left "
        "out, and `notices` says which.",
        minimum=1_000,
        maximum=400_000,
    ),
]


QueryText = Annotated[
    str, _described("What to search for, 1-20,000 characters.", minLength=1, maxLength=TEXT_MAX_CHARS)
]
Question = Annotated[
    str, _described("The question, 1-20,000 characters.", minLength=1, maxLength=TEXT_MAX_CHARS)
]
Passages = Annotated[
    int, _described("Passages given to the model, 1-100.", minimum=1, maximum=MAX_CANDIDATES)
]


MAX_CHARACTERS = 50_000  # about 12,500 tokens; returned twice by the SDK (text and structured content)

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


def _check_arguments(
    *,
    text: tuple[str, str],
    knowledge_base_id: str | None,
    stack: str | None,
    k: int,
    data_source_ids: list[str] | None,
    user_id: str | None,
    max_characters: int,
) -> None:
    """The schema's bounds, each broken one a one-line ``_ArgumentError``, before any AWS call."""
    name, value = text
    if not value.strip():
        raise _ArgumentError(f"the {name} is empty")
    if len(value) > TEXT_MAX_CHARS:
        raise _ArgumentError(f"{name}: {len(value):,} characters; Retrieve takes at most {TEXT_MAX_CHARS:,}")
    _check_names(knowledge_base_id, stack)
    _check_range("k", k, 1, MAX_CANDIDATES)
    _check_range("max_characters", max_characters, 1_000, 400_000)
    if data_source_ids is not None:
        if not 1 <= len(data_source_ids) <= 100:
            raise _ArgumentError("data_source_ids: give 1 to 100 ids, or leave it out")
        for source in data_source_ids:
            if not isinstance(source, str) or not re.fullmatch(_ID, source):
                raise _ArgumentError(f"data_source_ids: {str(source)[:60]!r} is not a data source id")
    if user_id is not None and not 1 <= len(user_id) <= USER_ID_MAX_CHARS:
        raise _ArgumentError(f"user_id: 1 to {USER_ID_MAX_CHARS:,} characters")


def _check_names(knowledge_base_id: str | None, stack: str | None) -> None:
    if knowledge_base_id is not None and not re.fullmatch(_ID, knowledge_base_id):
        raise _ArgumentError(
            f"knowledge_base_id: {knowledge_base_id[:60]!r} is not a Knowledge Base id (10 letters or digits)"
        )
    if stack is not None and not re.fullmatch(_STACK, stack):
        raise _ArgumentError(f"stack: {stack[:60]!r} is not a CloudFormation stack name")


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise _ArgumentError(f"{name} must be between {low:,} and {high:,}")


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
            described, denied = _knowledge_base(agent, kb_id, needed=bool(tag))  # the tag is read by its ARN
            if denied and not any(n.startswith("types not looked up") for n in notices):
                notices.append(
                    f"types not looked up ({denied}): the Knowledge Bases are listed with type null; allow "
                    "bedrock:GetKnowledgeBase to see them"
                )
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
                    "type": _kind(described) if described is not None else None,
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
        knowledge_base_id: KnowledgeBaseId = None, stack: StackName = None
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
        _check_names(knowledge_base_id, stack)
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
        user_id: str | None,
    ) -> tuple[Retriever, list[Result]]:
        if reranker not in RERANKERS:
            raise _ArgumentError(f"reranker: {reranker!r} is not one of {', '.join(RERANKERS)}")
        if search_type.lower() not in {"hybrid", "semantic"}:
            raise _ArgumentError(f"search: {search_type!r} is not hybrid or semantic")
        kb_id, _ = _target(knowledge_base_id, stack)
        semantic_only = False
        kind = "VECTOR"  # this project's stacks: a transformation Lambda needs a VECTOR Knowledge Base
        described: dict[str, Any] | None = None
        denied = ""
        if knowledge_base_id is None:
            semantic_only = deployment(stack).vector_store == "s3vectors"
        else:  # anyone's: each type takes its own retrievalConfiguration
            described, denied = _knowledge_base(client("bedrock-agent"), kb_id)
            kind = _kind(described) if described is not None else "VECTOR"
            store = ((described or {}).get("storageConfiguration") or {}).get("type")
            semantic_only = kind == "VECTOR" and store == "S3_VECTORS"
        retriever = Retriever(
            kb_id,
            where(),
            reranker=reranker if rerank else None,
            search_type="SEMANTIC" if search_type.lower() == "semantic" else "HYBRID",
            client=client("bedrock-agent-runtime"),
            kind=kind,
            user_id=user_id,
        )
        if semantic_only:
            retriever.use_semantic_only("S3 Vectors has no lexical index")
        if denied:
            retriever.notices.append(
                f"type not looked up ({denied}): searched as a VECTOR Knowledge Base; allow "
                "bedrock:GetKnowledgeBase to query a MANAGED or KENDRA one"
            )
        where_filter = _with_data_sources(metadata_filter, data_source_ids, kind)
        return retriever, retriever.search(text, k=k, candidates=candidates, filter=where_filter)

    @server.tool()
    @guarded
    def query(
        query: QueryText,
        knowledge_base_id: KnowledgeBaseId = None,
        stack: StackName = None,
        k: K = 10,
        candidates: Candidates = MAX_CANDIDATES,
        rerank: Rerank = True,
        reranker: Reranker = DEFAULT_RERANKER,
        search: Search = "hybrid",
        metadata_filter: MetadataFilter = None,
        data_source_ids: DataSourceIds = None,
        user_id: UserId = None,
        max_characters: MaxCharacters = MAX_CHARACTERS,
    ) -> dict[str, Any]:
        """Search a Knowledge Base and return the best passages to read yourself: `candidates` (up to 100)
        retrieved by hybrid search (vectors + BM25), reranked (cohere.rerank-v3-5:0 by default;
        rerank=false keeps retrieval order) to the top `k`. Each result has `text` (the original chunk:
        quote this), `context` (what the chunk is about, written at ingestion), `source` (the document's
        URI), `metadata` and both scores. `metadata_filter` is a Retrieve filter, e.g. {"equals": {"key":
        "team", "value": "payments"}} (andAll, orAll, in, startsWith, greaterThan, ... too);
        `data_source_ids` keeps results from those data sources only. Give `knowledge_base_id` or `stack`
        (default: the configured stack). Prefer this to `ask` when you will reason over the passages."""
        _check_arguments(
            text=("query", query),
            knowledge_base_id=knowledge_base_id,
            stack=stack,
            k=k,
            data_source_ids=data_source_ids,
            user_id=user_id,
            max_characters=max_characters,
        )
        _check_range("candidates", candidates, 1, MAX_CANDIDATES)
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
            user_id,
        )
        kept, cut = _bounded([r.as_dict() for r in results], max_characters)
        return {
            "knowledge_base_id": retriever.knowledge_base_id,
            "search": retriever.search_name,
            "reranker": retriever.reranker,
            "notices": [*retriever.notices, *cut],
            "results": kept,
        }

    @server.tool()
    @guarded
    def ask(
        question: Question,
        knowledge_base_id: KnowledgeBaseId = None,
        stack: StackName = None,
        k: Passages = 10,
        model: Annotated[
            str | None,
            _described(
                "The answering model or inference profile id. Default: MODEL_ID, else Claude Haiku 4.5.",
                minLength=1,
                maxLength=2048,
            ),
        ] = None,
        rerank: Rerank = True,
        metadata_filter: MetadataFilter = None,
        data_source_ids: DataSourceIds = None,
        user_id: UserId = None,
        max_characters: MaxCharacters = MAX_CHARACTERS,
    ) -> dict[str, Any]:
        """Answer a question from a Knowledge Base: the top `k` reranked passages are given to Claude on
        Amazon Bedrock (MODEL_ID, or Claude Haiku 4.5), which answers from them alone citing [n]; the
        sources come back numbered. One paid model call. Use `query` instead when you want the passages."""
        _check_arguments(
            text=("question", question),
            knowledge_base_id=knowledge_base_id,
            stack=stack,
            k=k,
            data_source_ids=data_source_ids,
            user_id=user_id,
            max_characters=max_characters,
        )
        if model is not None and not 1 <= len(model) <= 2048:
            raise _ArgumentError("model: 1 to 2,048 characters")
        from contextual_kb.query.answering import MODEL_ACCESS_TODO, answer_request
        from contextual_kb.runtime.context.claude.client import ClaudeClient, ModelCallError
        from contextual_kb.runtime.settings import DEFAULT_MODEL_ID

        retriever, results = retrieve(
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
            user_id,
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
        sources, cut = _bounded(
            [{"n": r.rank, "source": r.source, "text": r.text} for r in results], max_characters
        )
        return {
            "answer": reply.text.strip(),
            "model": model_id,
            "sources": sources,
            "notices": [*retriever.notices, *cut],
        }

    @server.tool()
    @guarded
    def doctor(stack: StackName = None) -> dict[str, Any]:
        """Check a deployed stack (default: the configured one) the way `ckb doctor` does: the transformation,
        the function's settings, model access, the embedding model and reranker, quotas, the intermediate
        bucket. Use it when a query or an ingestion fails for no clear reason."""
        from contextual_kb.query.doctor import run

        _check_names(None, stack)
        found = deployment(stack)
        checks = [c.as_dict() for c in run(found, lambda service: aws_clients.client(service, found.region))]
        return {
            "stack": found.stack,
            "passed": not any(c["status"] == "fail" for c in checks),
            "checks": [{k: redact(v) for k, v in c.items()} for c in checks],
        }

    return server


def _bounded(items: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``items`` (best first) whose JSON stays within ``budget`` characters, and a note of what was cut: the
    lower-ranked items past the budget are left out; the first one alone over it keeps its text's opening
    (``text_cut``: its whole length). Pure."""
    kept: list[dict[str, Any]] = []
    used = 0
    for position, item in enumerate(items):
        size = len(json.dumps(item, ensure_ascii=False))
        if used + size <= budget:
            kept.append(item)
            used += size
            continue
        if kept:
            left = items[position:]
            rest = sum(len(json.dumps(i, ensure_ascii=False)) for i in left)
            return kept, [
                f"{len(left)} lower-ranked of {len(items)} results left out (positions {position + 1}-"
                f"{len(items)}, {rest:,} characters) to stay within max_characters={budget:,}: ask with a "
                "smaller k, a filter, or a larger max_characters"
            ]
        text = str(item.get("text", ""))
        fitted = _fit(item, budget)
        room = len(fitted["text"])
        kept.append(fitted)
        also = " and ".join(name for name in ("context", "metadata") if f"{name}_cut" in fitted)
        also = f" (its {also} cut too)" if also else ""
        if len(items) > 1:
            return kept, [
                f"the first result alone is over max_characters={budget:,}: its text cut to {room:,} of "
                f"{len(text):,} characters{also}, and the {len(items) - 1} others left out"
            ]
        return kept, [
            f"the result's text cut to {room:,} of {len(text):,} characters{also} (max_characters={budget:,})"
        ]
    return kept, []


def _knowledge_base(agent: Any, kb_id: str, *, needed: bool = False) -> tuple[dict[str, Any] | None, str]:
    """GetKnowledgeBase's ``knowledgeBase``, or None and why when the caller may not call it (AccessDenied):
    Retrieve, ListKnowledgeBases and ListDataSources are separate permissions, and a least-privilege reader
    granted those alone could list and query before the types were looked up. Any other failure (an unknown
    id, throttling past the retries) is raised, as when ``needed``."""
    from botocore.exceptions import ClientError

    try:
        return agent.get_knowledge_base(knowledgeBaseId=kb_id)["knowledgeBase"], ""
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if needed or error.get("Code") != "AccessDeniedException":
            raise
        return None, redact(f"GetKnowledgeBase failed: {error.get('Code')}: {error.get('Message', '')}")


def _fit(item: dict[str, Any], budget: int) -> dict[str, Any]:
    """``item`` cut to ``budget`` characters of JSON: its text's opening (``text_cut``: the whole length);
    when even an empty text is over, its metadata left out (``metadata_cut``) and its context cut to half
    of what is left (``context_cut``), the text having the rest. Pure."""
    text = str(item.get("text", ""))
    fitted = {**item, "text": "", "text_cut": len(text)}
    if _size(fitted) > budget and item.get("metadata"):
        fitted = {**fitted, "metadata": {}, "metadata_cut": True}
    context = item.get("context")
    if _size(fitted) > budget and isinstance(context, str) and context:
        fitted = {**fitted, "context": "", "context_cut": len(context)}
        spare = max(0, budget - _size(fitted))  # half of it for the context, the rest for the text
        fitted = _shrunk(fitted, "context", context, budget - spare + spare // 2)
    return _shrunk(fitted, "text", text, budget)


def _shrunk(item: dict[str, Any], key: str, value: str, budget: int) -> dict[str, Any]:
    """``item`` with ``value``'s longest opening under ``key`` that keeps its JSON within ``budget``."""
    low, high = 0, len(value)  # a binary search: escapes make JSON longer than the text, unevenly
    while low < high:
        middle = (low + high + 1) // 2
        if _size({**item, key: value[:middle]}) <= budget:
            low = middle
        else:
            high = middle - 1
    return {**item, key: value[:low]}


def _size(item: dict[str, Any]) -> int:
    return len(json.dumps(item, ensure_ascii=False))


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
