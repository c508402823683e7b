"""Shared test setup: no AWS, ever. Fake credentials, a fixed region, Powertools quiet but real."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

# Property tests draw the same cases every run, so CI is never red by chance; HYPOTHESIS_PROFILE=random
# explores new ones (random draws found the chunker's "00000" and the token estimate's dense typed fields).
hypothesis_settings.register_profile("fixed", derandomize=True)
hypothesis_settings.register_profile("random", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        # The user's AWS setup never reaches a test: a foreign region (AWS_REGION wins over the default),
        # a profile that does not exist, a config file naming either.
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "ContextualKBTest",
        # Tests choose the claude strategy explicitly, with the stand-in (fixture ``standin``). Any model
        # call that escapes goes to a closed local port, never to AWS.
        "CONTEXT_STRATEGY": "structural",
        "ANTHROPIC_BEDROCK_BASE_URL": "http://127.0.0.1:9",
        # Tests never download the codebase benchmark: a fetch that escapes meets a closed local port. The
        # tests that need its data are marked ``benchmark`` and run where a copy is in CKB_DATA_DIR.
        "CKB_DATASET_URL": "http://127.0.0.1:9/no-downloads-in-tests",
    }
)
for _name in (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_BEARER_TOKEN_BEDROCK",
):
    os.environ.pop(_name, None)
for _name in [n for n in os.environ if n.startswith("CONTEXT_") and n != "CONTEXT_STRATEGY"]:
    os.environ.pop(_name, None)

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``benchmark`` tests need the codebase benchmark's data, which the project does not ship: they run
    where a copy is in the cache (CKB_DATA_DIR in CI), and are skipped, saying so, where it is not."""
    if item.get_closest_marker("benchmark") is None:
        return
    from contextual_kb.evaluation.datasets import codebase_dir, locate

    if locate(codebase_dir()) is None:
        pytest.skip(
            f"the codebase benchmark is not in {codebase_dir()} (set CKB_DATA_DIR to a copy's parent)"
        )


@pytest.fixture
def codebase() -> tuple[Path, Path]:
    """(corpus, dev queries) of the codebase benchmark, for tests marked ``benchmark``."""
    from contextual_kb.evaluation.datasets import codebase_dir, locate

    found = locate(codebase_dir())
    assert found is not None, "a benchmark test without the mark"
    return found


@pytest.fixture
def s3() -> Iterator[object]:
    """An in-process moto S3 and a client on it; the handler's cached client is reset around each test."""
    import boto3
    from moto import mock_aws

    from contextual_kb.runtime import handler

    handler.runtime.cache_clear()
    with mock_aws():
        yield boto3.client("s3", region_name="us-east-1")
    handler.runtime.cache_clear()


class _CurrentStdout:
    """Writes wherever sys.stdout points now (capsys swaps it only while a test runs)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


@pytest.fixture
def captured(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    """capsys that also sees the Powertools logger (its handler keeps the stdout it was created with)."""
    from contextual_kb.runtime.observability import logger

    log_handler = logger.registered_handler
    assert isinstance(log_handler, logging.StreamHandler)
    previous = log_handler.setStream(_CurrentStdout())  # type: ignore[arg-type]
    yield capsys
    if previous is not None:
        log_handler.setStream(previous)


def output_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The Bedrock stand-in on 127.0.0.1 (fast: 2 ms + 0 per token), the claude strategy pointed at it.

    Tests adjust ``standin.config`` (latency, faults, quotas, responder) before invoking the handler.
    """
    from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
    from contextual_kb.runtime import handler

    server = BedrockStandIn(StandInConfig(latency_ms=2.0, per_token_ms=0.0, record=True)).start()
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", server.url)
    monkeypatch.setenv("CONTEXT_STRATEGY", "claude")
    handler.runtime.cache_clear()
    try:
        yield server
    finally:
        server.stop()
        handler.runtime.cache_clear()


@pytest.fixture(scope="session")
def wheel_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build`` of this checkout, once per session, into a new folder (tests/packaging/wheel.py):
    shared by tests/packaging and by the users' apps' lifecycle (tests/lifecycle)."""
    from tests.packaging import wheel

    return wheel.build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def wheel_cdk_venv(wheel_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel and its ``cdk`` and ``cli`` extras, once per session:
    a CDK user's install, which synthesizes the users' apps."""
    from tests.packaging import wheel

    return wheel.install(wheel_dist, tmp_path_factory.mktemp("venv-cdk"), "cdk,cli", also=wheel.USER_CHECKS)
