"""Where local runs send model calls: a configured endpoint, Amazon Bedrock, or the local stand-in.

Order: ``ANTHROPIC_BEDROCK_BASE_URL`` when set; else Amazon Bedrock when AWS credentials are found; else the
Bedrock stand-in on 127.0.0.1 (50 ms + 1 ms per output token), so `make demo` runs with no AWS account.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig

ENV = "ANTHROPIC_BEDROCK_BASE_URL"


@dataclass
class ModelEndpoint:
    description: str
    standin: BedrockStandIn | None = None


def _has_aws_credentials() -> bool:
    import boto3

    try:
        return boto3.Session().get_credentials() is not None
    except Exception:
        return False


@contextmanager
def model_endpoint(*, latency_ms: float = 50.0, per_token_ms: float = 1.0) -> Iterator[ModelEndpoint]:
    if os.environ.get(ENV):
        yield ModelEndpoint(f"model endpoint {os.environ[ENV]}")
        return
    if _has_aws_credentials():
        region = (
            os.environ.get("MODEL_REGION")
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION", "?")
        )
        yield ModelEndpoint(f"Amazon Bedrock ({region}) with your AWS credentials")
        return
    standin = BedrockStandIn(StandInConfig(latency_ms=latency_ms, per_token_ms=per_token_ms)).start()
    os.environ[ENV] = standin.url
    try:
        yield ModelEndpoint(f"no AWS credentials: the local Bedrock stand-in at {standin.url}", standin)
    finally:
        os.environ.pop(ENV, None)
        standin.stop()
