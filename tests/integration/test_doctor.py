"""`ckb doctor`: every check's passing and failing answer, with AWS answers stubbed (botocore's Stubber)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.query import aws_clients
from contextual_kb.query.doctor import Quota, model_quotas, quota_family, quota_need

REGION = "us-east-1"
KB, DS = "KBID123456", "DSID123456"
FUNCTION = "ContextualKb-TransformFunction-abc"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:123456789012:function:{FUNCTION}"
INTERMEDIATE = "ckb-intermediate-bucket"
HAIKU = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
SERVICES = (
    "cloudformation",
    "bedrock-agent",
    "lambda",
    "bedrock-runtime",
    "bedrock",
    "service-quotas",
    "s3",
    "cloudwatch",
    "iam",
    "sns",
    "logs",
    "stepfunctions",
)
runner = CliRunner()


class Clients:
    def __init__(self) -> None:
        self.clients = {name: boto3.client(name, region_name=REGION) for name in SERVICES}
        self.stubs = {name: Stubber(client) for name, client in self.clients.items()}

    def client(self, service: str, region_name: str) -> Any:
        return self.clients[service]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clients]:
    clients = Clients()
    monkeypatch.setattr(aws_clients, "client", clients.client)
    for stub in clients.stubs.values():
        stub.activate()
    yield clients
    for stub in clients.stubs.values():
        stub.deactivate()


KB_ROLE = "arn:aws:iam::123456789012:role/service-role/AmazonBedrockExecutionRoleForKnowledgeBase_x1"
ATTACHED = {
    "StackMode": "attach",
    "KnowledgeBaseRoleArn": KB_ROLE,
    "KnowledgeBasePolicyName": "KnowledgeBaseAccess46FD1151",
}


def stack_outputs(**extra: str) -> dict[str, Any]:
    values = {
        "KnowledgeBaseId": KB,
        "DataSourceId": DS,
        "SourceBucketName": "ckb-source",
        "IntermediateBucketName": INTERMEDIATE,
        "TransformFunctionName": FUNCTION,
        "TransformFunctionArn": FUNCTION_ARN,
        "VectorStoreType": "opensearch",
        **extra,
    }
    return {
        "Stacks": [
            {
                "StackName": "ContextualKb",
                "CreationTime": "2026-11-23T00:00:00Z",
                "StackStatus": "CREATE_COMPLETE",
                "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in values.items()],
            }
        ]
    }


def data_source(lambda_arn: str | None = FUNCTION_ARN, chunking: str | None = None) -> dict[str, Any]:
    ingestion: dict[str, Any] = {}
    if chunking is not None:
        ingestion["chunkingConfiguration"] = {"chunkingStrategy": chunking}
    if lambda_arn:
        ingestion["customTransformationConfiguration"] = {
            "intermediateStorage": {"s3Location": {"uri": f"s3://{INTERMEDIATE}/"}},
            "transformations": [
                {
                    "stepToApply": "POST_CHUNKING",
                    "transformationFunction": {
                        "transformationLambdaConfiguration": {"lambdaArn": lambda_arn}
                    },
                }
            ],
        }
    return {
        "dataSource": {
            "knowledgeBaseId": KB,
            "dataSourceId": DS,
            "name": "ContextualKb-source",
            "status": "AVAILABLE",
            "dataSourceConfiguration": {
                "type": "S3",
                "s3Configuration": {"bucketArn": "arn:aws:s3:::ckb-source"},
            },
            "vectorIngestionConfiguration": ingestion,
            "createdAt": "2026-11-23T00:00:00Z",
            "updatedAt": "2026-11-23T00:00:00Z",
        }
    }


def function(environment: dict[str, str] | None = None, timeout: int = 900) -> dict[str, Any]:
    return {
        "FunctionName": FUNCTION,
        "Timeout": timeout,
        "Environment": {"Variables": {"CONTEXT_STRATEGY": "claude", **(environment or {})}},
    }


def knowledge_base() -> dict[str, Any]:
    return {
        "knowledgeBase": {
            "knowledgeBaseId": KB,
            "name": "ContextualKb-kb-abc123",
            "knowledgeBaseArn": f"arn:aws:bedrock:{REGION}:123456789012:knowledge-base/{KB}",
            "roleArn": "arn:aws:iam::123456789012:role/kb",
            "knowledgeBaseConfiguration": {
                "type": "VECTOR",
                "vectorKnowledgeBaseConfiguration": {
                    "embeddingModelArn": f"arn:aws:bedrock:{REGION}::foundation-model/"
                    "amazon.titan-embed-text-v2:0"
                },
            },
            "status": "ACTIVE",
            "createdAt": "2026-11-23T00:00:00Z",
            "updatedAt": "2026-11-23T00:00:00Z",
        }
    }


def available(model_id: str, **changes: Any) -> dict[str, Any]:
    return {
        "modelId": model_id,
        "agreementAvailability": {"status": "AVAILABLE"},
        "authorizationStatus": "AUTHORIZED",
        "entitlementAvailability": "AVAILABLE",
        "regionAvailability": "AVAILABLE",
        **changes,
    }


def quotas(
    requests: float | None = 10_000,
    tokens: float = 5_000_000,
    daily: float | None = None,
    cross_model_daily: float | None = 700_000_000,
) -> dict[str, Any]:
    listed = [
        ("Global cross-region model inference tokens per minute for Anthropic Claude Haiku 4.5", tokens),
        ("Cross-region model inference requests per minute for Anthropic Claude Haiku 4.5", 1.0),  # not ours
        ("Global cross-region model inference tokens per minute for Anthropic Claude Haiku 4.5 1M", 9.0),
        ("On-demand InvokeModel requests per minute for Amazon Titan Text Embeddings V2", 2000.0),
    ]
    if requests is not None:
        listed.append(
            (
                "Global cross-region model inference requests per minute for Anthropic Claude Haiku 4.5",
                requests,
            )
        )
    if daily is not None:
        listed.append(("Model invocation max tokens per day for Anthropic Claude Haiku 4.5", daily))
    if cross_model_daily is not None:
        listed.append(("Cross-Model Max Tokens Per Day", cross_model_daily))
    return {
        "Quotas": [
            {"ServiceCode": "bedrock", "QuotaName": name, "QuotaCode": f"L-{n:08d}", "Value": value}
            for n, (name, value) in enumerate(listed)
        ]
    }


def lifecycle(*prefixes: str) -> dict[str, Any]:
    return {
        "Rules": [
            {"ID": f"r{n}", "Filter": {"Prefix": p}, "Status": "Enabled", "Expiration": {"Days": 30}}
            for n, p in enumerate(prefixes)
        ]
    }


def healthy(aws: Clients, **overrides: Any) -> None:
    """Every answer of a healthy stack, unless an override replaces one (a callable: it adds its own)."""
    answers: dict[str, Any] = {
        "stack": lambda: aws.stubs["cloudformation"].add_response("describe_stacks", stack_outputs()),
        "data_source": lambda: aws.stubs["bedrock-agent"].add_response("get_data_source", data_source()),
        "function": lambda: aws.stubs["lambda"].add_response("get_function_configuration", function()),
        "model": lambda: aws.stubs["bedrock-runtime"].add_response(
            "invoke_model",
            {"body": StreamingBody(io.BytesIO(b"{}"), 2), "contentType": "application/json"},
            {"modelId": HAIKU, "body": ANY},
        ),
        "knowledge_base": lambda: aws.stubs["bedrock-agent"].add_response(
            "get_knowledge_base", knowledge_base()
        ),
        "embedding": lambda: aws.stubs["bedrock"].add_response(
            "get_foundation_model_availability", available("amazon.titan-embed-text-v2:0")
        ),
        "reranker": lambda: aws.stubs["bedrock"].add_response(
            "get_foundation_model_availability", available("cohere.rerank-v3-5:0")
        ),
        "quotas": lambda: aws.stubs["service-quotas"].add_response("list_service_quotas", quotas()),
        "lifecycle": lambda: aws.stubs["s3"].add_response(
            "get_bucket_lifecycle_configuration",
            lifecycle("aws/bedrock/knowledge_bases/", "contextual-kb/output/"),
        ),
    }
    answers.update(overrides)
    for answer in answers.values():
        if answer is not None:
            answer()


def healthy_with_model(aws: Clients, model_id: str, **overrides: Any) -> None:
    """``healthy``, the function configured with ``model_id`` and that model answering the probe."""
    healthy(
        aws,
        function=lambda: aws.stubs["lambda"].add_response(
            "get_function_configuration", function({"MODEL_ID": model_id})
        ),
        model=lambda: aws.stubs["bedrock-runtime"].add_response(
            "invoke_model",
            {"body": StreamingBody(io.BytesIO(b"{}"), 2), "contentType": "application/json"},
            {"modelId": model_id, "body": ANY},
        ),
        **overrides,
    )


def doctor(*args: str) -> tuple[int, list[dict[str, str]]]:
    result = runner.invoke(app, ["doctor", "--region", REGION, "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def by_name(checks: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in checks}


def test_a_healthy_stack_passes_every_check(aws: Clients) -> None:
    healthy(aws)
    code, checks = doctor()
    assert code == 0, checks
    assert [c["name"] for c in checks] == [
        "stack",
        "transformation",
        "function settings",
        "chunking",
        "model",
        "embedding model",
        "reranker",
        "tokens per minute",
        "requests per minute",
        "tokens per day",
        "one call",
        "quotas",
        "intermediate bucket",
    ]
    assert all(c["status"] == "ok" for c in checks), checks
    for stub in aws.stubs.values():
        stub.assert_no_pending_responses()
    healthy(aws)
    text = runner.invoke(app, ["doctor", "--region", REGION])
    assert text.exit_code == 0
    lines = text.stdout.strip().splitlines()
    assert len(lines) == 13 and all(line.startswith("✔ ") for line in lines), lines


def test_a_missing_stack_is_one_failed_check(aws: Clients) -> None:
    aws.stubs["cloudformation"].add_client_error(
        "describe_stacks", "ValidationError", "Stack with id ContextualKb does not exist", 400
    )
    code, checks = doctor()
    assert code == 1 and [c["status"] for c in checks] == ["fail"]
    assert "does not exist" in checks[0]["detail"] and "make deploy" in checks[0]["todo"]


def test_a_data_source_without_our_transformation_fails(aws: Clients) -> None:
    healthy(
        aws, data_source=lambda: aws.stubs["bedrock-agent"].add_response("get_data_source", data_source(None))
    )
    code, checks = doctor()
    assert code == 1 and by_name(checks)["transformation"]["status"] == "fail"
    assert "runs no POST_CHUNKING transformation" in by_name(checks)["transformation"]["detail"]


def test_another_function_on_the_data_source_fails(aws: Clients) -> None:
    other = "arn:aws:lambda:us-east-1:123456789012:function:someone-elses"
    healthy(
        aws,
        data_source=lambda: aws.stubs["bedrock-agent"].add_response("get_data_source", data_source(other)),
    )
    code, checks = doctor()
    assert code == 1 and "someone-elses" in by_name(checks)["transformation"]["detail"]


@pytest.mark.parametrize(
    ("strategy", "chunking", "status", "expected"),
    [
        ("NONE", "kb", "fail", "each document is embedded whole"),
        ("NONE", "structure", "ok", "whole documents, chunked by the function by structure"),
        ("FIXED_SIZE", "structure", "warn", "chunks those chunks again"),
    ],
)
def test_the_data_sources_chunking_and_the_functions_must_agree(
    aws: Clients, strategy: str, chunking: str, status: str, expected: str
) -> None:
    with_chunking = data_source(chunking=strategy)
    healthy(
        aws,
        data_source=lambda: aws.stubs["bedrock-agent"].add_response("get_data_source", with_chunking),
        function=lambda: aws.stubs["lambda"].add_response(
            "get_function_configuration", function({"CHUNKING": chunking})
        ),
    )
    code, checks = doctor()
    found = by_name(checks)["chunking"]
    assert found["status"] == status and expected in found["detail"], found
    assert code == (1 if status == "fail" else 0)


@pytest.mark.parametrize(
    ("configuration", "expected"),
    [
        (function({"CONTEXT_MODE": "batch"}), "CONTEXT_MODE='batch'"),
        (function(timeout=120), "timeout 120 s"),
    ],
)
def test_bad_function_settings_fail(aws: Clients, configuration: dict[str, Any], expected: str) -> None:
    model = None if "CONTEXT_MODE" in str(configuration) else ...
    healthy(
        aws,
        function=lambda: aws.stubs["lambda"].add_response("get_function_configuration", configuration),
        **({"model": None, "quotas": None} if model is None else {}),
    )
    code, checks = doctor()
    assert code == 1 and expected in by_name(checks)["function settings"]["detail"]


def test_model_access_denied_is_explained(aws: Clients) -> None:
    healthy(
        aws,
        model=lambda: aws.stubs["bedrock-runtime"].add_client_error(
            "invoke_model",
            "AccessDeniedException",
            "Model use case details have not been submitted for this account.",
            403,
        ),
    )
    code, checks = doctor()
    check = by_name(checks)["model"]
    assert code == 1 and check["status"] == "fail" and "use case details" in check["detail"]
    assert "use-case form" in check["todo"] and "aws-marketplace:Subscribe" in check["todo"]
    assert "aws:RequestedRegion = unspecified" in check["todo"]


def test_a_model_not_in_the_table_warns_with_the_defaults_it_runs_with(aws: Clients) -> None:
    newer = "global.anthropic.claude-opus-5"
    healthy_with_model(aws, newer)
    code, checks = doctor()
    check = by_name(checks)["model"]
    assert code == 0, checks  # a warning, not a failure: the model answers
    assert check["status"] == "warn" and f"{newer} answers" in check["detail"]
    assert "not in the model table" in check["detail"] and "4,096-token cache minimum" in check["detail"]
    assert "MODEL_PRICES" in check["todo"] and "MIN_CACHE_TOKENS" in check["todo"]


def test_an_embedding_model_not_authorized_and_a_reranker_without_subscription_fail(aws: Clients) -> None:
    healthy(
        aws,
        embedding=lambda: aws.stubs["bedrock"].add_response(
            "get_foundation_model_availability",
            available("amazon.titan-embed-text-v2:0", authorizationStatus="NOT_AUTHORIZED"),
        ),
        reranker=lambda: aws.stubs["bedrock"].add_response(
            "get_foundation_model_availability",
            available("cohere.rerank-v3-5:0", entitlementAvailability="NOT_AVAILABLE"),
        ),
    )
    code, checks = doctor()
    assert code == 1
    assert "not authorized" in by_name(checks)["embedding model"]["detail"]
    assert (
        "Marketplace" in by_name(checks)["reranker"]["detail"]
        and "--no-rerank" in by_name(checks)["reranker"]["todo"]
    )


def test_quotas_below_what_max_concurrency_asks_warn_with_the_value_to_set(aws: Clients) -> None:
    healthy(
        aws,
        quotas=lambda: aws.stubs["service-quotas"].add_response("list_service_quotas", quotas(requests=60)),
    )
    code, checks = doctor()
    check = by_name(checks)["quotas"]
    assert code == 0 and check["status"] == "warn"  # a warning, not a failure
    assert "will be throttled" in check["detail"] and "set MAX_CONCURRENCY to 2" in check["todo"]


def test_a_shared_quota_is_checked_against_the_accounts(aws: Clients) -> None:
    shared = {
        "MODEL_QUOTA_TABLE": "t",
        "MODEL_REQUESTS_PER_MINUTE": "900",
        "MODEL_TOKENS_PER_MINUTE": "4000000",
    }
    healthy(
        aws, function=lambda: aws.stubs["lambda"].add_response("get_function_configuration", function(shared))
    )
    code, checks = doctor()
    check = by_name(checks)["quotas"]
    assert code == 0 and check["status"] == "ok", check
    assert "the invocations share 900 and 4,000,000 of them, an output token counted as 5" in check["detail"]
    healthy(
        aws,
        function=lambda: aws.stubs["lambda"].add_response("get_function_configuration", function(shared)),
        quotas=lambda: aws.stubs["service-quotas"].add_response("list_service_quotas", quotas(requests=600)),
    )
    code, checks = doctor()
    check = by_name(checks)["quotas"]
    assert code == 0 and check["status"] == "warn"
    assert "600 requests a minute; the shared quota gives 900" in check["detail"]
    assert "set modelRequestsPerMinute to 540 or less" in check["todo"]


def test_a_daily_token_quota_of_zero_fails(aws: Clients) -> None:
    healthy(
        aws, quotas=lambda: aws.stubs["service-quotas"].add_response("list_service_quotas", quotas(daily=0))
    )
    code, checks = doctor()
    assert code == 1 and "daily token quota" in by_name(checks)["tokens per day"]["detail"]
    healthy(
        aws,
        quotas=lambda: aws.stubs["service-quotas"].add_response(
            "list_service_quotas", quotas(cross_model_daily=0)
        ),
    )
    code, checks = doctor()
    assert code == 1 and "daily token quota" in by_name(checks)["tokens per day"]["detail"]


def test_a_lifecycle_that_expires_remembered_contexts_fails(aws: Clients) -> None:
    healthy(
        aws,
        lifecycle=lambda: aws.stubs["s3"].add_response(
            "get_bucket_lifecycle_configuration", lifecycle("aws/bedrock/knowledge_bases/", "contextual-kb/")
        ),
    )
    code, checks = doctor()
    assert code == 1 and "expires the remembered contexts" in by_name(checks)["intermediate bucket"]["detail"]


GLOBAL_TPM = "Global cross-region model inference tokens per minute for Anthropic Claude Haiku 4.5"
GLOBAL_RPM = "Global cross-region model inference requests per minute for Anthropic Claude Haiku 4.5"


def test_the_doctor_says_which_quotas_apply_to_the_model_and_its_scope_with_the_accounts_values(
    aws: Clients,
) -> None:
    healthy(
        aws,
        quotas=lambda: aws.stubs["service-quotas"].add_response(
            "list_service_quotas", quotas(tokens=4_000_000), {"ServiceCode": "bedrock"}
        ),
    )
    code, checks = doctor()
    found = by_name(checks)
    assert code == 0
    assert (
        found["tokens per minute"]["detail"]
        == f"haiku 4.5, global scope: {GLOBAL_TPM}: 4,000,000 tokens (applied)"
    )
    assert found["requests per minute"]["detail"] == (
        f"haiku 4.5, global scope: {GLOBAL_RPM}: 10,000 requests (applied)"
    )
    assert found["tokens per day"]["detail"].startswith(
        "Cross-Model Max Tokens Per Day: 700,000,000 tokens (applied), every model"
    )
    call = found["one call"]["detail"]
    assert "input + cache write + max_tokens 160 for a chunk's context" in call
    assert "would reserve 64,000" in call and "output x 5" in call and "cache reads are not settled" in call
    assert "4,000,000 tokens a minute" in found["quotas"]["detail"] and found["quotas"]["status"] == "ok"


def test_a_denied_service_quotas_read_falls_back_to_the_listed_defaults_and_says_why(aws: Clients) -> None:
    healthy(
        aws,
        quotas=lambda: aws.stubs["service-quotas"].add_client_error(
            "list_service_quotas",
            "AccessDeniedException",
            "User: arn:aws:iam::123456789012:user/dev is not authorized to perform: "
            "servicequotas:ListServiceQuotas",
            400,
        ),
    )
    code, checks = doctor()
    found = by_name(checks)
    assert code == 0, checks  # warnings: the defaults are said, not passed
    why = "(default, not read: ListServiceQuotas: AccessDeniedException)"
    assert found["tokens per minute"]["detail"].endswith(f"{GLOBAL_TPM}: 5,000,000 tokens {why}")
    assert found["requests per minute"]["detail"].endswith(f"{GLOBAL_RPM}: 10,000 requests {why}")
    assert found["tokens per day"]["detail"].startswith(
        f"Cross-Model Max Tokens Per Day: 700,000,000 tokens {why}"
    )
    for name in ("tokens per minute", "requests per minute", "tokens per day"):
        assert found[name]["status"] == "warn"
    assert "servicequotas:ListServiceQuotas" in found["tokens per minute"]["todo"]  # said once
    assert found["quotas"]["status"] == "warn" and "listed defaults" in found["quotas"]["detail"]


def test_a_quota_the_account_does_not_list_is_the_default_said_so(aws: Clients) -> None:
    healthy(
        aws,
        quotas=lambda: aws.stubs["service-quotas"].add_response(
            "list_service_quotas", {"Quotas": [{"QuotaName": "Knowledge bases per account", "Value": 100.0}]}
        ),
    )
    code, checks = doctor()
    found = by_name(checks)
    assert code == 0
    why = "(default, not read: no such quota in Service Quotas)"
    assert found["tokens per minute"]["detail"].endswith(f"5,000,000 tokens {why}")
    assert found["tokens per day"]["detail"].startswith(
        f"Cross-Model Max Tokens Per Day: 700,000,000 tokens {why}"
    )
    assert found["tokens per minute"]["status"] == "warn" and found["quotas"]["status"] == "warn"


def test_the_quota_listing_is_read_to_its_last_page(aws: Clients) -> None:
    def pages() -> None:
        first = {"Quotas": [{"QuotaName": "Knowledge bases per account", "Value": 100.0}], "NextToken": "p2"}
        aws.stubs["service-quotas"].add_response("list_service_quotas", first, {"ServiceCode": "bedrock"})
        aws.stubs["service-quotas"].add_response(
            "list_service_quotas", quotas(tokens=7_000_000), {"ServiceCode": "bedrock", "NextToken": "p2"}
        )

    healthy(aws, quotas=pages)
    code, checks = doctor()
    assert code == 0
    assert by_name(checks)["tokens per minute"]["detail"].endswith("7,000,000 tokens (applied)")
    aws.stubs["service-quotas"].assert_no_pending_responses()


def test_a_model_without_a_request_quota_says_none_listed(aws: Clients) -> None:
    opus = "global.anthropic.claude-opus-4-7"
    tpm = "Global cross-region model inference tokens per minute for Anthropic Claude Opus 4.7"
    healthy_with_model(
        aws,
        opus,
        quotas=lambda: aws.stubs["service-quotas"].add_response(
            "list_service_quotas", {"Quotas": [{"QuotaName": tpm, "Value": 6_000_000.0}]}
        ),
    )
    code, checks = doctor()
    found = by_name(checks)
    assert code == 0 and found["requests per minute"]["status"] == "ok"
    assert (
        "Opus 4.7: none listed (Bedrock enforces requests per minute only for some models since May 2026)"
        in (found["requests per minute"]["detail"])
    )
    assert found["quotas"]["status"] == "ok" and "requests" not in found["quotas"]["detail"]
    assert "would reserve 128,000" in found["one call"]["detail"]


def test_an_unread_request_quota_the_table_lacks_is_not_called_none_listed() -> None:
    found = model_quotas("global.anthropic.claude-opus-4-7", None, "ListServiceQuotas: AccessDeniedException")
    assert found.requests.value is None and found.requests.unread  # not known: the doctor says so
    assert found.tokens == Quota(
        "Global cross-region model inference tokens per minute for Anthropic Claude Opus 4.7",
        None,
        "ListServiceQuotas: AccessDeniedException",
    )
    assert found.tokens.said("tokens").endswith(
        "none listed; not read: ListServiceQuotas: AccessDeniedException"
    )


def test_the_quotas_of_each_scope_are_named_as_service_quotas_names_them() -> None:
    sonnet = "anthropic.claude-sonnet-4-6"
    found = model_quotas(sonnet, None, "denied")
    assert (found.scope, found.tokens.name, found.tokens.value) == (
        "in-region",
        "On-demand model inference tokens per minute for Anthropic Claude Sonnet 4.6",
        3_000_000,
    )
    assert found.requests.value == 5_000 and found.requests.unread == "denied"
    geo = model_quotas(f"us.{sonnet}", [], "")
    assert (
        geo.tokens.name.startswith("Cross-region model inference tokens per minute")
        and geo.tokens.value == 6e6
    )
    # "V1" and "InvokeModel" spellings are the same row; Sonnet 4 is not Sonnet 4.5
    listing = [
        {
            "QuotaName": "Cross-region InvokeModel tokens per minute for Anthropic Claude Sonnet 4.5 V1",
            "Value": 1.0,
        },
    ]
    assert model_quotas("us.anthropic.claude-sonnet-4-5-20250929-v1:0", listing).tokens == Quota(
        "Cross-region model inference tokens per minute for Anthropic Claude Sonnet 4.5", 1.0
    )
    assert model_quotas("us.anthropic.claude-sonnet-4-20250514-v1:0", listing).tokens.value is None


def test_the_quota_family_and_need_follow_the_profile_and_the_concurrency() -> None:
    assert quota_family(HAIKU) == "global cross-region model inference"
    assert quota_family("us.anthropic.claude-haiku-4-5-20251001-v1:0") == "cross-region model inference"
    assert quota_family("anthropic.claude-haiku-4-5-20251001-v1:0") == "on-demand model inference"
    assert quota_need(32) == (960, 2_880_000)


def simulated(decision: str) -> dict[str, Any]:
    return {
        "EvaluationResults": [{"EvalActionName": "s3:Any", "EvalDecision": decision}],
        "IsTruncated": False,
    }


@pytest.mark.parametrize("denied", [None, "s3:PutObject"])
def test_an_attached_stack_checks_the_knowledge_bases_own_role(aws: Clients, denied: str | None) -> None:
    """Attach mode: IAM's simulator says whether the existing KB's role may invoke the function and use the
    intermediate bucket (the stack's policy on it)."""
    healthy(
        aws,
        stack=lambda: aws.stubs["cloudformation"].add_response("describe_stacks", stack_outputs(**ATTACHED)),
    )
    for action, resource in (
        ("lambda:InvokeFunction", FUNCTION_ARN),
        ("s3:PutObject", f"arn:aws:s3:::{INTERMEDIATE}/aws/bedrock/knowledge_bases/probe"),
        ("s3:GetObject", f"arn:aws:s3:::{INTERMEDIATE}/aws/bedrock/knowledge_bases/probe"),
        ("s3:ListBucket", f"arn:aws:s3:::{INTERMEDIATE}"),
    ):
        aws.stubs["iam"].add_response(
            "simulate_principal_policy",
            simulated("implicitDeny" if action == denied else "allowed"),
            {"PolicySourceArn": KB_ROLE, "ActionNames": [action], "ResourceArns": [resource]},
        )
    code, checks = doctor()
    found = by_name(checks)["knowledge base role"]
    if denied is None:
        assert code == 0 and found["status"] == "ok", checks
        assert [c["name"] for c in checks][3] == "knowledge base role"
    else:
        assert code == 1 and found["status"] == "fail"
        assert "may not s3:PutObject on arn:aws:s3:::ckb-intermediate-bucket/" in found["detail"]
        assert "KnowledgeBaseAccess46FD1151" in found["todo"]
    aws.stubs["iam"].assert_no_pending_responses()


@pytest.mark.parametrize("why", ["denied", "no output"])
def test_settings_never_read_are_not_checked_on_defaults(aws: Clients, why: str) -> None:
    """lambda:GetFunctionConfiguration denied (or no output naming the function): the checks that judge the
    function's settings say "not checked" and why; none says OK on the defaults, and no model is called
    (the stubs fail the test on any call not answered here: invoke_model, list_service_quotas)."""
    if why == "denied":
        stack = lambda: aws.stubs["cloudformation"].add_response("describe_stacks", stack_outputs())  # noqa: E731
        function = lambda: aws.stubs["lambda"].add_client_error(  # noqa: E731
            "get_function_configuration",
            "AccessDeniedException",
            "User: arn:aws:iam::123456789012:user/dev is not authorized to perform: "
            "lambda:GetFunctionConfiguration",
            403,
        )
    else:
        outputs = stack_outputs()
        outputs["Stacks"][0]["Outputs"] = [
            o for o in outputs["Stacks"][0]["Outputs"] if o["OutputKey"] != "TransformFunctionName"
        ]
        stack = lambda: aws.stubs["cloudformation"].add_response("describe_stacks", outputs)  # noqa: E731
        function = None
    healthy(aws, stack=stack, function=function, model=None, quotas=None)
    code, checks = doctor()
    found = by_name(checks)
    assert code == (1 if why == "denied" else 0), checks
    for name in ("chunking", "model", "quotas", "intermediate bucket"):
        assert found[name]["status"] == "warn", found[name]
        assert "not checked: the function's settings were not read" in found[name]["detail"], found[name]
    if why == "denied":
        assert found["function settings"]["status"] == "fail"
        assert "(GetFunctionConfiguration: AccessDeniedException)" in found["model"]["detail"]
    for stub in aws.stubs.values():
        stub.assert_no_pending_responses()


def test_invalid_settings_are_not_judged_either(aws: Clients) -> None:
    healthy(
        aws,
        function=lambda: aws.stubs["lambda"].add_response(
            "get_function_configuration", function({"CONTEXT_MODE": "batch"})
        ),
        model=None,
        quotas=None,
    )
    code, checks = doctor()
    found = by_name(checks)
    assert code == 1 and found["function settings"]["status"] == "fail"
    for name in ("chunking", "model", "quotas", "intermediate bucket"):
        assert found[name]["status"] == "warn", found[name]
        assert "the function's settings are invalid" in found[name]["detail"], found[name]


TOPIC = f"arn:aws:sns:{REGION}:123456789012:ContextualKb-AlarmsTopic-abc"


def subscriptions(*arns: str) -> dict[str, Any]:
    return {
        "Subscriptions": [
            {"SubscriptionArn": arn, "Owner": "123456789012", "Protocol": "email",
             "Endpoint": "a@example.com", "TopicArn": TOPIC}
            for arn in arns
        ]
    }  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "status", "detail"),
    [
        (subscriptions(f"{TOPIC}:1111"), "ok", f"the alarms notify {TOPIC}: 1 confirmed subscription"),
        (
            subscriptions(f"{TOPIC}:1111", "PendingConfirmation"),
            "ok",
            f"the alarms notify {TOPIC}: 1 confirmed subscription, 1 waiting for its confirmation",
        ),
        (subscriptions(), "warn", f"nobody hears the alarms: {TOPIC} has no confirmed subscription"),
        (
            subscriptions("PendingConfirmation"),
            "warn",
            f"nobody hears the alarms: {TOPIC} has no confirmed subscription "
            "(1 waiting for its confirmation)",
        ),
    ],
)
def test_the_alarms_are_heard_only_once_a_subscription_is_confirmed(
    aws: Clients, answer: dict[str, Any], status: str, detail: str
) -> None:
    """The stack's AlarmTopicArn: an alarm reaches someone only through a confirmed subscription (SNS mails
    the address a link first)."""
    healthy(
        aws,
        stack=lambda: aws.stubs["cloudformation"].add_response(
            "describe_stacks", stack_outputs(AlarmTopicArn=TOPIC)
        ),
    )
    aws.stubs["sns"].add_response("list_subscriptions_by_topic", answer, {"TopicArn": TOPIC})
    code, checks = doctor()
    alarms = by_name(checks)["alarms"]
    assert (alarms["status"], alarms["detail"]) == (status, detail)
    assert code == 0  # a warning: the stack works, nobody is told
    if status == "warn":
        assert "alarmEmail" in alarms["todo"]
    aws.stubs["sns"].assert_no_pending_responses()


KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.mark.parametrize(
    ("line", "status", "detail", "todo"),
    [
        (
            f"ok: the key policy of {KEY} lets the function's role R use it",
            "ok",
            "lets the function's role",
            "",
        ),
        ("none: the data source has no KMS key", "ok", "no KMS key", ""),
        (
            f"add: the key policy of {KEY}: it lets no IAM policy grant kms:Decrypt and "
            "kms:GenerateDataKey (no statement for arn:aws:iam::123456789012:root) and does not name the "
            "role; add a statement allowing arn:aws:iam::123456789012:role/R kms:Decrypt and "
            "kms:GenerateDataKey",
            "warn",
            "lets no IAM policy grant",
            "add a statement allowing arn:aws:iam::123456789012:role/R",
        ),
        ("", "warn", "not checked", "deploy the stack again"),
    ],
)
def test_an_attached_stack_says_what_the_inspection_found_of_the_data_sources_key(
    aws: Clients, line: str, status: str, detail: str, todo: str
) -> None:
    """The deploy's inspection read the data source's key policy (DataSourceKeyCheck): doctor shows it, a
    gap as a warning with what to add (the key's use on the intermediate files is inferred)."""
    outputs = {**ATTACHED, **({"DataSourceKeyCheck": line} if line else {})}
    healthy(
        aws,
        stack=lambda: aws.stubs["cloudformation"].add_response("describe_stacks", stack_outputs(**outputs)),
    )
    for _ in range(4):
        aws.stubs["iam"].add_response("simulate_principal_policy", simulated("allowed"))
    code, checks = doctor()
    found = by_name(checks)["data source key"]
    assert code == 0 and found["status"] == status, found
    assert detail in found["detail"] and todo in found["todo"]
    assert [c["name"] for c in checks][4] == "data source key"


# --- issue 51: ingestion-log delivery, the workflow's Map width, the deferred path's assumptions ------------

KB_ARN = f"arn:aws:bedrock:{REGION}:123456789012:knowledge-base/{KB}"
GROUP = "/aws/vendedlogs/bedrock/knowledge-bases/ContextualKb"
OURS, CONSOLE = "ContextualKb-kb-1a2b3c", "kb-logs-from-the-console"


def delivery_sources(*names: str) -> dict[str, Any]:
    other = {"name": "cdn-logs", "resourceArns": ["arn:aws:cloudfront::123456789012:distribution/E1"],
             "logType": "ACCESS_LOGS"}  # fmt: skip
    kb = [{"name": n, "resourceArns": [KB_ARN], "logType": "APPLICATION_LOGS"} for n in names]
    return {"deliverySources": [other, *kb]}


@pytest.mark.parametrize(
    ("outputs", "sources", "delivered", "status", "detail"),
    [
        ({"IngestionLogGroupName": GROUP}, (OURS,), OURS, "ok", f"by delivery source {OURS} (the stack's)"),
        (
            {
                **ATTACHED,
                "IngestionLogGroupName": GROUP,
                "IngestionLogsCheck": f"use: a delivery from {CONSOLE}",
            },
            (CONSOLE,),
            CONSOLE,
            "ok",
            f"by delivery source {CONSOLE} (the Knowledge Base's own, used by the stack "
            "(ingestionLogSource))",
        ),
        (
            {**ATTACHED, "IngestionLogsCheck": "off: ingestionLogs=false"},
            (CONSOLE,),
            None,
            "ok",
            f"skipped by the stack (ingestionLogs=false): delivery source {CONSOLE} delivers them",
        ),
        (
            {**ATTACHED, "IngestionLogsCheck": "off: ingestionLogs=false"},
            (),
            None,
            "warn",
            "delivered nowhere",
        ),
        ({"IngestionLogGroupName": GROUP}, (), None, "fail", "no delivery source"),
        ({"IngestionLogGroupName": GROUP}, (OURS,), "", "fail", f"delivery source {OURS} delivers nothing"),
    ],
)
def test_doctor_says_which_delivery_source_carries_the_ingestion_logs(
    aws: Clients,
    outputs: dict[str, str],
    sources: tuple[str, ...],
    delivered: str | None,
    status: str,
    detail: str,
) -> None:
    """CloudWatch Logs allows one delivery source a resource and log type: the stack's own, the Knowledge
    Base's own used by the stack (attach, ingestionLogSource), or one it leaves alone (ingestionLogs=false).
    """
    healthy(
        aws,
        stack=lambda: aws.stubs["cloudformation"].add_response("describe_stacks", stack_outputs(**outputs)),
    )
    if "StackMode" in outputs:
        for _ in range(4):
            aws.stubs["iam"].add_response("simulate_principal_policy", simulated("allowed"))
    aws.stubs["bedrock-agent"].add_response("get_knowledge_base", knowledge_base(), {"knowledgeBaseId": KB})
    logs = aws.stubs["logs"]
    logs.add_response("describe_delivery_sources", delivery_sources(*sources), {})
    if sources and "IngestionLogGroupName" in outputs:
        destination = f"arn:aws:logs:{REGION}:123456789012:delivery-destination:ContextualKb-kb-logs"
        logs.add_response(
            "describe_deliveries",
            {
                "deliveries": [
                    {"id": "d1", "deliverySourceName": sources[0], "deliveryDestinationArn": destination}
                ]
            },
            {},
        )
        target = GROUP if delivered else "/aws/vendedlogs/bedrock/knowledge-bases/SomewhereElse"
        logs.add_response(
            "get_delivery_destination",
            {"deliveryDestination": {"name": "ContextualKb-kb-logs", "deliveryDestinationConfiguration": {
                "destinationResourceArn": f"arn:aws:logs:{REGION}:123456789012:log-group:{target}:*"}}},
            {"name": "ContextualKb-kb-logs"},
        )  # fmt: skip
    _, checks = doctor()
    found = by_name(checks)["ingestion logs"]
    assert found["status"] == status and detail in found["detail"], found
    logs.assert_no_pending_responses()


MACHINE = f"arn:aws:states:{REGION}:123456789012:stateMachine:Deferred"
BATCH_ROLE = "arn:aws:iam::123456789012:role/ContextualKb-BatchRole"


def machine(width: int) -> dict[str, Any]:
    definition = {"StartAt": "Look", "States": {
        "Look": {"Type": "Task", "Next": "PlanShards"},
        "PlanShards": {"Type": "Map", "MaxConcurrency": width, "End": True,
                       "ItemProcessor": {"StartAt": "S", "States": {"S": {"Type": "Pass", "End": True}}}},
    }}  # fmt: skip
    return {
        "stateMachineArn": MACHINE,
        "name": "Deferred",
        "definition": json.dumps(definition),
        "roleArn": "arn:aws:iam::123456789012:role/sm",
        "type": "STANDARD",
        "creationDate": "2026-11-23T00:00:00Z",
    }


def jobs(*summaries: tuple[str, str, str]) -> dict[str, Any]:
    return {"invocationJobSummaries": [
        {"jobArn": f"arn:aws:bedrock:{REGION}:123456789012:model-invocation-job/{n:012d}", "jobName": name,
         "modelId": HAIKU, "clientRequestToken": "t", "roleArn": role, "status": status,
         "message": message, "submitTime": "2026-11-23T00:00:00Z",
         "inputDataConfig": {"s3InputDataConfig": {"s3Uri": "s3://b/in/"}},
         "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": "s3://b/out/"}}}
        for n, (name, status, message, role) in enumerate(
            (s[0], s[1], s[2], BATCH_ROLE) for s in summaries
        )
    ]}  # fmt: skip


@pytest.mark.parametrize(
    ("width", "limits", "map_status", "answer", "batch_status", "batch_detail"),
    [
        (5, (10, 10), "ok", jobs(), "ok", "no batch job of this stack has ended yet"),
        (5, (10, 10), "ok", jobs(("ckb-r-1", "Completed", "")), "ok", "Completed: batch takes this profile"),
        (
            100,
            (10, 10),
            "fail",
            jobs(
                ("ckb-r-2", "Failed", "The provided model identifier is invalid."),
                ("ckb-r-1", "Completed", ""),
            ),
            "fail",
            "ckb-r-2 (global.anthropic.claude-haiku-4-5-20251001-v1:0) failed: The provided model identifier",
        ),
        (
            8,
            (10, 10),
            "warn",
            jobs(
                (
                    "ckb-r-1",
                    "Failed",
                    "User: arn:aws:sts::1:assumed-role/B is not authorized to perform: bedrock:InvokeModel",
                )
            ),
            "fail",
            "is not authorized",
        ),
    ],
)
def test_doctor_sizes_the_workflows_maps_and_tells_the_deferred_paths_assumptions(
    aws: Clients,
    width: int,
    limits: tuple[int, int],
    map_status: str,
    answer: dict[str, Any],
    batch_status: str,
    batch_detail: str,
) -> None:
    """The Map's children are Lambda invocations at once: against the account's unreserved concurrency (new
    accounts: reduced). The stack's latest ended batch job tells what no page settles: whether batch takes
    the global. profile, and whether the batch role's conditioned grant holds."""
    healthy(
        aws,
        stack=lambda: aws.stubs["cloudformation"].add_response(
            "describe_stacks",
            stack_outputs(ContextualizeStateMachineArn=MACHINE, BatchRoleArn=BATCH_ROLE),
        ),
    )
    aws.stubs["stepfunctions"].add_response(
        "describe_state_machine", machine(width), {"stateMachineArn": MACHINE}
    )
    aws.stubs["lambda"].add_response(
        "get_account_settings",
        {"AccountLimit": {"ConcurrentExecutions": limits[0], "UnreservedConcurrentExecutions": limits[1]}},
        {},
    )
    aws.stubs["bedrock"].add_response(
        "list_model_invocation_jobs",
        answer,
        {"nameContains": "ckb-", "sortBy": "CreationTime", "sortOrder": "Descending", "maxResults": 50},
    )
    _, checks = doctor()
    found = by_name(checks)
    assert found["workflow concurrency"]["status"] == map_status, found["workflow concurrency"]
    if map_status != "ok":
        assert "-c workflowMapConcurrency=5" in found["workflow concurrency"]["todo"]
    assert found["batch jobs"]["status"] == batch_status and batch_detail in found["batch jobs"]["detail"], (
        found
    )
    if batch_status == "fail":
        assert "docs/DEFERRED.md, Assumptions" in found["batch jobs"]["todo"]
    for stub in aws.stubs.values():
        stub.assert_no_pending_responses()


STEP = f"arn:aws:lambda:{REGION}:123456789012:function:ContextualKb-DeferredStep"


def machine_invoking_the_step(width: int) -> dict[str, Any]:
    """A Map whose children invoke the workflow's step, as the deployed one's do (LambdaInvoke with
    payload_response_only: the function's ARN is the task's Resource)."""
    definition = {"StartAt": "PlanShards", "States": {
        "PlanShards": {"Type": "Map", "MaxConcurrency": width, "End": True,
                       "ItemProcessor": {"StartAt": "S", "States": {
                           "S": {"Type": "Task", "Resource": STEP, "End": True}}}},
    }}  # fmt: skip
    return {**machine(width), "definition": json.dumps(definition)}


@pytest.mark.parametrize(
    ("width", "reserved", "limits", "status", "said", "todo"),
    [
        # the children run in the step's reserved pool: the account's unreserved concurrency is not theirs
        (99, 100, (1000, 150), "ok", "within the step's reserved concurrency of 100", ""),
        (100, 100, (1000, 900), "fail", "on the step's reserved concurrency of 100", "MapConcurrency=99"),
        # Lambda keeps 100 unreserved: a reservation that leaves fewer, or none to grow
        (9, 10, (1000, 95), "fail", "95 unreserved in the account, under the 100", "=5 or less"),
        (9, 10, (110, 100), "ok", "100 unreserved in the account, Lambda's floor", ""),
        # without a reservation the children share the account's unreserved concurrency, as before
        (100, None, (1000, 150), "warn", "150 unreserved", "workflowMapConcurrency=75"),
    ],
)
def test_doctor_sizes_the_maps_against_the_steps_reserved_concurrency_when_it_has_one(
    aws: Clients,
    width: int,
    reserved: int | None,
    limits: tuple[int, int],
    status: str,
    said: str,
    todo: str,
) -> None:
    healthy(
        aws,
        stack=lambda: aws.stubs["cloudformation"].add_response(
            "describe_stacks", stack_outputs(ContextualizeStateMachineArn=MACHINE)
        ),
    )
    aws.stubs["stepfunctions"].add_response(
        "describe_state_machine", machine_invoking_the_step(width), {"stateMachineArn": MACHINE}
    )
    aws.stubs["lambda"].add_response(
        "get_function_concurrency",
        {"ReservedConcurrentExecutions": reserved} if reserved is not None else {},
        {"FunctionName": STEP},
    )
    aws.stubs["lambda"].add_response(
        "get_account_settings",
        {"AccountLimit": {"ConcurrentExecutions": limits[0], "UnreservedConcurrentExecutions": limits[1]}},
        {},
    )
    _, checks = doctor()
    found = by_name(checks)["workflow concurrency"]
    assert found["status"] == status and said in found["detail"], found
    assert todo in found["todo"], found
    assert len(found["detail"]) + len(found["todo"]) < 400 and "\n" not in found["detail"]
    for stub in aws.stubs.values():
        stub.assert_no_pending_responses()


def test_a_shared_rpm_the_function_ignores_is_said_and_not_checked() -> None:
    """Issue 52: modelRequestsPerMinute for a model AWS lists no RPM for (Opus 4.7) is ignored by the function
    (shared_quota.unlisted_rpm); doctor does not judge it against the account's and says to remove it."""
    from contextual_kb.query.doctor import _shared_quota
    from contextual_kb.runtime.settings import Settings

    settings = Settings.model_validate(
        {"MODEL_ID": "global.anthropic.claude-opus-4-7", "MODEL_QUOTA_TABLE": "t",
         "MODEL_REQUESTS_PER_MINUTE": "900", "MODEL_TOKENS_PER_MINUTE": "400000"}
    )  # fmt: skip
    check = _shared_quota(settings, "Opus 4.7", requests=100, tokens=2_000_000)
    assert check.status == "warn" and "900 requests" not in check.detail
    assert (
        "MODEL_REQUESTS_PER_MINUTE" not in check.detail
        and "modelRequestsPerMinute=900 ignored" in check.detail
    )
    assert "remove modelRequestsPerMinute" in check.todo
