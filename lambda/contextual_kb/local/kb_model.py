"""What the local Knowledge Base's parts share (``local/knowledge_base.py`` puts them together): the
specifications of its Knowledge Bases and data sources, the chunk it indexes, its error, and the
lookups and paging every API call makes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from contextual_kb.local.http_base import HttpError

Analyzer = Callable[[str], list[str]]
Embed = Callable[[Sequence[str]], Any]  # texts -> an array of shape (n, dimensions)
SOURCE_URI = "x-amz-bedrock-kb-source-uri"
DATA_SOURCE = "x-amz-bedrock-kb-data-source-id"
CHUNK_ID = "x-amz-bedrock-kb-chunk-id"
SIDECAR = ".metadata.json"
ACCOUNT = "000000000000"  # the local account; never a real one
# What a Knowledge Base refuses (knowledge-base-ds, "Supported document formats and limits"): types other
# than its default parser's, metadata files over 10 KB. ``ckb upload`` warns with the same figures
# (query/uploads.py, query/reprocess.py; local may not import query): test_local_kb_promises.py keeps
# them one.
SUPPORTED_SUFFIXES = frozenset({".txt", ".md", ".html", ".doc", ".docx", ".csv", ".xls", ".xlsx", ".pdf"})
METADATA_MAX_BYTES = 10 * 1024
ApiError = HttpError  # the service's error shape (local/http_base.py)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class DataSourceSpec:
    data_source_id: str
    bucket: str
    intermediate_bucket: str
    name: str = "local-data-source"
    inclusion_prefixes: tuple[str, ...] = ()
    chunking: str = "FIXED_SIZE"  # FIXED_SIZE | NONE
    max_tokens: int = 300
    overlap_percentage: int = 20
    transformation_arn: str = ""  # the function the data source names (doctor compares it with the stack's)
    chunks_per_batch: int = 8


@dataclass
class KnowledgeBaseSpec:
    knowledge_base_id: str
    data_sources: list[DataSourceSpec]
    name: str = "local-knowledge-base"
    description: str = "A local Knowledge Base (contextual-kb stand-in)"
    tags: dict[str, str] = field(default_factory=dict)
    storage: str = "OPENSEARCH_SERVERLESS"  # or S3_VECTORS: HYBRID answered as SEMANTIC
    embedding_model: str = "amazon.titan-embed-text-v2:0"
    region: str = "us-east-1"

    @property
    def arn(self) -> str:
        return f"arn:aws:bedrock:{self.region}:{ACCOUNT}:knowledge-base/{self.knowledge_base_id}"


@dataclass
class Chunk:
    body: str
    metadata: dict[str, Any]
    uri: str
    data_source_id: str


class Catalog:
    """The Knowledge Bases by id and their data sources: the lookups every call makes."""

    def __init__(self, knowledge_bases: Sequence[KnowledgeBaseSpec]) -> None:
        self.specs: dict[str, KnowledgeBaseSpec] = {kb.knowledge_base_id: kb for kb in knowledge_bases}

    def kb(self, kb_id: str) -> KnowledgeBaseSpec:
        spec = self.specs.get(kb_id)
        if spec is None:
            raise ApiError(404, "ResourceNotFoundException", f"Knowledge base {kb_id} does not exist")
        return spec

    def ds(self, kb_id: str, ds_id: str) -> DataSourceSpec:
        for ds in self.kb(kb_id).data_sources:
            if ds.data_source_id == ds_id:
                return ds
        raise ApiError(404, "ResourceNotFoundException", f"Data source {ds_id} does not exist in {kb_id}")


def page(items: list[dict[str, Any]], body: dict[str, Any], name: str, *, limit: int) -> dict[str, Any]:
    size = body.get("maxResults") or limit
    if not isinstance(size, int) or not 1 <= size <= limit:
        raise ApiError(400, "ValidationException", f"maxResults must be between 1 and {limit}")
    token = body.get("nextToken")
    start = 0
    if token:
        if not (isinstance(token, str) and token.isascii() and token.isdigit()):  # int() reads "-1", "1_0"
            raise ApiError(400, "ValidationException", "nextToken is not valid")
        start = int(token)
    page: dict[str, Any] = {name: items[start : start + size]}
    if start + size < len(items):
        page["nextToken"] = str(start + size)
    return page
