"""AWS clients for the command line (the Lambda builds its own): one place, so tests can stub them."""

from __future__ import annotations

import os
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import NoRegionError

from contextual_kb.query.retrieval import CLIENT_CONFIG


def region(given: str | None = None) -> str:
    found = (
        given
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or boto3.Session().region_name
    )
    if not found:
        raise NoRegionError()  # the command line's boundary says what to do
    return found


def client(service: str, region_name: str, *, connections: int | None = None) -> Any:
    """``connections``: for a caller that sends that many requests at once (urllib3 keeps 10 by default)."""
    config = CLIENT_CONFIG.merge(Config(max_pool_connections=connections)) if connections else CLIENT_CONFIG
    return boto3.client(service, region_name=region_name, config=config)  # type: ignore[call-overload]
