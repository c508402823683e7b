"""``ckb sync --reprocess``'s pure parts: which documents, and the metadata file that marks each."""

from __future__ import annotations

import json

import pytest

from contextual_kb.query.reprocess import UnsupportedError, marked_metadata, scope


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
