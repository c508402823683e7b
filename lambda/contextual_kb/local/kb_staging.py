"""Playing the Knowledge Base's side offline: stage chunk batches in the intermediate bucket in the exact
contract format, and build the event the KB would send."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KB_ID = "LOCALKB0001"
DATA_SOURCE_ID = "LOCALDS0001"
JOB_ID = "LOCALJOB001"


@dataclass(frozen=True)
class StagedFile:
    source_uri: str
    batch_keys: list[str]
    chunks: list[str]
    file_metadata: Mapping[str, Any] | None

    def event_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "originalFileLocation": {"type": "S3", "s3_location": {"uri": self.source_uri}},
            "contentBatches": [{"key": key} for key in self.batch_keys],
        }
        if self.file_metadata is not None:
            entry["fileMetadata"] = dict(self.file_metadata)
        return entry


def job_prefix(kb_id: str = KB_ID, data_source_id: str = DATA_SOURCE_ID, job_id: str = JOB_ID) -> str:
    return f"aws/bedrock/knowledge_bases/{kb_id}/{data_source_id}/{job_id}"


def batch_objects(
    chunks: Sequence[str], *, chunks_per_batch: int, chunk_metadata: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Chunks grouped into batch objects (``{"fileContents": [...]}``), ``chunks_per_batch`` each."""
    if chunks_per_batch < 1:
        raise ValueError("chunks_per_batch must be at least 1")
    items = [
        {
            "contentBody": chunk,
            "contentType": "TEXT",
            "contentMetadata": dict(chunk_metadata[i]) if chunk_metadata else {},
        }
        for i, chunk in enumerate(chunks)
    ]
    groups = [items[i : i + chunks_per_batch] for i in range(0, len(items), chunks_per_batch)] or [[]]
    return [{"fileContents": group} for group in groups]


def batch_keys_for(source_uri: str, count: int, prefix: str | None = None) -> list[str]:
    key = source_uri.removeprefix("s3://").split("/", 1)[-1]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", key)
    if name != key.replace("/", "_"):
        # Characters dropped (``café`` and ``cafè`` are both ``caf_``): a digest of the key keeps two files'
        # batch objects apart, which the handler would otherwise refuse as one batch listed twice.
        name += "_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]
    return [f"{prefix or job_prefix()}/{name}_{n}.JSON" for n in range(1, count + 1)]


def stage_file(
    s3: Any,
    bucket: str,
    source_uri: str,
    chunks: Sequence[str],
    *,
    chunks_per_batch: int = 8,
    file_metadata: Mapping[str, Any] | None = None,
    chunk_metadata: Sequence[Mapping[str, Any]] | None = None,
) -> StagedFile:
    """Write one file's batch objects to the intermediate bucket as the KB would."""
    batches = batch_objects(chunks, chunks_per_batch=chunks_per_batch, chunk_metadata=chunk_metadata)
    keys = batch_keys_for(source_uri, len(batches))
    for key, batch in zip(keys, batches, strict=True):
        s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(batch).encode("utf-8"))
    return StagedFile(source_uri, keys, list(chunks), file_metadata)


def build_event(
    bucket: str,
    files: Sequence[StagedFile],
    *,
    kb_id: str = KB_ID,
    data_source_id: str = DATA_SOURCE_ID,
    job_id: str = JOB_ID,
) -> dict[str, Any]:
    return {
        "version": "1.0",
        "knowledgeBaseId": kb_id,
        "dataSourceId": data_source_id,
        "ingestionJobId": job_id,
        "bucketName": bucket,
        "priorTask": "CHUNKING",
        "inputFiles": [f.event_entry() for f in files],
    }
