"""Submit: each job of the run created on Bedrock (a model invocation job over its JSONL input), once: a
job created (``arn``) or refused (``NotCreated``) is never submitted again, and the state is saved after
each, so a resumed run does not pay twice; the client token makes a retried create idempotent too."""

from __future__ import annotations

from typing import Protocol

from botocore.exceptions import ClientError

from contextual_kb.deferred.phases.work import Callbacks, Clients, Objects
from contextual_kb.deferred.state import RunState


class Submitting(Clients, Callbacks, Objects, Protocol):
    """The submission's services."""


def submit(state: RunState, work: Submitting) -> None:
    options = work.options
    prefix = f"{options.batch_prefix}{state.run}/"
    for job in state.jobs:
        if job["arn"] or job["status"] == "NotCreated":
            continue
        key = job["input"]  # a file, or a folder of files (a sharded run's: ``shards.py``)
        model_id = job.get("model") or state.records[job["records"][0]]["model"]
        work.claim.renew(force=True)  # paid: only while this process holds the run
        try:
            created = work.bedrock.create_model_invocation_job(
                jobName=job["name"],
                roleArn=options.role_arn,
                clientRequestToken=job["name"].replace("-", ""),
                modelId=model_id,
                inputDataConfig={
                    "s3InputDataConfig": {
                        "s3Uri": f"s3://{options.bucket}/{key}",
                        "s3InputFormat": "JSONL",
                    }
                },
                outputDataConfig={"s3OutputDataConfig": {"s3Uri": f"s3://{options.bucket}/{prefix}output/"}},
                timeoutDurationInHours=options.timeout_hours,
            )
        except ClientError as exc:
            error = exc.response.get("Error", {})
            job["status"] = "NotCreated"
            job["message"] = f"{error.get('Code', 'Unknown')}: {error.get('Message', '')}"
            work.log(f"job {job['name']} not created: {job['message']}; its chunks stay pending")
            work._save(state)
            continue
        job["arn"] = created["jobArn"]
        job["status"] = "Submitted"
        count = job.get("count", len(job["records"]))
        work.log(f"submitted {job['name']}: {count} records, {model_id}")
        work._save(state)  # resumable: a second run does not submit it again
