"""A whole deployment on 127.0.0.1, for ``ckb local``, ``make demo`` and the tests: what ``ckb`` finds and
calls after ``make deploy``, with nothing reaching AWS.

- moto's server (S3, CloudFormation, Lambda, CloudWatch, ...): the stack ``ContextualKb`` made from a small
  template with the real stack's outputs, its source and intermediate buckets (the intermediate one with the
  stack's lifecycle rule) and a function record carrying the handler's settings (``ckb doctor`` reads them);
- the Bedrock stand-in (``local/bedrock_standin.py``): the transformation's model calls and ``ckb ask``;
- the local Knowledge Base (``local/knowledge_base.py``): ``bedrock-agent``, ``bedrock-agent-runtime``, and
  what ``ckb doctor`` asks of ``bedrock`` and ``service-quotas``; its ingestion jobs run the real handler
  in this process, with this process's environment as the function's settings.

``environment()`` is what a client needs to reach them all: fake credentials, one region, and the SDK's
endpoint variables (``AWS_ENDPOINT_URL`` for moto, service-specific ones for the others).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3

from contextual_kb.local.bedrock_standin import BedrockStandIn, StandInConfig
from contextual_kb.local.environment import restore
from contextual_kb.local.knowledge_base import (
    ACCOUNT,
    Analyzer,
    DataSourceSpec,
    Embed,
    KnowledgeBaseSpec,
    LocalKnowledgeBase,
)
from contextual_kb.local.s3server import free_port

STACK = "ContextualKb"
REGION = "us-east-1"
KNOWLEDGE_BASE_ID = "LOCALKB001"
DATA_SOURCE_ID = "LOCALDS001"
SOURCE_BUCKET = "contextual-kb-local-source"
INTERMEDIATE_BUCKET = "contextual-kb-local-intermediate"
FUNCTION_NAME = "contextual-kb-local-transform"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FUNCTION_NAME}"
# The handler's settings the function record carries (what doctor reads), when the environment has them.
_FUNCTION_SETTINGS = (
    "CONTEXT_STRATEGY",
    "MODEL_ID",
    "MAX_CONCURRENCY",
    "CHUNKING",
    "CONTEXT_MEMORY_PREFIX",
    "CONTEXT_METADATA_KEY",
)


@dataclass
class LocalStack:
    knowledge_base: LocalKnowledgeBase
    moto_url: str
    model_url: str
    stack: str = STACK
    region: str = REGION

    def environment(self) -> dict[str, str]:
        """What a client (``ckb``, boto3, the MCP server) needs to use this stack and nothing else."""
        kb = self.knowledge_base.url
        return {
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.moto_url,  # anything not named below: moto, never AWS
            "AWS_ENDPOINT_URL_BEDROCK_AGENT": kb,
            "AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME": kb,
            "AWS_ENDPOINT_URL_BEDROCK": kb,
            "AWS_ENDPOINT_URL_SERVICE_QUOTAS": kb,
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": self.model_url,
            "ANTHROPIC_BEDROCK_BASE_URL": self.model_url,
            "CKB_STACK": self.stack,
        }


def template(function_environment: dict[str, str]) -> dict[str, Any]:
    """The stand-in stack: the real stack's outputs, its buckets, and a function record."""
    return {
        "Resources": {
            "SourceBucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": SOURCE_BUCKET}},
            "IntermediateBucket": {
                "Type": "AWS::S3::Bucket",
                "Properties": {"BucketName": INTERMEDIATE_BUCKET},
            },
        },
        "Outputs": {
            "KnowledgeBaseId": {"Value": KNOWLEDGE_BASE_ID},
            "DataSourceId": {"Value": DATA_SOURCE_ID},
            "SourceBucketName": {"Value": SOURCE_BUCKET},
            "IntermediateBucketName": {"Value": INTERMEDIATE_BUCKET},
            "VectorStoreType": {"Value": "opensearch"},
            "TransformFunctionName": {"Value": FUNCTION_NAME},
            "TransformFunctionArn": {"Value": FUNCTION_ARN},
            "StackMode": {"Value": "stack"},
        },
    }


def _function_record(moto_url: str, environment: dict[str, str]) -> None:
    """A Lambda function record (never invoked: the Knowledge Base runs the handler in this process)."""
    iam = boto3.client("iam", endpoint_url=moto_url, region_name=REGION)
    role = iam.create_role(
        RoleName="contextual-kb-local-function",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    boto3.client("lambda", endpoint_url=moto_url, region_name=REGION).create_function(
        FunctionName=FUNCTION_NAME,
        Runtime="python3.13",
        Role=role,
        Handler="contextual_kb.runtime.handler.lambda_handler",
        Code={"ZipFile": _empty_zip()},
        Timeout=900,
        MemorySize=1024,
        Environment={"Variables": environment},
    )


def _empty_zip() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README.txt", "the local stack runs contextual_kb.runtime.handler in-process\n")
    return buffer.getvalue()


def _invoke(event: dict[str, Any]) -> dict[str, Any]:
    from contextual_kb.local import runner

    # On the job's thread: standard output stays the main thread's (a CLI printing while a job runs).
    return runner.invoke(event, capture_stdout=False).response


@contextmanager
def local_stack(
    *,
    analyzer: Analyzer,
    embed: Embed | None = None,
    max_tokens: int = 300,
    overlap_percentage: int = 20,
    tags: dict[str, str] | None = None,
    invoke: Callable[[dict[str, Any]], dict[str, Any]] | None = _invoke,
    model_latency_ms: float = 50.0,
    port: int = 0,
) -> Iterator[LocalStack]:
    """Start everything, create the stack, point this process's SDK at it for the block, stop it all after.

    ``invoke``: the transformation (the real handler by default; None indexes the chunks as chunked)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    moto.start()
    moto_url = f"http://127.0.0.1:{moto_port}"
    _reset(moto_url)  # moto's backends are this process's: start from nothing, whatever ran before
    model = BedrockStandIn(StandInConfig(latency_ms=model_latency_ms, per_token_ms=1.0)).start()
    spec = KnowledgeBaseSpec(
        KNOWLEDGE_BASE_ID,
        [
            DataSourceSpec(
                DATA_SOURCE_ID,
                SOURCE_BUCKET,
                INTERMEDIATE_BUCKET,
                max_tokens=max_tokens,
                overlap_percentage=overlap_percentage,
                transformation_arn=FUNCTION_ARN,
            )
        ],
        name=f"{STACK}-knowledge-base",
        tags=dict(tags or {}),
        region=REGION,
    )
    service = LocalKnowledgeBase(
        [spec], analyzer=analyzer, embed=embed, s3=lambda: boto3.client("s3"), invoke=invoke
    )
    stack = LocalStack(service, moto_url, model.url)
    saved: dict[str, str | None] = {}
    try:
        service.start(port)
        values = stack.environment()
        # This process is the function too: its model calls go to the stand-in, its settings are the user's.
        values.setdefault("MODEL_REGION", os.environ.get("MODEL_REGION") or REGION)
        # Its metrics (EMF lines on standard output in Lambda) would land amid the caller's output.
        values.setdefault(
            "POWERTOOLS_METRICS_DISABLED", os.environ.get("POWERTOOLS_METRICS_DISABLED") or "true"
        )
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            saved[name] = os.environ.pop(name, None)
        for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            saved[name] = os.environ.get(name)
            os.environ[name] = os.devnull  # the user's profile is never read
        saved |= {name: os.environ.get(name) for name in values}
        os.environ.update(values)
        function_environment = {k: os.environ[k] for k in _FUNCTION_SETTINGS if os.environ.get(k)}
        function_environment.setdefault("CONTEXT_STRATEGY", "claude")
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        cloudformation.create_stack(StackName=STACK, TemplateBody=json.dumps(template(function_environment)))
        _function_record(moto_url, function_environment)
        # The stack's lifecycle rule (moto's CloudFormation does not apply a bucket's LifecycleConfiguration).
        boto3.client("s3").put_bucket_lifecycle_configuration(
            Bucket=INTERMEDIATE_BUCKET,
            LifecycleConfiguration={
                "Rules": [
                    {
                        "ID": "KnowledgeBaseIntermediateFiles",
                        "Status": "Enabled",
                        "Filter": {"Prefix": "aws/bedrock/knowledge_bases/"},
                        "Expiration": {"Days": 30},
                    }
                ]
            },
        )
        yield stack
    finally:
        service.stop()
        model.stop()
        _reset(moto_url)
        moto.stop()
        restore(saved)


def _reset(moto_url: str) -> None:
    """Empty every moto backend of this process (its server's reset endpoint)."""
    from urllib.request import Request, urlopen

    with urlopen(Request(f"{moto_url}/moto-api/reset", method="POST"), timeout=30) as answer:
        answer.read()
