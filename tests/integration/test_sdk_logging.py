"""The model SDK's own log lines: never below WARNING, in the function and in ``ckb mcp``.

httpx2 logs each request at INFO with its URL (the model endpoint: ``HTTP Request: POST https://bedrock-
runtime.../model/.../invoke``) and the anthropic SDK each retry; at DEBUG the whole request, document
included. The function counts attempts and 429s itself, so neither is needed anywhere: with the root logger
at DEBUG and a handler (Lambda's log-level control), no record of theirs below WARNING reaches it."""

from __future__ import annotations

import logging
from typing import Any

from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.runtime import handler
from tests.integration.test_security import _Records, debug_logs, secret_document, stage

__all__ = ["debug_logs"]  # the fixture, used by name


def test_the_function_logs_no_sdk_line_below_warning(
    s3: Any, standin: Any, debug_logs: _Records, monkeypatch: Any
) -> None:
    monkeypatch.setenv("CONTEXT_STRATEGY", "claude")
    monkeypatch.setenv("MODEL_MAX_RETRIES", "1")
    standin.fail_next(1, status=500)  # the SDK retries it: its INFO "Retrying request to ..." line
    event, _ = stage(s3, {"plain.md": secret_document("plain")})
    handler.lambda_handler(event, LocalLambdaContext())
    sdk = [
        line for line in debug_logs.lines if line.split(" ", 1)[0].split(".")[0] in {"httpx2", "anthropic"}
    ]
    assert not [line for line in sdk if line.split(" ")[1] in {"DEBUG", "INFO"}], sdk[:3]
    for name in ("anthropic", "httpx2"):
        assert logging.getLogger(name).getEffectiveLevel() >= logging.WARNING
