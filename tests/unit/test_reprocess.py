"""``ckb sync --reprocess``'s pure parts: which documents, and the metadata file that marks each."""

from __future__ import annotations

import json

import pytest

from contextual_kb.query.reprocess import UnsupportedError, carried, check_store, marked_metadata, plan, scope


def s3_source(*prefixes: str) -> dict:
    configuration: dict = {"bucketArn": "arn:aws:s3:::team-docs"}
    if prefixes:
        configuration["inclusionPrefixes"] = list(prefixes)
    return {"dataSourceId": "DS", "dataSourceConfiguration": {"type": "S3", "s3Configuration": configuration}}


def test_the_scope_is_the_data_sources_prefixes_narrowed_to_the_one_asked() -> None:
    assert scope(s3_source(), "") == ("team-docs", [""])
    assert scope(s3_source("runbooks/", "specs/"), "") == ("team-docs", ["runbooks/", "specs/"])
    assert scope(s3_source("runbooks/", "specs/"), "runbooks/payments/") == (
        "team-docs",
        ["runbooks/payments/"],
    )
    assert scope(s3_source("runbooks/a", "runbooks/b"), "runbooks/") == (
        "team-docs",
        ["runbooks/a", "runbooks/b"],
    )
    assert scope(s3_source("runbooks/"), "other/") == ("team-docs", [])  # the KB would not ingest those


def test_a_data_source_that_is_not_s3_is_told_what_to_do() -> None:
    web = {"dataSourceId": "DS", "dataSourceConfiguration": {"type": "WEB"}}
    with pytest.raises(
        UnsupportedError, match="of type WEB: --reprocess marks S3 documents only; for this type"
    ):
        scope(web, "")


def test_a_document_without_metadata_gets_a_file_with_the_stamp_alone() -> None:
    body, why = marked_metadata(None, "2026-11-23T17:00:00Z")
    assert why == "" and json.loads(body) == {
        "metadataAttributes": {"ckb_reprocessed": "2026-11-23T17:00:00Z"}
    }


def test_the_users_attributes_are_kept_in_their_own_format() -> None:
    plain = json.dumps({"metadataAttributes": {"team": "payments", "year": 2026}}).encode()
    body, _ = marked_metadata(plain, "T1")
    assert json.loads(body) == {
        "metadataAttributes": {"team": "payments", "year": 2026, "ckb_reprocessed": "T1"}
    }
    typed_attribute = {"value": {"type": "STRING", "stringValue": "payments"}, "includeForEmbedding": True}
    typed = json.dumps({"metadataAttributes": {"team": typed_attribute}}).encode()
    body, _ = marked_metadata(typed, "T2")
    assert json.loads(body)["metadataAttributes"] == {
        "team": typed_attribute,
        "ckb_reprocessed": {"value": {"type": "STRING", "stringValue": "T2"}, "includeForEmbedding": False},
    }
    again, _ = marked_metadata(body, "T3")  # a second run replaces the stamp, adds nothing
    assert json.loads(again)["metadataAttributes"]["ckb_reprocessed"]["value"]["stringValue"] == "T3"


@pytest.mark.parametrize(
    ("existing", "why"),
    [
        (b"{not json", "not JSON"),
        (b'{"metadataAttributes": []}', "no metadataAttributes object"),
        (json.dumps({"metadataAttributes": {"k": "v" * 10_230}}).encode(), "10,240-byte limit"),
    ],
)
def test_a_metadata_file_that_cannot_be_marked_is_left_alone_with_the_reason(
    existing: bytes, why: str
) -> None:
    body, reason = marked_metadata(existing, "T")
    assert body is None and why in reason


def aurora_kb(custom_field: str | None = None) -> dict:
    mapping = {"primaryKeyField": "id", "vectorField": "v", "textField": "t", "metadataField": "m"}
    if custom_field:
        mapping["customMetadataField"] = custom_field
    return {
        "knowledgeBaseId": "KB",
        "storageConfiguration": {
            "type": "RDS",
            "rdsConfiguration": {"tableName": "kb.chunks", "fieldMapping": mapping},
        },
    }


def test_the_stamp_is_refused_on_aurora_unless_a_custom_field_or_its_column_takes_it() -> None:
    with pytest.raises(
        UnsupportedError, match=r"Aurora table kb\.chunks .* add a column ckb_reprocessed \(text\)"
    ):
        check_store(aurora_kb())
    with pytest.raises(UnsupportedError):
        check_store(aurora_kb(), ["ckb_context"])  # confirmed columns, but not ours
    check_store(aurora_kb("custom"))
    check_store(aurora_kb(), ["ckb_context", "ckb_reprocessed"])
    check_store({"storageConfiguration": {"type": "OPENSEARCH_SERVERLESS"}})
    check_store({})


def test_what_get_object_answered_of_the_objects_settings_is_put_back() -> None:
    got = {
        "Body": object(),
        "ETag": '"e"',
        "Metadata": {"owner": "a"},
        "StorageClass": "STANDARD_IA",
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": "arn:aws:kms:us-east-1:1:key/k",
        "BucketKeyEnabled": True,
        "ContentType": "application/json",
        "TagCount": 2,
        "VersionId": "v1",
    }
    assert carried(got) == {
        "Metadata": {"owner": "a"},
        "StorageClass": "STANDARD_IA",
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": "arn:aws:kms:us-east-1:1:key/k",
        "BucketKeyEnabled": True,
        "ContentType": "application/json",
    }
    assert carried({"ServerSideEncryption": "AES256", "Metadata": {}}) == {"ServerSideEncryption": "AES256"}


class Listing:
    """An S3 client that lists the given objects and answers HeadObject with their ArchiveStatus."""

    def __init__(self, objects: list[tuple[str, str, str]]) -> None:
        self.objects = objects  # (key, storage class, archive status)
        self.heads: list[str] = []

    def get_paginator(self, _: str) -> Listing:
        return self

    def paginate(self, **_: object) -> list[dict]:
        return [{"Contents": [{"Key": k, "Size": 1, "StorageClass": c} for k, c, _ in self.objects]}]

    def head_object(self, Bucket: str, Key: str) -> dict:  # noqa: N803 (boto3's names)
        self.heads.append(Key)
        status = next(s for k, _, s in self.objects if k == Key)
        return {"ArchiveStatus": status} if status else {}


def test_archived_documents_are_planned_apart_and_glacier_ir_is_not() -> None:
    s3 = Listing(
        [
            ("a.md", "STANDARD", ""),
            ("b.md", "GLACIER", ""),
            ("c.md", "DEEP_ARCHIVE", ""),
            ("d.md", "GLACIER_IR", ""),
            ("e.md", "INTELLIGENT_TIERING", "ARCHIVE_ACCESS"),
            ("f.md", "INTELLIGENT_TIERING", ""),
            ("g.md.metadata.json", "GLACIER", ""),
        ]
    )
    planned = plan(s3, s3_source(), "")
    assert [key for key, _ in planned.documents] == ["a.md", "d.md", "f.md"]
    assert planned.archived == [
        ("b.md", "GLACIER"),
        ("c.md", "DEEP_ARCHIVE"),
        ("e.md", "INTELLIGENT_TIERING ARCHIVE_ACCESS"),
    ]
    assert sorted(s3.heads) == ["e.md", "f.md"]  # only Intelligent-Tiering objects are asked
