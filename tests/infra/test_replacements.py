"""Ordinary changes a user makes to a deployed stack, played on the synthesized before/after templates
against the CloudFormation schemas' create-only properties (tests/infra/replacement.py): tags added to the
app, a KMS key switched on, standby replicas off, another chunking, another embedding size. None may replace
a resource that keeps its custom name (CloudFormation refuses that update), and a tag never replaces
anything (``Tags`` is create-only on ``AWS::OpenSearchServerless::Collection``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.infra.conftest import resources, synth_variants
from tests.infra.replacement import create_only, name_collisions, replaced

OPENSEARCH = {"vectorStore": "opensearch", "kmsKey": False, "chunking": "fixed_size"}
S3VECTORS = {"vectorStore": "s3vectors", "kmsKey": False, "chunking": "fixed_size"}
TAGS = {"team": "search", "cost-center": "1234"}
# (before, after): contexts as tests/infra/test_variants.py and test_updates_and_teardown.py name them,
# so that the session synthesizes each once.
CHANGES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "kms key on (opensearch)": (OPENSEARCH, {**OPENSEARCH, "kmsKey": True}),
    "kms key on (s3vectors)": (S3VECTORS, {**S3VECTORS, "kmsKey": True}),
    "kms key off (opensearch)": ({**OPENSEARCH, "kmsKey": True}, OPENSEARCH),
    "standby replicas off": (
        {"vectorStore": "opensearch", "kmsKey": True},
        {"vectorStore": "opensearch", "kmsKey": True, "opensearchStandbyReplicas": False},
    ),
    "chunking semantic": (OPENSEARCH, {**OPENSEARCH, "chunking": "semantic"}),
    "chunking none (s3vectors)": (S3VECTORS, {**S3VECTORS, "chunking": "none"}),
    "embedding size 512 (opensearch)": (OPENSEARCH, {**OPENSEARCH, "embeddingDimension": 512}),
    "embedding size 512 (s3vectors)": (S3VECTORS, {**S3VECTORS, "embeddingDimension": 512}),
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("replacements")
    out = {}
    for change, (before, after) in CHANGES.items():
        made = synth_variants(folder, {"before": before, "after": after})
        out[change] = (made["before"][1], made["after"][1])
    return out


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("tagged")
    plain = synth_variants(folder, {"opensearch": OPENSEARCH, "s3vectors": S3VECTORS})
    with_tags = synth_variants(folder, {"opensearch": OPENSEARCH, "s3vectors": S3VECTORS}, tags=TAGS)
    return {store: (plain[store][1], with_tags[store][1]) for store in plain}


def test_the_simulation_finds_a_tag_on_a_custom_named_collection() -> None:
    """The check itself can fail: a tag on a named collection is a create-only change under the same name."""
    before = {
        "Resources": {
            "Collection": {"Type": "AWS::OpenSearchServerless::Collection", "Properties": {"Name": "kb"}},
            "KnowledgeBase": {
                "Type": "AWS::Bedrock::KnowledgeBase",
                "Properties": {
                    "Name": "kb",
                    "StorageConfiguration": {"Arn": {"Fn::GetAtt": ["Collection", "Arn"]}},
                },
            },
        }
    }
    after = copy.deepcopy(before)
    after["Resources"]["Collection"]["Properties"]["Tags"] = [{"Key": "team", "Value": "search"}]
    assert ("Tags",) in create_only("AWS::OpenSearchServerless::Collection")
    assert replaced(before, after) == {
        "Collection": "Tags changed",
        "KnowledgeBase": "StorageConfiguration refers to replaced Collection",
    }
    assert set(name_collisions(before, after)) == {"Collection", "KnowledgeBase"}


@pytest.mark.parametrize("change", CHANGES)
def test_no_change_replaces_a_resource_under_its_own_name(
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]], change: str
) -> None:
    before, after = pairs[change]
    assert name_collisions(before, after) == {}, change


def test_a_kms_key_switched_on_gives_a_new_collection_and_knowledge_base(
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """An encryption policy assigns its key to collections created after it (serverless-encryption.html):
    the collection made without the key would keep AWS's, so the key's switch names a new collection, and
    the Knowledge Base on it is new too; AWS's default (no key) keeps the name stacks had."""
    before, after = pairs["kms key on (opensearch)"]
    names = [
        next(iter(resources(t, "AWS::OpenSearchServerless::Collection").values()))["Properties"]["Name"]
        for t in (before, after)
    ]
    assert names[0] == "contextualkb-kb" and names[1] != names[0]
    why = replaced(before, after)
    kinds = {after["Resources"][k]["Type"] for k in why}
    assert "AWS::Bedrock::KnowledgeBase" in kinds and "AWS::Bedrock::DataSource" in kinds


@pytest.mark.parametrize("store", ["opensearch", "s3vectors"])
def test_tags_added_to_the_app_replace_nothing_and_stay_off_the_collection(
    tagged: dict[str, tuple[dict[str, Any], dict[str, Any]]], store: str
) -> None:
    """``Tags.of(app).add(...)`` after a deploy: every taggable resource takes the tags in place; the
    collection, whose ``Tags`` CloudFormation can only set at creation, takes none in its template (the same
    before and after) and gets them through TagResource."""
    before, after = tagged[store]
    assert replaced(before, after) == {}
    assert name_collisions(before, after) == {}
    for kind in ("AWS::Bedrock::KnowledgeBase", "AWS::Lambda::Function", "AWS::S3::Bucket"):
        for resource in resources(after, kind).values():
            tags = resource["Properties"]["Tags"]
            pairs = tags.items() if isinstance(tags, dict) else ((t["Key"], t["Value"]) for t in tags)
            assert TAGS.items() <= dict(pairs).items(), kind
    for logical, resource in resources(after, "AWS::OpenSearchServerless::Collection").items():
        assert "Tags" not in resource["Properties"]
        assert resource == before["Resources"][logical]
        # They reach it through TagResource (Custom::CollectionTags, updated in place), with its ARN.
        (tagging,) = resources(after, "Custom::CollectionTags").values()
        (untagged,) = resources(before, "Custom::CollectionTags").values()
        assert tagging["Properties"]["CollectionArn"] == {"Fn::GetAtt": [logical, "Arn"]}
        assert {t["key"]: t["value"] for t in tagging["Properties"]["Tags"]} == TAGS
        assert "Tags" not in untagged["Properties"]
        role = next(k for k in resources(after, "AWS::IAM::Policy") if k.startswith("VectorStoreIndexRole"))
        statements = after["Resources"][role]["Properties"]["PolicyDocument"]["Statement"]
        (tag_statement,) = [s for s in statements if "aoss:TagResource" in s["Action"]]
        assert {"aoss:TagResource", "aoss:UntagResource"} <= set(tag_statement["Action"])
        assert tag_statement["Resource"] == {"Fn::GetAtt": [logical, "Arn"]}  # this collection only
