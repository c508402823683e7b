"""Shared test setup: no AWS, ever. Fake credentials, a fixed region, Powertools quiet but real."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "ContextualKBTest",
        # Tests choose the claude strategy explicitly, with the stand-in (fixture ``standin``). Any model
        # call that escapes goes to a closed local port, never to AWS.
        "CONTEXT_STRATEGY": "structural",
        "ANTHROPIC_BEDROCK_BASE_URL": "http://127.0.0.1:9",
    }
)
for _name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_BEARER_TOKEN_BEDROCK"):
    os.environ.pop(_name, None)
for _name in [n for n in os.environ if n.startswith("CONTEXT_") and n != "CONTEXT_STRATEGY"]:
    os.environ.pop(_name, None)

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"


@pytest.fixture
def s3() -> Iterator[object]:
    """An in-process moto S3 and a client on it; the handler's cached client is reset around each test."""
    import boto3
    from moto import mock_aws

    from contextual_kb import handler

    handler.runtime.cache_clear()
    with mock_aws():
        yield boto3.client("s3", region_name="us-east-1")
    handler.runtime.cache_clear()
