"""A local stand-in for Bedrock's batch inference control plane, over an S3 (moto in process), for tests,
``ckb contextualize --local`` and benchmarks.

Reached by the real boto3 ``bedrock`` client through ``AWS_ENDPOINT_URL_BEDROCK``. It serves
``CreateModelInvocationJob``, ``GetModelInvocationJob``, ``ListModelInvocationJobs`` and
``StopModelInvocationJob`` as the API reference shapes them, and runs each job on a thread: it reads the
JSONL input from S3, answers every record the way the runtime stand-in answers InvokeModel
(``BedrockStandIn.answer``: same contexts, same token counts), and writes
``<output URI><job id>/<input file>.out`` (one ``{recordId, modelInput, modelOutput | error}`` a line) and
``manifest.json.out``, then sets the job Completed (PartiallyCompleted when records failed). Statuses go
Submitted, Validating, InProgress, then an end state; a job asked to stop is Stopping until it has written
what it processed, then Stopped; one its input breaks ends Failed with the reason.

Faults, for tests: records answered with an error (by id, or a share), lines left out, duplicated or
shuffled (output order is not promised), and whole jobs that fail or expire. Limits: a job with fewer records
than ``min_records`` is refused, as Bedrock refuses one below its quota.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
from contextual_kb.local.loopback import LoopbackServer

REGION = "us-east-1"
ACCOUNT = "123456789012"
_JOB = re.compile(r"^/model-invocation-job/(?P<id>[^/]+)(?P<stop>/stop)?$")
_ROLE = re.compile(r"^arn:aws(-[^:]+)?:iam::\d{12}:role/.+$")
_NAME = re.compile(r"^[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}$")
ENDED = {"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"}


@dataclass
class BatchConfig:
    min_records: int = 10  # the local account's quota; Bedrock's default is 100
    max_records: int = 50_000
    step_seconds: float = 0.05  # time between status changes
    record_seconds: float = 0.0  # time each record takes
    failed_records: set[str] = field(default_factory=set)  # answered with an error
    failed_record_rate: float = 0.0
    missing_records: set[str] = field(default_factory=set)  # left out of the output
    duplicate_records: bool = False  # every line written twice
    shuffle: bool = True  # output order is not the input's
    failed_jobs: int = 0  # the next N jobs fail (their records are not processed)
    expired_jobs: int = 0  # the next N jobs expire
    missing_output_files: int = 0  # the next N output files are not written (their job still completes)
    seed: int = 11


@dataclass
class _Job:
    arn: str
    job_id: str
    name: str
    model_id: str
    role_arn: str
    input_uri: str
    output_uri: str
    timeout_hours: int
    token: str
    submitted: str
    status: str = "Submitted"
    message: str = ""
    ended: str = ""
    total: int = 0
    processed: int = 0
    success: int = 0
    errors: int = 0

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "jobArn": self.arn,
            "jobName": self.name,
            "modelId": self.model_id,
            "roleArn": self.role_arn,
            "status": self.status,
            "submitTime": self.submitted,
            "lastModifiedTime": _now(),
            "inputDataConfig": {"s3InputDataConfig": {"s3Uri": self.input_uri, "s3InputFormat": "JSONL"}},
            "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": self.output_uri}},
            "timeoutDurationInHours": self.timeout_hours,
            "totalRecordCount": self.total,
            "processedRecordCount": self.processed,
            "successRecordCount": self.success,
            "errorRecordCount": self.errors,
        }
        if self.message:
            out["message"] = self.message
        if self.ended:
            out["endTime"] = self.ended
        if self.token:
            out["clientRequestToken"] = self.token
        return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


class BatchStandIn:
    def __init__(
        self, s3: Any, config: BatchConfig | None = None, model: BedrockStandIn | None = None
    ) -> None:
        self.s3 = s3
        self.config = config or BatchConfig()
        # The runtime stand-in answers the records: the same contexts and token counts as on demand.
        self.model = model or BedrockStandIn(StandInConfig(latency_ms=0.0, per_token_ms=0.0))
        self.jobs: dict[str, _Job] = {}
        self.requests: list[tuple[str, str]] = []  # (operation, job id or name), for tests
        self._lock = threading.Lock()
        self._random = random.Random(self.config.seed)
        self._server: LoopbackServer | None = None
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def start(self) -> BatchStandIn:
        owner = self

        class Handler(_Handler):
            pass

        Handler.owner = owner
        self._server = LoopbackServer(Handler, name="batch-standin")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        for thread in self._threads:
            thread.join(timeout=10)

    # --- the API ---
    def create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        token = str(body.get("clientRequestToken", ""))
        with self._lock:
            for job in self.jobs.values():
                if token and job.token == token:  # idempotent: the same request makes the same job
                    return 200, {"jobArn": job.arn}
        name, role = str(body.get("jobName", "")), str(body.get("roleArn", ""))
        if not _NAME.match(name):
            return 400, {"__type": "ValidationException", "message": f"jobName {name!r} is not valid"}
        if not _ROLE.match(role):
            return 400, {"__type": "ValidationException", "message": f"roleArn {role!r} is not valid"}
        try:
            input_uri = body["inputDataConfig"]["s3InputDataConfig"]["s3Uri"]
            output_uri = body["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]
        except (KeyError, TypeError):
            return 400, {
                "__type": "ValidationException",
                "message": "inputDataConfig and outputDataConfig needed",
            }
        lines = self._input_lines(input_uri)
        if lines is None:
            return 400, {"__type": "ValidationException", "message": f"no JSONL input at {input_uri}"}
        if not self.config.min_records <= len(lines) <= self.config.max_records:
            return 400, {
                "__type": "ValidationException",
                "message": f"the job has {len(lines)} records; this account's quota allows "
                f"{self.config.min_records} to {self.config.max_records} per job",
            }
        job_id = uuid.uuid4().hex[:12]
        job = _Job(
            arn=f"arn:aws:bedrock:{REGION}:{ACCOUNT}:model-invocation-job/{job_id}",
            job_id=job_id,
            name=name,
            model_id=str(body.get("modelId", "")),
            role_arn=role,
            input_uri=input_uri,
            output_uri=output_uri,
            timeout_hours=int(body.get("timeoutDurationInHours", 24)),
            token=token,
            submitted=_now(),
            total=len(lines),
        )
        with self._lock:
            self.jobs[job_id] = job
            self.requests.append(("CreateModelInvocationJob", name))
        thread = threading.Thread(target=self._run, args=(job, lines), daemon=True, name=f"batch-{job_id}")
        self._threads.append(thread)
        thread.start()
        return 200, {"jobArn": job.arn}

    def get(self, identifier: str) -> tuple[int, dict[str, Any]]:
        job = self.jobs.get(unquote(identifier).rsplit("/", 1)[-1])
        if job is None:
            return 404, {"__type": "ResourceNotFoundException", "message": f"job {identifier} not found"}
        with self._lock:
            self.requests.append(("GetModelInvocationJob", job.job_id))
            return 200, job.describe()

    def stop_job(self, identifier: str) -> tuple[int, dict[str, Any]]:
        job = self.jobs.get(unquote(identifier).rsplit("/", 1)[-1])
        if job is None:
            return 404, {"__type": "ResourceNotFoundException", "message": f"job {identifier} not found"}
        with self._lock:
            if job.status not in ENDED:
                job.status = "Stopping"  # as Bedrock: Stopped once the job has written what it processed
        return 200, {}

    def list_jobs(self) -> tuple[int, dict[str, Any]]:
        with self._lock:
            summaries = [job.describe() for job in self.jobs.values()]
        return 200, {"invocationJobSummaries": summaries}

    # --- running a job ---
    def _input_lines(self, uri: str) -> list[tuple[str, str]] | None:
        bucket, key = _split(uri)
        try:
            if key.endswith(".jsonl"):
                keys = [key]
            else:
                listed = self.s3.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
                keys = [o["Key"] for o in listed if o["Key"].endswith(".jsonl")]
            lines: list[tuple[str, str]] = []  # (its input file's name, the line)
            for each in keys:
                body = self.s3.get_object(Bucket=bucket, Key=each)["Body"].read().decode("utf-8")
                name = each.rsplit("/", 1)[-1]
                # JSON Lines ends a record at "\n" only: splitlines() would also cut at U+2028 and friends.
                lines.extend((name, line) for line in body.split("\n") if line.strip())
        except Exception:
            return None
        return lines or None

    def _set(self, job: _Job, status: str, message: str = "") -> None:
        with self._lock:
            if job.status == "Stopping":  # it only ends, and then Stopped, whatever its thread was doing
                if status not in ENDED:
                    return
                status = "Stopped"
            elif job.status == "Stopped":
                return
            job.status = status
            if message:
                job.message = message
            if status in ENDED:
                job.ended = _now()

    def _run(self, job: _Job, lines: list[tuple[str, str]]) -> None:
        """The job's life on its own thread; whatever goes wrong ends it Failed, as Bedrock reports it."""
        try:
            self._process(job, lines)
        except Exception as error:
            self._set(job, "Failed", f"The job failed: {type(error).__name__}: {error}")

    def _process(self, job: _Job, lines: list[tuple[str, str]]) -> None:
        config = self.config
        for status in ("Validating", "Scheduled", "InProgress"):
            time.sleep(config.step_seconds)
            if job.status == "Stopping":
                self._set(job, "Stopped")
                return
            self._set(job, status)
        with self._lock:
            fail = config.failed_jobs > 0
            expire = not fail and config.expired_jobs > 0
            config.failed_jobs -= int(fail)
            config.expired_jobs -= int(expire)
        if fail:
            self._set(job, "Failed", "The job failed: an internal error occurred (injected by the stand-in)")
            return
        if expire:
            self._set(job, "Expired", f"The job did not finish within {job.timeout_hours} hours (injected)")
            return
        # One output file for each input file, as Bedrock writes them: ``<input file name>.out``.
        outs: dict[str, list[str]] = {name: [] for name, _ in lines}
        for name, line in lines:
            out = outs[name]
            if job.status == "Stopping":  # what was processed before the stop is still written
                break
            if config.record_seconds:
                time.sleep(config.record_seconds)
            record = json.loads(line)
            record_id = str(record.get("recordId", ""))
            result = {"recordId": record_id, "modelInput": record.get("modelInput")}
            failed = record_id in config.failed_records or self._random.random() < config.failed_record_rate
            if failed:
                result["error"] = {"errorCode": 500, "errorMessage": "Internal server error (injected)"}
            else:
                status, reply, _ = self.model.answer(
                    job.model_id, record.get("modelInput") or {}, time.monotonic()
                )
                if status == 200:
                    result["modelOutput"] = reply
                else:
                    failed = True
                    result["error"] = {"errorCode": status, "errorMessage": str(reply.get("message", ""))}
            with self._lock:
                job.processed += 1
                job.errors += int(failed)
                job.success += int(not failed)
            if record_id in config.missing_records:
                continue
            out.append(json.dumps(result, ensure_ascii=False))
            if config.duplicate_records:
                out.append(json.dumps(result, ensure_ascii=False))
        bucket, prefix = _split(job.output_uri.rstrip("/") + "/")
        self._write_outputs(job, outs)
        manifest = {"totalRecordCount": job.total, "processedRecordCount": job.processed,
                    "successRecordCount": job.success, "errorRecordCount": job.errors}  # fmt: skip
        self.s3.put_object(
            Bucket=bucket, Key=f"{prefix}{job.job_id}/manifest.json.out", Body=json.dumps(manifest).encode()
        )
        time.sleep(config.step_seconds)
        self._set(job, "PartiallyCompleted" if job.errors else "Completed")

    def _write_outputs(self, job: _Job, outs: dict[str, list[str]]) -> None:
        """``<output URI><job id>/<input file>.out``, one for each input file (the first N left out when
        ``missing_output_files`` says so)."""
        config = self.config
        bucket, prefix = _split(job.output_uri.rstrip("/") + "/")
        with self._lock:
            dropped = sorted(outs)[: config.missing_output_files]
            config.missing_output_files -= len(dropped)
        for name, out in outs.items():
            if name in dropped:
                continue
            if config.shuffle:
                self._random.shuffle(out)
            body = ("\n".join(out) + "\n").encode()
            self.s3.put_object(Bucket=bucket, Key=f"{prefix}{job.job_id}/{name}.out", Body=body)


class _Handler(BaseHTTPRequestHandler):
    owner: BatchStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _authorized(self) -> bool:
        if self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
            return True
        self._send(403, {"__type": "AccessDeniedException", "message": "missing authentication"})
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        path = self.path.split("?")[0]
        if path == "/model-invocation-jobs":
            self._send(*self.owner.list_jobs())
            return
        match = _JOB.match(path)
        if not match or match.group("stop"):
            self._send(404, {"__type": "UnknownOperationException", "message": path})
            return
        self._send(*self.owner.get(match.group("id")))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized():
            return
        path = self.path.split("?")[0]
        if path == "/model-invocation-job":
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"__type": "ValidationException", "message": "body is not JSON"})
                return
            self._send(*self.owner.create(body))
            return
        match = _JOB.match(path)
        if match and match.group("stop"):
            self._send(*self.owner.stop_job(match.group("id")))
            return
        self._send(404, {"__type": "UnknownOperationException", "message": path})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status != 200:
            self.send_header("x-amzn-ErrorType", str(body.get("__type", "Unknown")))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


@contextmanager
def running_batch_standin(s3: Any, config: BatchConfig | None = None) -> Iterator[BatchStandIn]:
    standin = BatchStandIn(s3, config).start()
    try:
        yield standin
    finally:
        standin.stop()
