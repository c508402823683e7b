"""Remembered contexts: the only module that reads and writes them (S3, a prefix of the intermediate bucket).

One object per document: its key is a hash of the prompt fingerprint (model, prompt version, template,
glossary, mode) and the document's text; inside, contexts are keyed by a hash of the chunk's text. So a
context is found again exactly when model, prompt, document and chunk are all unchanged: a retried call or
a re-sync of unchanged documents makes no model call for them. Memory is an optimisation: a failure to
read or write it is counted and logged, never fatal.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from contextual_kb.errors import StorageError
from contextual_kb.storage import S3_CONFIG

FORMAT_VERSION = 1


def chunk_key(chunk: str) -> str:
    return hashlib.sha256(chunk.encode("utf-8")).hexdigest()[:32]


def document_key(prefix: str, fingerprint: str, document: str) -> str:
    # The digest of fingerprint + NUL + document in UTF-8, fed a megabyte at a time: joining and encoding a
    # 50 MB document whole cost two transient copies of it (measured: docs/RELIABILITY.md, "Load").
    digest = hashlib.sha256(f"{fingerprint}\x00".encode())
    for start in range(0, len(document), _HASH_SLICE):
        digest.update(document[start : start + _HASH_SLICE].encode())
    hexdigest = digest.hexdigest()
    return f"{prefix}{fingerprint}/{hexdigest[:2]}/{hexdigest}.json"


_HASH_SLICE = 1 << 20


class ContextMemory:
    def __init__(self, client: Any = None) -> None:
        self._client = client or boto3.client("s3", config=S3_CONFIG)

    def load(self, bucket: str, key: str) -> dict[str, str]:
        try:
            response = self._client.get_object(Bucket=bucket, Key=key)
            data = json.loads(response["Body"].read())
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            if code in {"NoSuchKey", "404", "NotFound"}:
                return {}
            raise StorageError(f"s3://{bucket}/{key}: cannot read remembered contexts ({code})") from exc
        except (BotoCoreError, ValueError) as exc:
            raise StorageError(f"s3://{bucket}/{key}: cannot read remembered contexts ({exc})") from exc
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            return {}  # not ours, or an older format: as if nothing were remembered
        contexts = data.get("contexts")
        if not isinstance(contexts, dict):
            return {}
        return {k: v for k, v in contexts.items() if isinstance(k, str) and isinstance(v, str) and v}

    def save(self, bucket: str, key: str, contexts: dict[str, str]) -> None:
        body = json.dumps({"version": FORMAT_VERSION, "contexts": contexts}, ensure_ascii=False)
        try:
            self._client.put_object(
                Bucket=bucket, Key=key, Body=body.encode("utf-8"), ContentType="application/json"
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            raise StorageError(f"s3://{bucket}/{key}: cannot write remembered contexts ({code})") from exc
        except BotoCoreError as exc:
            raise StorageError(f"s3://{bucket}/{key}: cannot write remembered contexts ({exc})") from exc
