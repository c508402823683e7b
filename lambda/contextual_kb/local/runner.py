"""Running the real handler on an event outside Lambda, against any S3 endpoint."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError
from pydantic import ValidationError

from contextual_kb.local.inputs import InputFileError, read_json
from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.runtime import handler
from contextual_kb.runtime.models import BatchObject, parse_batch
from contextual_kb.runtime.observability import logger


@dataclass(frozen=True)
class FileSummary:
    source: str
    batches_in: int
    batches_out: int
    chunks_in: int
    chunks_out: int  # the KB's text items, or our chunks with CHUNKING=structure
    contextualized: int
    output_keys: list[str]


@dataclass(frozen=True)
class RunResult:
    response: dict[str, Any]
    files: list[FileSummary]
    before: dict[str, BatchObject]  # input key -> batch
    after: dict[str, BatchObject]  # output key -> batch
    event: dict[str, Any]
    log: str  # what the handler printed: JSON log lines and EMF metrics, as CloudWatch would get them
    seconds: float = 0.0  # the handler's own wall time

    def summary(self) -> dict[str, Any]:
        """The handler's "transformation complete" log line (empty if it logged none)."""
        for line in reversed(self.log.splitlines()):
            if line.startswith("{") and '"transformation complete"' in line:
                with contextlib.suppress(ValueError):
                    found = json.loads(line)
                    if found.get("message") == "transformation complete":
                        return dict(found)
        return {}

    def response_inputs(self) -> list[list[str]]:
        """The input batch keys of each file, in the event's order (the response's order)."""
        return [[b["key"] for b in f["contentBatches"]] for f in self.event["inputFiles"]]


def upload_objects(s3: Any, bucket: str, objects_dir: Path) -> int:
    """Upload every file under ``objects_dir`` with its relative path as key; create the bucket if needed."""
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        s3.create_bucket(Bucket=bucket)
    count = 0
    for path in sorted(p for p in objects_dir.rglob("*") if p.is_file()):
        s3.put_object(Bucket=bucket, Key=path.relative_to(objects_dir).as_posix(), Body=path.read_bytes())
        count += 1
    return count


class HandlerError(Exception):
    """The handler raised; ``log`` holds what it printed (its error log line among it)."""

    def __init__(self, error: Exception, log: str) -> None:
        super().__init__(str(error))
        self.error = error
        self.log = log


def invoke(
    event: dict[str, Any],
    context: LocalLambdaContext | None = None,
    *,
    fresh: bool = True,
    capture_stdout: bool = True,
    lambda_handler: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None,
) -> RunResult:
    """Invoke the real handler, then read inputs and outputs back. ``fresh``: settings, strategy and S3 client
    built anew from the environment (else the ones already built, e.g. with a fault hook on the client).
    ``capture_stdout`` False: the handler's log is still captured (its logger's stream), but standard output
    is left alone, for a caller on another thread (the local Knowledge Base's jobs) while the main thread
    prints. ``lambda_handler``: the function to run instead of ours (a user's, ``local/user_handler.py``);
    it shares our runtime (settings, strategy, store), as the SDK's handlers do in Lambda."""
    if fresh:
        handler.runtime.cache_clear()
    s3 = boto3.client("s3")
    bucket = event.get("bucketName", "")
    before = _snapshot(s3, bucket, _keys(event.get("inputFiles", []))) if bucket else {}
    printed = io.StringIO()
    # Powertools' log handler keeps the stdout it was created with: point it at our buffer too.
    log_handler = logger.registered_handler
    # Assigned, not setStream(): that flushes the old stream, which may be closed (a finished CliRunner's).
    previous = log_handler.stream if isinstance(log_handler, logging.StreamHandler) else None
    if isinstance(log_handler, logging.StreamHandler):
        log_handler.stream = printed
    # The summary line is INFO: captured always (what the caller prints of it is its own business).
    level = logger.log_level
    logger.setLevel(min(level, logging.INFO))
    try:
        with contextlib.redirect_stdout(printed) if capture_stdout else contextlib.nullcontext():
            started = time.perf_counter()
            response = (lambda_handler or handler.lambda_handler)(event, context or LocalLambdaContext())
            seconds = time.perf_counter() - started
        if lambda_handler is not None:  # ours keeps the contract; a user's function is checked
            _check_response(response, event)
    except Exception as exc:
        raise HandlerError(exc, printed.getvalue()) from exc
    finally:
        logger.setLevel(level)
        if previous is not None and isinstance(log_handler, logging.StreamHandler):
            log_handler.stream = previous
    after = {key: _read(s3, bucket, key) for key in _keys(response["outputFiles"])}
    metadata_key = handler.runtime()[0].context_metadata_key
    files = []
    for given, produced in zip(event["inputFiles"], response["outputFiles"], strict=True):
        in_keys = [b["key"] for b in given["contentBatches"]]
        out_keys = [b["key"] for b in produced["contentBatches"]]
        chunks = [item for key in in_keys for item in before[key].file_contents if item.is_text]
        written = [item for key in out_keys for item in after[key].file_contents if item.is_text]
        contextualized = sum(1 for item in written if metadata_key in (item.content_metadata or {}))
        files.append(
            FileSummary(
                source=given["originalFileLocation"].get("s3_location", {}).get("uri", "?"),
                batches_in=len(in_keys),
                batches_out=len(out_keys),
                chunks_in=len(chunks),
                chunks_out=len(written),
                contextualized=contextualized,
                output_keys=out_keys,
            )
        )
    return RunResult(response, files, before, after, event, printed.getvalue(), seconds)


def _check_response(response: Any, event: dict[str, Any]) -> None:
    """A handler's answer the Knowledge Base can read: the contract's response, one output file per input."""
    from contextual_kb.runtime.models import TransformationResponse

    try:
        parsed = TransformationResponse.model_validate(response)
    except ValidationError as exc:
        raise ValueError(
            f"the handler returned {type(response).__name__}, not the contract's response "
            f"({{'outputFiles': [...]}}): {exc.errors()[0]['msg']}"
        ) from None
    if len(parsed.output_files) != len(event.get("inputFiles", [])):
        raise ValueError(
            f"the handler returned {len(parsed.output_files)} output file(s) for "
            f"{len(event.get('inputFiles', []))} input file(s)"
        )


EVENT = "a Knowledge Base custom-transformation event, a JSON object like events/markdown/event.json"


def load_event(path: Path) -> dict[str, Any]:
    event = read_json(path, EVENT)
    if not isinstance(event, dict):
        raise InputFileError(f"{path}: a JSON {type(event).__name__}, not an object; expected {EVENT}")
    return event


def document_sizes(event: dict[str, Any]) -> list[tuple[int, int]]:
    """(tokens by the model engine's estimate, text chunks) of each file of ``event``, rebuilt from its batch
    objects as the handler does: what a paid run's estimate needs."""
    from contextual_kb.runtime.context.claude.windows import estimate_tokens
    from contextual_kb.runtime.documents import assemble

    s3 = boto3.client("s3")
    bucket = event.get("bucketName", "")
    sizes = []
    for file in event.get("inputFiles", []):
        batches = _snapshot(s3, bucket, _keys([file]))
        chunks = [i.content_body for b in batches.values() for i in b.file_contents if i.is_text]
        sizes.append((estimate_tokens(assemble(chunks).text), len(chunks)))
    return sizes


def _keys(files: list[dict[str, Any]]) -> Iterator[str]:
    for file in files:
        for batch in file.get("contentBatches", []) if isinstance(file, dict) else []:
            if isinstance(batch, dict) and isinstance(batch.get("key"), str):
                yield batch["key"]


def _read(s3: Any, bucket: str, key: str) -> BatchObject:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return parse_batch(body, where=f"s3://{bucket}/{key}", file=key)


def _snapshot(s3: Any, bucket: str, keys: Iterator[str]) -> dict[str, BatchObject]:
    """The input batches that exist and parse (a bad one is the handler's to report, not ours)."""
    found: dict[str, BatchObject] = {}
    for key in keys:
        with contextlib.suppress(ClientError, ValidationError):
            found[key] = _read(s3, bucket, key)
    return found
