"""S3 access for batch objects: the only module that talks to S3.

Retries with backoff are the SDK's (standard mode); the endpoint comes from the SDK's own environment
(``AWS_ENDPOINT_URL_S3`` for a local S3), the region from the Lambda's environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from contextual_kb.runtime.errors import StorageError
from contextual_kb.runtime.observability import tracer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

# total_max_attempts counts the first attempt; botocore's max_attempts would not.
S3_CONFIG = Config(retries={"mode": "standard", "total_max_attempts": 8}, connect_timeout=5, read_timeout=60)


@dataclass(frozen=True, slots=True)
class StoredObject:
    body: bytes
    etag: str


class S3BatchStore:
    def __init__(
        self, client: S3Client | None = None, *, max_attempts: int | None = None, connections: int = 10
    ) -> None:
        config = S3_CONFIG.merge(Config(max_pool_connections=connections))  # reads and writes in parallel
        if max_attempts is not None:
            config = config.merge(Config(retries={"mode": "standard", "total_max_attempts": max_attempts}))
        self._client = client or boto3.client("s3", config=config)

    @tracer.capture_method(capture_response=False)
    def read(self, bucket: str, key: str, *, if_match: str | None = None) -> StoredObject:
        """The object's bytes; with ``if_match``, only if it is still the version that was validated."""
        extra = {"IfMatch": if_match} if if_match else {}
        try:
            response = self._client.get_object(Bucket=bucket, Key=key, **extra)
            return StoredObject(response["Body"].read(), response.get("ETag", ""))
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            if code in {"PreconditionFailed", "412"}:
                raise StorageError(f"s3://{bucket}/{key}: changed while being transformed") from exc
            raise StorageError(f"s3://{bucket}/{key}: cannot read batch object ({code})") from exc
        except BotoCoreError as exc:
            raise StorageError(f"s3://{bucket}/{key}: cannot read batch object ({exc})") from exc

    @tracer.capture_method(capture_response=False)
    def write(self, bucket: str, key: str, body: bytes) -> None:
        try:
            self._client.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            raise StorageError(f"s3://{bucket}/{key}: cannot write output batch ({code})") from exc
        except BotoCoreError as exc:
            raise StorageError(f"s3://{bucket}/{key}: cannot write output batch ({exc})") from exc
