"""A local Knowledge Base on 127.0.0.1: the wire protocols boto3 speaks to ``bedrock-agent`` (knowledge
bases, data sources, ingestion jobs, knowledge-base documents, tags) and ``bedrock-agent-runtime`` (Retrieve,
Rerank), and the two ``bedrock`` and ``service-quotas`` calls ``ckb doctor`` makes. Clients reach it through
the SDK's endpoint variables (``AWS_ENDPOINT_URL_BEDROCK_AGENT``, ``AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME``,
...), as they reach the other stand-ins: nothing of ours is patched.

It is put together here from what it emulates, one module each:

- ``kb_ingestion.py``: ingestion jobs (list, parse, chunk, stage, invoke the transformation, index);
- ``kb_retrieval.py``: Retrieve (BM25, vectors, hybrid fusion, the metadata filters) and Rerank;
- ``kb_api.py``: the REST routes and what the control plane says of Knowledge Bases and data sources;
- ``kb_model.py``: the specifications and the error they share; ``http_base.py``: the HTTP server.

What it does not emulate: parsing other than UTF-8 text, HIERARCHICAL and SEMANTIC chunking, the service's
own tokenizer (chunk sizes are counted in words and marks), embeddings without ``embed``, OpenSearch's own
hybrid normalization (RRF instead), quotas and throttling, IAM (any SigV4-signed request is accepted).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from contextual_kb.local import kb_api
from contextual_kb.local.kb_ingestion import Ingestion, Invoke
from contextual_kb.local.kb_model import (
    ACCOUNT,
    CHUNK_ID,
    DATA_SOURCE,
    SIDECAR,
    SOURCE_URI,
    Analyzer,
    ApiError,
    Catalog,
    Chunk,
    DataSourceSpec,
    Embed,
    KnowledgeBaseSpec,
)
from contextual_kb.local.kb_retrieval import RERANKERS, Retrieval, compile_filter, fuse, rerank_scores
from contextual_kb.local.loopback import LoopbackServer

__all__ = [
    "ACCOUNT",
    "CHUNK_ID",
    "DATA_SOURCE",
    "RERANKERS",
    "SIDECAR",
    "SOURCE_URI",
    "Analyzer",
    "ApiError",
    "DataSourceSpec",
    "Embed",
    "KnowledgeBaseSpec",
    "LocalKnowledgeBase",
    "compile_filter",
    "fuse",
    "rerank_scores",
    "running",
]


class LocalKnowledgeBase:
    """The service: knowledge bases by id, their documents and index, ingestion jobs on worker threads.

    ``s3`` makes the S3 client the jobs read and stage through (the local S3); ``invoke`` runs the
    transformation on an event and returns the handler's response (``local/runner.py``'s ``invoke``)."""

    def __init__(
        self,
        knowledge_bases: Sequence[KnowledgeBaseSpec],
        *,
        analyzer: Analyzer,
        s3: Callable[[], Any],
        invoke: Invoke | None,
        embed: Embed | None = None,
    ) -> None:
        self.catalog = Catalog(knowledge_bases)
        self.specs = self.catalog.specs
        self.analyzer = analyzer
        self.retrieval = Retrieval(self.catalog, analyzer, embed)
        self.ingestion = Ingestion(self.catalog, s3=s3, invoke=invoke, indexed=self.retrieval.replace)
        self._lock = threading.Lock()  # ``requests``
        self._server: LoopbackServer | None = None
        self.requests: dict[str, int] = {}  # operation -> calls answered (tests, benchmarks)

    # ---- lifecycle

    def start(self, port: int = 0) -> LocalKnowledgeBase:
        class Handler(kb_api.Handler):
            dispatch = staticmethod(self.dispatch)

        self._server = LoopbackServer(Handler, port=port, name="local-knowledge-base")
        return self

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return self._server.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        self.ingestion.wait(timeout=60)

    def wait_for_jobs(self, timeout: float = 120.0) -> None:
        """Until every job started has ended (tests; the API's GetIngestionJob is what clients use)."""
        self.ingestion.wait(timeout)

    def indexed_chunks(self, kb_id: str) -> list[Chunk]:
        """What the index of ``kb_id`` holds now, each with ``body`` and ``metadata`` (tests, benchmarks)."""
        return self.retrieval.chunks(kb_id)

    # ---- the operations, by name (kb_api.py routes requests here)

    def dispatch(
        self, operation: str, found: dict[str, str], body: dict[str, Any], region: str
    ) -> dict[str, Any]:
        with self._lock:
            self.requests[operation] = self.requests.get(operation, 0) + 1
        operations: dict[str, Callable[[], dict[str, Any]]] = {
            "GetKnowledgeBase": lambda: self.get_knowledge_base(found["kb"]),
            "ListKnowledgeBases": lambda: self.list_knowledge_bases(body),
            "GetDataSource": lambda: self.get_data_source(found["kb"], found["ds"]),
            "ListDataSources": lambda: self.list_data_sources(found["kb"], body),
            "StartIngestionJob": lambda: self.start_ingestion_job(found["kb"], found["ds"]),
            "GetIngestionJob": lambda: self.get_ingestion_job(found["kb"], found["ds"], found["job"]),
            "ListIngestionJobs": lambda: self.list_ingestion_jobs(found["kb"], found["ds"], body),
            "ListDocuments": lambda: self.list_documents(found["kb"], found["ds"], body),
            "ListTagsForResource": lambda: self.list_tags(found["arn"]),
            "Retrieve": lambda: self.retrieve(found["kb"], body, region),
            "Rerank": lambda: self.rerank(body, region),
            "GetFoundationModelAvailability": lambda: kb_api.foundation_model_availability(found["model"]),
        }
        return operations[operation]()

    # ---- bedrock-agent: the control plane (kb_api.py)

    def get_knowledge_base(self, kb_id: str) -> dict[str, Any]:
        return kb_api.get_knowledge_base(self.catalog, kb_id)

    def list_knowledge_bases(self, body: dict[str, Any]) -> dict[str, Any]:
        return kb_api.list_knowledge_bases(self.catalog, body)

    def get_data_source(self, kb_id: str, ds_id: str) -> dict[str, Any]:
        return kb_api.get_data_source(self.catalog, kb_id, ds_id, transforms=self.ingestion.transforms)

    def list_data_sources(self, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return kb_api.list_data_sources(self.catalog, kb_id, body)

    def list_tags(self, arn: str) -> dict[str, Any]:
        return kb_api.list_tags(self.catalog, arn)

    # ---- bedrock-agent: ingestion (kb_ingestion.py)

    def start_ingestion_job(self, kb_id: str, ds_id: str) -> dict[str, Any]:
        return self.ingestion.start_ingestion_job(kb_id, ds_id)

    def get_ingestion_job(self, kb_id: str, ds_id: str, job_id: str) -> dict[str, Any]:
        return self.ingestion.get_ingestion_job(kb_id, ds_id, job_id)

    def list_ingestion_jobs(self, kb_id: str, ds_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.ingestion.list_ingestion_jobs(kb_id, ds_id, body)

    def list_documents(self, kb_id: str, ds_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.ingestion.list_documents(kb_id, ds_id, body)

    # ---- bedrock-agent-runtime (kb_retrieval.py)

    def retrieve(self, kb_id: str, body: dict[str, Any], region: str = "") -> dict[str, Any]:
        return self.retrieval.retrieve(kb_id, body, region)

    def rerank(self, body: dict[str, Any], region: str) -> dict[str, Any]:
        return self.retrieval.rerank(body, region)


@contextlib.contextmanager
def running(service: LocalKnowledgeBase, port: int = 0) -> Iterator[LocalKnowledgeBase]:
    service.start(port)
    try:
        yield service
    finally:
        service.stop()
