"""What the local Knowledge Base does in an ingestion job (``bedrock-agent``'s StartIngestionJob,
GetIngestionJob, ListIngestionJobs, ListKnowledgeBaseDocuments), in order, on a worker thread:

1. lists the data source's bucket (under its inclusion prefixes), reading ``<key>.metadata.json`` sidecars
   (``{"metadataAttributes": {...}}``, plain or typed values: ``metadata_values``) as the documents'
   metadata and skipping documents whose object and sidecar are unchanged since the last job (deleted ones
   are taken out of the index);
2. refuses what Bedrock refuses (``refusal``: a type its default parser does not read; a metadata file over
   10 KB), the document FAILED with the reason and named in the job's ``failureReasons``; parses: UTF-8
   text as it is; anything else fails that document, named, with the reason (the service parses PDF, Word
   and Excel: this stand-in does not);
3. chunks with the data source's strategy: FIXED_SIZE (``local/kb_chunking.py``, the default 300 tokens and
   20%) or NONE (the whole document, one chunk);
4. stages each document's chunks as batch objects in the intermediate bucket, in the contract's format and
   key layout (``local/kb_staging.py``), and **invokes the real transformation handler** on the event the
   Knowledge Base sends, one document a call (a handler that raises fails that document, its reason kept);
5. indexes what comes back: each output chunk with its metadata (the sidecar's, overridden by the chunk's on a
   clash), ``x-amz-bedrock-kb-source-uri``, ``x-amz-bedrock-kb-data-source-id`` and
   ``x-amz-bedrock-kb-chunk-id``; the Knowledge Base's index is then rebuilt whole (``indexed``).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.local.kb_model import (
    CHUNK_ID,
    DATA_SOURCE,
    METADATA_MAX_BYTES,
    SIDECAR,
    SOURCE_URI,
    SUPPORTED_SUFFIXES,
    ApiError,
    Catalog,
    Chunk,
    DataSourceSpec,
    now,
    page,
)
from contextual_kb.local.kb_staging import StagedFile, batch_keys_for, batch_objects, build_event, job_prefix

Invoke = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Document:
    status: str
    reason: str
    fingerprint: str
    updated_at: str
    chunks: list[Chunk] = field(default_factory=list)


@dataclass
class Job:
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


class Ingestion:
    """The data sources' documents and ingestion jobs. ``s3`` makes the S3 client the jobs read and stage
    through; ``invoke`` runs the transformation on an event (None: the data source has none);
    ``indexed(kb_id, chunks)`` is told what a Knowledge Base's index holds after each job."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        s3: Callable[[], Any],
        invoke: Invoke | None,
        indexed: Callable[[str, list[Chunk]], None],
    ) -> None:
        self._catalog, self._s3, self._invoke, self._indexed = catalog, s3, invoke, indexed
        self._documents: dict[tuple[str, str], dict[str, Document]] = {
            (kb.knowledge_base_id, ds.data_source_id): {}
            for kb in catalog.specs.values()
            for ds in kb.data_sources
        }
        self._jobs: dict[tuple[str, str], list[Job]] = {key: [] for key in self._documents}
        self._lock = threading.Lock()  # the state above
        self._handler_lock = threading.Lock()  # one transformation at a time: the handler's runtime is global
        self._workers: list[threading.Thread] = []

    @property
    def transforms(self) -> bool:
        return self._invoke is not None

    def wait(self, timeout: float = 120.0) -> None:
        """Until every job started has ended (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        for worker in list(self._workers):
            worker.join(timeout=max(0.0, deadline - time.monotonic()))

    def start_ingestion_job(self, kb_id: str, ds_id: str) -> dict[str, Any]:
        ds = self._catalog.ds(kb_id, ds_id)
        with self._lock:
            jobs = self._jobs[(kb_id, ds_id)]
            # The documented quota: one job at a time per data source, and per Knowledge Base.
            running = [
                job
                for (kb, _), each in self._jobs.items()
                if kb == kb_id
                for job in each
                if job.status in {"STARTING", "IN_PROGRESS", "STOPPING"}
            ]
            if any(job.data_source_id == ds_id for job in running):
                raise ApiError(
                    409, "ConflictException", f"Data source {ds_id} already has an ongoing ingestion job"
                )
            if running:
                raise ApiError(
                    409,
                    "ConflictException",
                    f"Knowledge base {kb_id} already has an ongoing ingestion job ({running[0].job_id}, data "
                    f"source {running[0].data_source_id}): one job at a time per Knowledge Base",
                )
            stamp = now()
            job = Job(uuid.uuid4().hex[:10].upper(), kb_id, ds_id, "STARTING", stamp, stamp, _statistics())
            jobs.append(job)
        worker = threading.Thread(target=self._run_job, args=(job, ds), name=f"ingestion-{job.job_id}")
        worker.daemon = True
        self._workers.append(worker)
        worker.start()
        return {"ingestionJob": job.as_dict()}

    def get_ingestion_job(self, kb_id: str, ds_id: str, job_id: str) -> dict[str, Any]:
        self._catalog.ds(kb_id, ds_id)
        with self._lock:
            for job in self._jobs[(kb_id, ds_id)]:
                if job.job_id == job_id:
                    return {"ingestionJob": job.as_dict()}
        raise ApiError(404, "ResourceNotFoundException", f"Ingestion job {job_id} does not exist")

    def list_ingestion_jobs(self, kb_id: str, ds_id: str, body: dict[str, Any]) -> dict[str, Any]:
        self._catalog.ds(kb_id, ds_id)
        with self._lock:
            jobs = [j.as_dict() for j in self._jobs[(kb_id, ds_id)]]
        for condition in body.get("filters") or []:
            if condition.get("attribute") != "STATUS" or condition.get("operator") != "EQ":
                raise ApiError(400, "ValidationException", "filters: only STATUS EQ is supported")
            jobs = [j for j in jobs if j["status"] in set(condition.get("values") or [])]
        order = (body.get("sortBy") or {}).get("order", "DESCENDING")
        jobs.sort(key=lambda j: j["startedAt"], reverse=order == "DESCENDING")
        return page(jobs, body, "ingestionJobSummaries", limit=1000)

    def list_documents(self, kb_id: str, ds_id: str, body: dict[str, Any]) -> dict[str, Any]:
        self._catalog.ds(kb_id, ds_id)
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
        return page(details, body, "documentDetails", limit=1000)

    # ---- the job

    def _run_job(self, job: Job, ds: DataSourceSpec) -> None:
        self._set(job, status="IN_PROGRESS")
        try:
            self._ingest(job, ds)
        except Exception as exc:  # the whole job failed (e.g. its bucket cannot be listed): said, not lost
            self._set(job, status="FAILED", reason=f"{type(exc).__name__}: {exc}")
        else:
            self._set(job, status="COMPLETE")

    def _set(self, job: Job, *, status: str, reason: str = "") -> None:
        with self._lock:
            job.status = status
            job.updated_at = now()
            if reason:
                job.failure_reasons.append(reason)

    def _fail_job_file(self, job: Job, reason: str) -> None:
        """A file the service refuses is named in the job's ``failureReasons`` too, as Bedrock names it."""
        with self._lock:
            job.failure_reasons.append(reason)

    def _count(self, job: Job, name: str, by: int = 1) -> None:
        with self._lock:
            job.statistics[name] = job.statistics.get(name, 0) + by
            job.updated_at = now()

    def _ingest(self, job: Job, ds: DataSourceSpec) -> None:
        s3 = self._s3()
        objects = _list_objects(s3, ds.bucket, ds.inclusion_prefixes or ("",))
        sidecars = {key[: -len(SIDECAR)]: etag for key, etag in objects.items() if key.endswith(SIDECAR)}
        # A key ending in "/" is a folder's marker (the S3 console's "Create folder"), not a document.
        documents = {
            key: etag for key, etag in objects.items() if not key.endswith(SIDECAR) and not key.endswith("/")
        }
        self._count(job, "numberOfMetadataDocumentsScanned", len(sidecars))
        known = self._documents[(job.knowledge_base_id, ds.data_source_id)]
        for key in sorted(documents):
            self._count(job, "numberOfDocumentsScanned")
            uri = f"s3://{ds.bucket}/{key}"
            fingerprint = f"{documents[key]}/{sidecars.get(key, '')}"
            previous = known.get(uri)
            if previous is not None and previous.fingerprint == fingerprint and previous.status == "INDEXED":
                continue  # unchanged since the last job: a sync does not ingest it again
            try:
                document = self._document(job, ds, s3, key, sidecars.get(key) is not None, fingerprint)
            except Exception as exc:  # e.g. the object deleted since it was listed: that file, not the job
                reason = f"{type(exc).__name__}: {exc}"
                self._fail_job_file(job, f"{uri}: {reason}")
                document = Document("FAILED", reason, fingerprint, now())
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
        self, job: Job, ds: DataSourceSpec, s3: Any, key: str, has_sidecar: bool, fingerprint: str
    ) -> Document:
        uri = f"s3://{ds.bucket}/{key}"

        def failed(reason: str) -> Document:
            return Document("FAILED", reason, fingerprint, now())

        refused = refusal(key)
        if refused:
            self._fail_job_file(job, f"{uri}: {refused}")
            return failed(refused)
        attributes: dict[str, Any] = {}
        if has_sidecar:
            sidecar = s3.get_object(Bucket=ds.bucket, Key=key + SIDECAR)["Body"].read()
            if len(sidecar) > METADATA_MAX_BYTES:
                reason = (
                    f"the metadata file {key}{SIDECAR} is {len(sidecar):,} bytes: a metadata file is at most "
                    "10 KB"
                )
                self._fail_job_file(job, f"s3://{ds.bucket}/{key}{SIDECAR}: {reason}")
                return failed(reason)
            try:
                attributes = read_metadata(sidecar)
            except ValueError as exc:
                reason = f"the metadata file {key}{SIDECAR} is not valid: {exc}"
                self._fail_job_file(job, f"s3://{ds.bucket}/{key}{SIDECAR}: {reason}")
                return failed(reason)
        data = s3.get_object(Bucket=ds.bucket, Key=key)["Body"].read()
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
            Chunk(
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
        return Document("INDEXED", "", fingerprint, now(), indexed)

    def _transform(
        self,
        job: Job,
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
        self._indexed(kb_id, chunks)


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
        for listed in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for item in listed.get("Contents", []):
                found[item["Key"]] = str(item.get("ETag", "")).strip('"')
    return found


def refusal(key: str) -> str:
    """Why a Knowledge Base refuses the document at ``key`` by its type, or "" (knowledge-base-ds, "Supported
    document formats": the default parser's formats, the list ``ckb upload`` warns with)."""
    suffix = PurePosixPath(key).suffix.lower()
    if suffix in SUPPORTED_SUFFIXES:
        return ""
    return (
        f"unsupported file format {suffix or '(no extension)'}: a Knowledge Base's default parser reads "
        f"{' '.join(sorted(SUPPORTED_SUFFIXES))} (upload code or other text as .txt)"
    )


_TYPED_FIELDS = {
    "STRING": ("stringValue", str),
    "NUMBER": ("numberValue", int | float),
    "BOOLEAN": ("booleanValue", bool),
    "STRING_LIST": ("stringListValue", list),
}


def read_metadata(raw: bytes) -> dict[str, Any]:
    """A metadata file's attributes as the index holds them; ValueError saying why it cannot be read."""
    try:
        given = json.loads(raw)
    except RecursionError:  # under 10 KB a file can still nest deeper than a parser recurses
        raise ValueError("it nests too deep") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise ValueError(f"it is not JSON ({exc})") from None
    if not isinstance(given, dict):
        raise ValueError("it is not a JSON object")
    if "metadataAttributes" not in given:
        raise ValueError('it has no "metadataAttributes"')
    return metadata_values(given["metadataAttributes"])


def metadata_values(attributes: Any) -> dict[str, Any]:
    """A metadata file's ``metadataAttributes`` as the index holds them: a plain value (a string, number,
    boolean or list of strings; anything else raises ValueError) as it is, a typed one
    (``{"value": {"type": "STRING", "stringValue": "payments"}, "includeForEmbedding": true}``) by its value,
    as Bedrock indexes it. A typed value without its field, or of an unknown type, raises ValueError."""
    if not isinstance(attributes, dict):
        raise ValueError("metadataAttributes is not an object")
    values: dict[str, Any] = {}
    for key, given in attributes.items():
        if not (isinstance(given, dict) and "value" in given):
            if not _plain(given):
                raise ValueError(f"{key}: a value is a string, a number, a boolean or a list of strings")
            values[key] = given
            continue
        typed = given["value"]
        kind = typed.get("type") if isinstance(typed, dict) else None
        if kind not in _TYPED_FIELDS:
            raise ValueError(f"{key}: type {kind!r} is not one of {', '.join(_TYPED_FIELDS)}")
        name, expected = _TYPED_FIELDS[kind]
        value = typed.get(name)
        wrong_number = kind == "NUMBER" and isinstance(value, bool)
        if value is None or not isinstance(value, expected) or wrong_number:
            raise ValueError(f"{key}: a {kind} value needs {name}")
        if kind == "STRING_LIST" and not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key}: stringListValue holds strings only")
        values[key] = value
    return values


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return isinstance(value, str | int | float)  # bool is an int
