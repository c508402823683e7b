"""Updates and teardown as CloudFormation runs them: a create-only change gets a new name (CloudFormation
cannot replace a custom-named resource under its name), the index follows a new collection, and destroy keeps
the buckets, their policies and the key (as on a failed first deploy's rollback) while the log groups go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.infra.conftest import flat, resources, synth_variants

ATTACH = {
    "knowledgeBaseId": "KBEXIST001",
    "dataSourceId": "DSEXIST001",
    "knowledgeBaseRoleArn": "arn:aws:iam::123456789012:role/service-role/kb-role",
}
VARIANTS: dict[str, dict[str, Any]] = {
    "standby": {"vectorStore": "opensearch", "kmsKey": True},
    "no-standby": {"vectorStore": "opensearch", "kmsKey": True, "opensearchStandbyReplicas": False},
    "s3vectors": {"vectorStore": "s3vectors", "kmsKey": True},
    "attach": ATTACH,
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    made = synth_variants(tmp_path_factory.mktemp("teardown"), VARIANTS)
    return {name: template for name, (_, template) in made.items()}


def _only(template: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = resources(template, kind).values()
    return found


def test_standby_replicas_changed_gives_a_new_collection_and_a_new_knowledge_base(
    templates: dict[str, dict[str, Any]],
) -> None:
    """StandbyReplicas is create-only: the collection is replaced, so its name changes (and the Knowledge
    Base's, whose storage configuration then changes); AWS's default keeps the name stacks had before (with
    a customer key here: ``-cmk``, tests/infra/test_replacements.py)."""
    with_standby = _only(templates["standby"], "AWS::OpenSearchServerless::Collection")["Properties"]
    without = _only(templates["no-standby"], "AWS::OpenSearchServerless::Collection")["Properties"]
    assert with_standby["Name"] == "contextualkb-kb-cmk" and with_standby["StandbyReplicas"] == "ENABLED"
    assert without["Name"] != with_standby["Name"] and without["StandbyReplicas"] == "DISABLED"
    kb_names = {
        _only(templates[n], "AWS::Bedrock::KnowledgeBase")["Properties"]["Name"]
        for n in ("standby", "no-standby")
    }
    assert len(kb_names) == 2
    # Every policy covers both names: while the new collection is made and the old one deleted, each is
    # covered (the new one must be, to be created at all).
    for name in ("standby", "no-standby"):
        template = templates[name]
        for kind in ("AWS::OpenSearchServerless::SecurityPolicy", "AWS::OpenSearchServerless::AccessPolicy"):
            for policy in resources(template, kind).values():
                text = flat(policy["Properties"]["Policy"])
                assert "contextualkb-kb" in text and without["Name"] in text, (name, kind)
    # The index is made on whichever collection's endpoint the template names.
    index = _only(templates["no-standby"], "Custom::OpenSearchIndex")["Properties"]
    assert "CollectionEndpoint" in flat(index["Endpoint"])


def test_destroy_keeps_buckets_their_policies_and_the_key_and_deletes_log_groups(
    templates: dict[str, dict[str, Any]],
) -> None:
    for name, template in templates.items():
        kept = {
            kind: [r.get("DeletionPolicy") for r in resources(template, kind).values()]
            for kind in ("AWS::S3::Bucket", "AWS::S3::BucketPolicy", "AWS::KMS::Key")
        }
        assert kept["AWS::S3::Bucket"] and set(kept["AWS::S3::Bucket"]) == {"Retain"}, name
        # A kept bucket keeps refusing plain HTTP and taking access logs.
        assert len(kept["AWS::S3::BucketPolicy"]) == len(kept["AWS::S3::Bucket"]), name
        assert set(kept["AWS::S3::BucketPolicy"]) == {"Retain"}, name
        if name != "attach":
            assert kept["AWS::KMS::Key"] == ["Retain"], name
        groups = resources(template, "AWS::Logs::LogGroup")
        # the function's, the index's or attach resource's and its Provider's; the Knowledge Base's own logs
        assert len(groups) == (1 if name == "s3vectors" else 3) + 1, name
        assert {g.get("DeletionPolicy") for g in groups.values()} == {"Delete"}, name
        assert {g.get("UpdateReplacePolicy") for g in groups.values()} == {"Delete"}, name


def test_kept_resources_are_the_ones_the_readme_lists() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### What destroy keeps", 1)[1].split("\n## ", 1)[0]
    for kept in ("source bucket", "intermediate bucket", "access-log bucket", "bucket policies", "KMS key"):
        assert kept in section, kept
    assert "log groups" in section
