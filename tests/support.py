"""Test helpers: an in-memory batch store, event builders and a small corpus in the benchmark's format."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from contextual_kb.runtime.storage import StoredObject


class MemoryStore:
    """The BatchStore protocol over a dict, recording every write."""

    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self.objects: dict[str, bytes] = dict(objects or {})
        self.writes: list[str] = []

    def read(self, bucket: str, key: str, *, if_match: str | None = None) -> StoredObject:
        body = self.objects[f"{bucket}/{key}"]
        etag = hashlib.md5(body).hexdigest()
        if if_match is not None and if_match != etag:
            raise AssertionError("changed")
        return StoredObject(body, etag)

    def write(self, bucket: str, key: str, body: bytes) -> None:
        self.objects[f"{bucket}/{key}"] = body
        self.writes.append(key)

    def delete(self, bucket: str, keys: list[str]) -> None:
        for key in keys:
            self.objects.pop(f"{bucket}/{key}", None)

    def put_json(self, bucket: str, key: str, value: Any) -> None:
        self.objects[f"{bucket}/{key}"] = json.dumps(value).encode("utf-8")

    def get_json(self, bucket: str, key: str) -> Any:
        return json.loads(self.objects[f"{bucket}/{key}"])


def event(bucket: str, files: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "version": "1.0",
        "knowledgeBaseId": "KB1",
        "dataSourceId": "DS1",
        "ingestionJobId": "JOB1",
        "bucketName": bucket,
        "priorTask": "CHUNKING",
        "inputFiles": files,
        **extra,
    }


def file_entry(uri: str, keys: list[str], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "originalFileLocation": {"type": "S3", "s3_location": {"uri": uri}},
        "contentBatches": [{"key": k} for k in keys],
    }
    if metadata is not None:
        entry["fileMetadata"] = metadata
    return entry


def text_item(body: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"contentBody": body, "contentType": "TEXT"}
    if metadata is not None:
        item["contentMetadata"] = metadata
    return item


OUTPUT_PREFIX = "contextual-kb/output/"  # Settings.output_prefix's default


def output_key_in(directory: str, key: str) -> str:
    """The output key ``key`` must get when the event's keys share ``directory``: that directory, our prefix,
    then the rest of the key (written out here, not computed by the code under test)."""
    assert key.startswith(directory), (directory, key)
    return directory + OUTPUT_PREFIX + key[len(directory) :]


def outputs_in(s3: Any, bucket: str) -> list[str]:
    """Every output object in ``bucket``, wherever its directory: nothing a failed call wrote may remain."""
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        found += [o["Key"] for o in page.get("Contents", []) if OUTPUT_PREFIX in o["Key"]]
    return found


def corpus(documents: int = 4, chunks: int = 5, lines: int = 1) -> list[dict[str, Any]]:
    """Documents as the codebase benchmark's corpus file holds them, ``chunks`` sections each."""
    out = []
    for d in range(documents):
        parts = [
            f"## Part {i} of guide {d}\n\n"
            + "".join(f"The valve {d}-{i}-{n} is inspected before the pump starts.\n" for n in range(lines))
            for i in range(chunks)
        ]
        out.append(
            {
                "doc_id": f"doc_{d}",
                "original_uuid": f"u{d}",
                "content": "".join(parts),
                "chunks": [
                    {"chunk_id": f"doc_{d}_{i}", "original_index": i, "content": p}
                    for i, p in enumerate(parts)
                ],
            }
        )
    return out


class FakeClock:
    """A clock the test moves: ``sleep`` advances it (and records the sleeps)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
