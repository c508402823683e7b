"""The batch inference stand-in itself, through the real boto3 client: JSON Lines split at "\n" only, a job
whose input breaks it ends Failed with the reason, and a stopped job is Stopping until what it processed is
written, then Stopped."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from contextual_kb.local.batch_standin import ENDED, REGION, BatchConfig, BatchStandIn

BUCKET = "batch"
ROLE = "arn:aws:iam::123456789012:role/ckb-batch"


@pytest.fixture
def world() -> Iterator[tuple[Any, Any, BatchConfig]]:
    """moto S3, the stand-in on it (slow enough steps to stop a job midway), and a bedrock client on it."""
    config = BatchConfig(min_records=1, step_seconds=0.05)
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        standin = BatchStandIn(s3, config).start()
        try:
            yield s3, boto3.client("bedrock", region_name=REGION, endpoint_url=standin.url), config
        finally:
            standin.stop()


def record(index: int, text: str = "a chunk") -> str:
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
    }
    return json.dumps({"recordId": f"R{index:010d}", "modelInput": body}, ensure_ascii=False)


def submit(bedrock: Any, s3: Any, name: str, lines: list[str]) -> str:
    s3.put_object(Bucket=BUCKET, Key=f"{name}/input.jsonl", Body="\n".join(lines).encode("utf-8"))
    return str(
        bedrock.create_model_invocation_job(
            jobName=name,
            roleArn=ROLE,
            modelId="anthropic.claude-haiku-4-5-20251001-v1:0",
            inputDataConfig={"s3InputDataConfig": {"s3Uri": f"s3://{BUCKET}/{name}/input.jsonl"}},
            outputDataConfig={"s3OutputDataConfig": {"s3Uri": f"s3://{BUCKET}/{name}/output/"}},
        )["jobArn"]
    )


def ended(bedrock: Any, arn: str) -> dict[str, Any]:
    for _ in range(400):  # bounded: 20 s at most
        job = bedrock.get_model_invocation_job(jobIdentifier=arn)
        if job["status"] in ENDED:
            return dict(job)
        time.sleep(0.05)
    raise AssertionError(f"job {arn} did not end")


def outputs(s3: Any, name: str) -> list[dict[str, Any]]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{name}/output/").get("Contents", [])
    (key,) = [o["Key"] for o in listed if o["Key"].endswith(".jsonl.out")]
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode("utf-8")
    return [json.loads(line) for line in body.split("\n") if line]


def test_a_record_holding_a_line_separator_is_one_record(world: tuple[Any, Any, BatchConfig]) -> None:
    s3, bedrock, _ = world
    arn = submit(bedrock, s3, "separators", [record(1, "first\u2028second\u0085third"), record(2)])
    assert ended(bedrock, arn)["status"] == "Completed"
    assert [line["recordId"] for line in outputs(s3, "separators")] == ["R0000000001", "R0000000002"]


def test_a_job_whose_input_breaks_it_ends_failed_with_the_reason(world: tuple[Any, Any, BatchConfig]) -> None:
    s3, bedrock, _ = world
    arn = submit(bedrock, s3, "broken", [record(1), "{not json"])
    job = ended(bedrock, arn)
    assert job["status"] == "Failed" and "JSONDecodeError" in job["message"]


def test_a_job_stopped_while_in_progress_stays_stopped_with_what_it_processed(
    world: tuple[Any, Any, BatchConfig],
) -> None:
    s3, bedrock, config = world
    config.record_seconds = 0.002  # 1,000 records: 2 s, time enough to stop it midway
    arn = submit(bedrock, s3, "stopped", [record(i) for i in range(1000)])
    for _ in range(400):  # bounded: until it is processing records
        if bedrock.get_model_invocation_job(jobIdentifier=arn)["status"] == "InProgress":
            break
        time.sleep(0.01)
    bedrock.stop_model_invocation_job(jobIdentifier=arn)
    # Stopping until what it processed is written: an ended status means its outputs can be read.
    assert ended(bedrock, arn)["status"] == "Stopped"
    assert 0 < len(outputs(s3, "stopped")) < 1000


def test_a_job_being_stopped_only_ever_ends_and_then_stopped() -> None:
    """Whatever its thread sets after the stop (a step, or its end), a Stopping job stays Stopping until it
    ends, and ends Stopped: never reported ended before its outputs are written."""
    from contextual_kb.local.batch_standin import _Job

    standin = BatchStandIn(s3=None)
    job = _Job(
        arn="arn", job_id="j", name="n", model_id="m", role_arn=ROLE, input_uri="s3://b/i.jsonl",
        output_uri="s3://b/o/", timeout_hours=24, token="", submitted="", total=1, status="Stopping",
    )  # fmt: skip
    for step in ("Validating", "Scheduled", "InProgress"):
        standin._set(job, step)
        assert job.status == "Stopping"
    standin._set(job, "Completed")
    assert job.status == "Stopped"
    standin._set(job, "Failed", "late")
    assert job.status == "Stopped"
