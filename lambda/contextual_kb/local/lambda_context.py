"""A stand-in for the Lambda context object, for running the real handler outside Lambda."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


@dataclass
class LocalLambdaContext:
    function_name: str = "contextual-kb-transform-local"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 1024
    timeout_seconds: int = 900
    invoked_function_arn: str = "arn:aws:lambda:local:000000000000:function:contextual-kb-transform-local"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/contextual-kb-transform-local"
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))
