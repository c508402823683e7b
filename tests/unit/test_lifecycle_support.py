"""The lifecycle test's failure message (tests/lifecycle/ministack.py): a function that fails on the engine
shows why, even when the engine's LogResult is empty (issue 43: an empty string was all a contributor saw)."""

from __future__ import annotations

import base64
import json

from tests.lifecycle.ministack import invocation_failure


def test_a_failed_invocation_shows_the_functions_error_and_the_engines_log() -> None:
    payload = json.dumps(
        {
            "errorType": "Runtime.ImportModuleError",
            "errorMessage": "Unable to import module 'contextual_kb.runtime.handler': No module named "
            "'pydantic_core._pydantic_core'",
            "stackTrace": ['  File "/var/task/x.py", line 1\n'],
        }
    ).encode()
    message = invocation_failure(
        {"StatusCode": 200, "FunctionError": "Unhandled"}, payload, "booted\nworker exited 1\n"
    )
    assert "FunctionError: Unhandled" in message
    assert "Runtime.ImportModuleError: Unable to import module" in message and "/var/task/x.py" in message
    assert "function log: empty" in message and "worker exited 1" in message


def test_the_function_log_is_shown_when_there_is_one() -> None:
    log = base64.b64encode(b"START\nTraceback: boom\nEND").decode()
    message = invocation_failure({"StatusCode": 200, "FunctionError": "Unhandled", "LogResult": log}, b"", "")
    assert "Traceback: boom" in message and "ministack log: empty" in message
