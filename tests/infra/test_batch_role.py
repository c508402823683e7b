"""The batch inference service role: Bedrock's jobs of this account only, the batch prefix only (listing
the bucket, as AWS's page grants it), the
configured model through its profile only (no model *); its inputs and outputs expire, pending documents
do not; CONTEXT_DEFER from the stack's context."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.conftest import NO_BUNDLING, STORES, as_list, flat, resources


def batch_role(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, r) for k, r in resources(template, "AWS::IAM::Role").items() if k.startswith("BatchRole")]
    return found


@pytest.mark.parametrize("store", STORES)
def test_only_this_accounts_batch_jobs_may_assume_it(synthesized: dict[str, Any], store: str) -> None:
    _, role = batch_role(synthesized[store]["json"])
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "bedrock.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert ":model-invocation-job/*" in flat(statement["Condition"]["ArnLike"]["aws:SourceArn"])


@pytest.mark.parametrize("store", STORES)
def test_it_reads_and_writes_the_batch_prefix_and_invokes_the_model_through_its_profile(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    role_id, _ = batch_role(template)
    (policy,) = [
        r["Properties"]
        for r in resources(template, "AWS::IAM::Policy").values()
        if flat(r["Properties"]["Roles"]).count(role_id)
    ]
    statements = policy["PolicyDocument"]["Statement"]
    s3 = [s for s in statements if any(a.startswith("s3:") for a in as_list(s["Action"]))]
    objects = next(s for s in s3 if "s3:GetObject" in as_list(s["Action"]))
    assert sorted(as_list(objects["Action"])) == ["s3:GetObject", "s3:PutObject"]
    assert flat(objects["Resource"]).endswith('/contextual-kb/batch/*"]]}')
    listing = next(s for s in s3 if "s3:ListBucket" in as_list(s["Action"]))
    assert "Condition" not in listing and "/" not in flat(listing["Resource"])  # the bucket, as AWS grants it
    invoke = [s for s in statements if "bedrock:InvokeModel" in as_list(s["Action"])]
    assert invoke and all(s["Resource"] != "*" for s in invoke)
    assert "inference-profile/global.anthropic.claude-haiku-4-5" in flat(invoke)
    wildcard_regions = [s for s in invoke if "bedrock:*::foundation-model" in flat(s["Resource"])]
    assert all("bedrock:InferenceProfileArn" in flat(s["Condition"]) for s in wildcard_regions)
    assert "BatchRoleArn" in template["Outputs"]


@pytest.mark.parametrize("store", STORES)
def test_batch_files_expire_and_pending_documents_and_remembered_contexts_stay(
    synthesized: dict[str, Any], store: str
) -> None:
    template = synthesized[store]["json"]
    (bucket,) = [r for k, r in resources(template, "AWS::S3::Bucket").items() if "Intermediate" in k]
    prefixes = {r["Prefix"] for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert "contextual-kb/batch/" in prefixes
    assert not any(p.startswith(("contextual-kb/pending", "contextual-kb/contexts")) for p in prefixes)


def test_batch_files_outlive_a_job_however_short_the_intermediate_files_live() -> None:
    from aws_cdk.assertions import Template

    from stacks.app_builder import build_app

    _, stack = build_app({**NO_BUNDLING, "intermediateExpirationDays": 1})
    (bucket,) = [
        r
        for k, r in resources(Template.from_stack(stack).to_json(), "AWS::S3::Bucket").items()
        if "Intermediate" in k
    ]
    days = {
        r["Prefix"]: r["ExpirationInDays"] for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    assert days.pop("contextual-kb/batch/") == 7  # a job may run 24 hours after time queued; the run resumes
    assert set(days.values()) == {1}


def test_context_defer_is_a_stack_setting_and_one_place_only() -> None:
    from contextual_kb.cdk.config import ConfigError, load

    assert load({"contextDefer": "always"}).function_defer == {"CONTEXT_DEFER": "always"}
    assert load({}).function_defer == {}
    with pytest.raises(ConfigError, match="set one of them"):
        load({"contextDefer": "always", "functionEnvironment": {"CONTEXT_DEFER": "never"}})
    with pytest.raises(ConfigError, match="CONTEXT_DEFER=always with CONTEXT_MEMORY_PREFIX empty"):
        load({"contextDefer": "always", "functionEnvironment": {"CONTEXT_MEMORY_PREFIX": ""}})


def test_the_shared_quota_is_set_by_its_stack_settings_only() -> None:
    """modelRequestsPerMinute / modelTokensPerMinute make the table and set the function; the function's own
    variables for it are refused in functionEnvironment (the stack names the table), in one line."""
    from contextual_kb.cdk.config import ConfigError, load

    assert load({}).shares_quota is False
    config = load({"modelTokensPerMinute": 400_000})
    assert config.shares_quota and config.function_quota == {
        "MODEL_REQUESTS_PER_MINUTE": "0",
        "MODEL_TOKENS_PER_MINUTE": "400000",
    }
    with pytest.raises(ConfigError, match=r"functionEnvironment\.MODEL_QUOTA_TABLE: the shared quota is set"):
        load({"functionEnvironment": {"MODEL_QUOTA_TABLE": "mine"}})
    with pytest.raises(ConfigError, match="modelRequestsPerMinute"):
        load({"modelRequestsPerMinute": 0})
    # the burndown rate: with the quota only, and only through its own key (a string from -c too)
    burning = load({"modelTokensPerMinute": 400_000, "modelOutputBurndown": "5"})
    assert burning.function_quota["MODEL_OUTPUT_BURNDOWN"] == "5"
    with pytest.raises(ConfigError, match="modelOutputBurndown counts only in a shared quota"):
        load({"modelOutputBurndown": 5})
    with pytest.raises(ConfigError, match=r"functionEnvironment\.MODEL_OUTPUT_BURNDOWN"):
        load({"modelTokensPerMinute": 400_000, "functionEnvironment": {"MODEL_OUTPUT_BURNDOWN": "5"}})
    # Opus 4.8 burns 15 (issue 52); more is refused
    fifteen = load({"modelTokensPerMinute": 1, "modelOutputBurndown": 15})
    assert fifteen.function_quota["MODEL_OUTPUT_BURNDOWN"] == "15"
    with pytest.raises(ConfigError, match="modelOutputBurndown"):
        load({"modelTokensPerMinute": 1, "modelOutputBurndown": 16})


def test_an_rpm_for_a_model_aws_lists_none_for_is_ignored_not_refused() -> None:
    """pricing.listed_rpm None (Opus 4.7 lists none; Haiku 4.5 lists 10,000 through its global profile):
    modelRequestsPerMinute is ignored with a warning for synth, and alone it shares no quota."""
    from contextual_kb.cdk.config import load

    opus = {"functionEnvironment": {"MODEL_ID": "global.anthropic.claude-opus-4-7"}}
    both = load({**opus, "modelRequestsPerMinute": 500, "modelTokensPerMinute": 400_000})
    assert both.unlisted_rpm.startswith("modelRequestsPerMinute=500 ignored: AWS lists no requests-per")
    assert both.function_quota["MODEL_REQUESTS_PER_MINUTE"] == "0" and both.shares_quota
    alone = load({**opus, "modelRequestsPerMinute": 500})
    assert not alone.shares_quota and "no quota is shared" in alone.unlisted_rpm
    haiku = load({"modelRequestsPerMinute": 500})  # the default model, global Haiku 4.5: AWS lists RPM
    assert haiku.unlisted_rpm == "" and haiku.function_quota["MODEL_REQUESTS_PER_MINUTE"] == "500"
