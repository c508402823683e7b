"""Every variant a user can choose synthesizes, passes cdk-nag (a finding fails synth) and cfn-lint: the
vector store x a KMS key x the chunking strategy, and a 32-character stack name (whose derived names once
broke OpenSearch Serverless's 32-character policy names, cfn-lint E3031)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra.conftest import as_list, cfn_lint, resources, synth_variants

CHUNKINGS = ("fixed_size", "hierarchical", "semantic", "default", "none")
VARIANTS = [
    {"vectorStore": store, "kmsKey": kms, "chunking": chunking}
    for store in ("opensearch", "s3vectors")
    for kms in (False, True)
    for chunking in CHUNKINGS
    if not (store == "s3vectors" and chunking == "hierarchical")  # refused at synth (test_stack.py)
] + [
    {"vectorStore": "opensearch", "stackName": "ContextualKb-Team-Payments-Prod1"},
    {"vectorStore": "s3vectors", "stackName": "ContextualKb-Team-Payments-Prod1"},
]
QUOTA = {
    "vectorStore": "opensearch",
    "modelRequestsPerMinute": 2000,
    "modelTokensPerMinute": 3_600_000,
    "modelOutputBurndown": 5,
}


def label(variant: dict[str, Any]) -> str:
    return "-".join(f"{k}={v}" for k, v in variant.items())


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    return synth_variants(tmp_path_factory.mktemp("variants"), {label(v): v for v in [*VARIANTS, QUOTA]})


def test_every_variant_passes_cfn_lint(templates: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    result = cfn_lint([path for path, _ in templates.values()])
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_32_character_stack_name_gives_names_within_their_limits(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    _, template = templates[label(VARIANTS[-2])]
    names = [
        r["Properties"]["Name"]
        for kind in ("AWS::OpenSearchServerless::SecurityPolicy", "AWS::OpenSearchServerless::AccessPolicy")
        for r in resources(template, kind).values()
    ]
    assert len(names) == 3 and all(len(n) <= 32 for n in names), names
    (collection,) = resources(template, "AWS::OpenSearchServerless::Collection").values()
    assert len(collection["Properties"]["Name"]) <= 28
    (kb,) = resources(template, "AWS::Bedrock::KnowledgeBase").values()
    assert kb["Properties"]["Name"].startswith("ContextualKb-Team-Payments-Prod1-kb-")


def test_the_knowledge_base_name_changes_with_what_replaces_it(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """A new vector store or index replaces the Knowledge Base: its name changes with them, so the new one
    never collides with the old while both exist. A KMS key switched on or off is one (the vector bucket's
    encryption is create-only; the collection's name carries its key: tests/infra/test_replacements.py);
    another chunking does not rename it."""

    def kb_name(variant: dict[str, Any]) -> str:
        (kb,) = resources(templates[label(variant)][1], "AWS::Bedrock::KnowledgeBase").values()
        return str(kb["Properties"]["Name"])

    by_store: dict[tuple[str, bool], set[str]] = {}
    for variant in VARIANTS[:-2]:
        by_store.setdefault((variant["vectorStore"], variant["kmsKey"]), set()).add(kb_name(variant))
    assert all(len(names) == 1 for names in by_store.values())
    assert len(set.union(*by_store.values())) == len(by_store) == 4


def test_the_data_source_name_changes_with_its_chunking_and_its_knowledge_base(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """A data source's chunking and knowledge base cannot change: CloudFormation replaces the data source,
    creating the new one first, so its name must change with either (and with nothing else)."""

    def source_name(variant: dict[str, Any]) -> str:
        (source,) = resources(templates[label(variant)][1], "AWS::Bedrock::DataSource").values()
        return str(source["Properties"]["Name"])

    names = {(v["vectorStore"], v["kmsKey"], v["chunking"]): source_name(v) for v in VARIANTS[:-2]}
    assert len(set(names.values())) == len(names)
    # A setting of the function (the shared quota here) renames nothing.
    (quota_source,) = resources(templates[label(QUOTA)][1], "AWS::Bedrock::DataSource").values()
    assert quota_source["Properties"]["Name"] == names[("opensearch", False, "fixed_size")]


def test_chunking_none_hands_whole_documents_to_the_function_that_chunks_them(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    template = templates[label({"vectorStore": "s3vectors", "kmsKey": False, "chunking": "none"})][1]
    (source,) = resources(template, "AWS::Bedrock::DataSource").values()
    ingestion = source["Properties"]["VectorIngestionConfiguration"]
    assert ingestion["ChunkingConfiguration"] == {"ChunkingStrategy": "NONE"}
    (function,) = [
        f for f in resources(template, "AWS::Lambda::Function").values() if "POST_CHUNKING" in str(f)
    ]
    variables = function["Properties"]["Environment"]["Variables"]
    assert {k: variables[k] for k in ("CHUNKING", "CHUNK_MAX_TOKENS", "CHUNK_OVERLAP_TOKENS")} == {
        "CHUNKING": "structure",
        "CHUNK_MAX_TOKENS": "300",
        "CHUNK_OVERLAP_TOKENS": "0",
    }


def test_a_shared_model_quota_gets_its_table_and_the_function_its_settings(
    templates: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """modelRequestsPerMinute and modelTokensPerMinute (cdk.json context, or -c): one on-demand table, the
    function's MODEL_QUOTA_TABLE and quota, and GetItem and UpdateItem on that table alone. Without them
    (every other variant): no table."""
    template = templates[label(QUOTA)][1]
    ((table_id, table),) = resources(template, "AWS::DynamoDB::Table").items()
    assert table["Properties"]["BillingMode"] == "PAY_PER_REQUEST"
    assert table["Properties"]["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table["DeletionPolicy"] == "Delete"  # one number, gone with the stack
    (function,) = [
        f for f in resources(template, "AWS::Lambda::Function").values() if "POST_CHUNKING" in str(f)
    ]
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["MODEL_QUOTA_TABLE"] == {"Ref": table_id}
    quota = (variables["MODEL_REQUESTS_PER_MINUTE"], variables["MODEL_TOKENS_PER_MINUTE"])
    assert quota == ("2000", "3600000") and variables["MODEL_OUTPUT_BURNDOWN"] == "5"
    statements = [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if any("dynamodb:" in action for action in as_list(statement["Action"]))
    ]
    assert statements == [
        {
            "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [table_id, "Arn"]},
        }
    ]
    # calls sent without turns (the table deleted or denied) raise an alarm; the dashboard shows the waits
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    (unusable,) = [a for a in alarms if a["MetricName"] == "AttemptsWithoutQuotaTurns"]
    assert (unusable["Namespace"], unusable["Statistic"], unusable["Threshold"]) == ("ContextualKB", "Sum", 1)
    # the dashboard's "Shared model quota" graph: the waits, what the turns booked and gave back, the resets
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for name in ("QuotaWaitSeconds", "QuotaBookedSeconds", "QuotaGivenBackSeconds", "QuotaResets"):
        assert name in body, name
    others = [t for name, (_, t) in templates.items() if name != label(QUOTA)]
    assert all(not resources(t, "AWS::DynamoDB::Table") for t in others)
    assert all("AttemptsWithoutQuotaTurns" not in json.dumps(t) for t in others)
