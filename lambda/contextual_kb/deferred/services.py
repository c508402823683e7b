"""What ``ckb contextualize`` asks of AWS besides batch jobs: whether a pending document's source still is as
it was, records sent on demand, and the documents ingested again."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from contextual_kb.deferred.records import Output, Planned
from contextual_kb.runtime.context.claude.client import ClaudeClient, ModelCallError

ON_DEMAND_CONCURRENCY = 8


def source_state(s3: Any) -> Callable[[str, str], str]:
    """``(uri, recorded_at) -> state`` for S3 sources: ``deleted`` (gone), ``changed`` (written after the
    Lambda recorded it: the Knowledge Base ingests it anew), ``ok``, or ``unknown`` (not S3, not readable)."""

    def state(uri: str, recorded_at: str) -> str:
        if not uri.startswith("s3://"):
            return "unknown"
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            return "deleted" if code in {"404", "NoSuchKey", "NotFound"} else "unknown"
        except BotoCoreError:
            return "unknown"
        modified = head.get("LastModified")
        try:
            recorded = datetime.fromisoformat(recorded_at.replace("Z", "+00:00"))
        except ValueError:
            return "unknown"
        return "changed" if isinstance(modified, datetime) and modified > recorded else "ok"

    return state


def on_demand(client: ClaudeClient) -> Callable[[list[Planned]], dict[str, Output]]:
    """Records sent as ordinary model calls (too few for a batch job, or failed in one), the SDK's retries
    included; a call that still fails gives an error output (the chunks stay pending)."""
    import json

    def send(record: Planned) -> Output:
        body = json.loads(record.line)["modelInput"]
        extra = {k: body[k] for k in ("anthropic_version", "temperature") if k in body}
        request = {
            "model": record.model_id,
            **{k: v for k, v in body.items() if k not in extra},
            "extra_body": extra,
        }
        try:
            reply = client.invoke(request)
        except ModelCallError as exc:
            return Output(record.record_id, error=f"{exc.kind}: {exc}")
        usage = reply.usage
        return Output(
            record.record_id,
            text=reply.text,
            stop_reason=reply.stop_reason,
            input_tokens=usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
            output_tokens=usage.output_tokens,
        )

    def run(records: list[Planned]) -> dict[str, Output]:
        with ThreadPoolExecutor(
            max_workers=ON_DEMAND_CONCURRENCY, thread_name_prefix="ckb-on-demand"
        ) as pool:
            return {output.record_id: output for output in pool.map(send, records)}

    return run
