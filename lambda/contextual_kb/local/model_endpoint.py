"""Where local runs send model calls: a configured endpoint, the local stand-in, or Amazon Bedrock if asked.

Order: ``ANTHROPIC_BEDROCK_BASE_URL`` when set (a custom endpoint); else Amazon Bedrock only when the user
asks for it (``--bedrock``: paid calls, with their AWS credentials); else the Bedrock stand-in on 127.0.0.1
(50 ms + 1 ms per output token), so local runs never spend money by accident, AWS credentials or not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
from contextual_kb.local.environment import restore

ENV = "ANTHROPIC_BEDROCK_BASE_URL"
STANDIN_REGION = "us-east-1"  # any region: the SDK needs one to sign, the stand-in ignores it
Kind = Literal["stand-in", "custom endpoint", "Bedrock"]


@dataclass
class ModelEndpoint:
    kind: Kind
    description: str
    standin: BedrockStandIn | None = None


def _aws_credentials() -> object | None:
    import boto3

    try:
        return boto3.Session().get_credentials()
    except Exception:
        return None


def _region() -> str:
    return (
        os.environ.get("MODEL_REGION")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION", "")
    )


@contextmanager
def model_endpoint(
    *, bedrock: bool = False, latency_ms: float = 50.0, per_token_ms: float = 1.0
) -> Iterator[ModelEndpoint]:
    if os.environ.get(ENV):
        yield ModelEndpoint(
            "custom endpoint", f"the model endpoint {os.environ[ENV]} (ANTHROPIC_BEDROCK_BASE_URL)"
        )
        return
    if bedrock:
        from botocore.exceptions import NoCredentialsError, NoRegionError

        if _aws_credentials() is None:
            raise NoCredentialsError()
        region = _region()
        if not region:
            raise NoRegionError()
        yield ModelEndpoint("Bedrock", f"Amazon Bedrock ({region}) with your AWS credentials: paid calls")
        return
    standin = BedrockStandIn(StandInConfig(latency_ms=latency_ms, per_token_ms=per_token_ms)).start()
    # The SDK signs every call, so it needs a region and credentials: local ones where the user has none.
    defaults = {ENV: standin.url, "MODEL_REGION": _region() or STANDIN_REGION}
    if _aws_credentials() is None:
        defaults |= {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    saved = {name: os.environ.get(name) for name in defaults}
    os.environ.update(defaults)
    try:
        yield ModelEndpoint(
            "stand-in",
            f"the local Bedrock stand-in at {standin.url} (no paid call; --bedrock for Amazon Bedrock)",
            standin,
        )
    finally:
        restore(saved)
        standin.stop()


def unreachable(url: str, timeout: float = 3.0) -> str:
    """Why nothing answers at ``url`` (a refused or timed-out connection, a name that does not resolve), or
    "" when something listens there: a dead endpoint found before the handler spends its retries on it."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return ""
    except OSError as exc:
        return (exc.strerror or type(exc).__name__).lower()
