from __future__ import annotations

import json

import pytest

from contextual_kb.runtime.errors import ContractError
from contextual_kb.runtime.models import parse_batch, parse_event
from tests.support import event, file_entry, text_item


def test_accepts_what_aws_sends_and_keeps_unknown_fields() -> None:
    raw = event(
        "bucket",
        [
            file_entry("s3://src/a.md", ["k/a_1.JSON", "k/a_2.JSON"], {"team": "x"}),
            {**file_entry("s3://src/b.md", ["k/b_1.JSON"]), "futureField": {"x": 1}},
        ],
        newTopLevel="kept",
    )
    parsed = parse_event(raw)
    assert len(parsed.input_files) == 2
    assert parsed.input_files[1].file_metadata is None
    assert parsed.dump()["newTopLevel"] == "kept"
    assert parsed.input_files[1].dump()["futureField"] == {"x": 1}
    assert "fileMetadata" not in parsed.input_files[1].dump()  # nothing invented


@pytest.mark.parametrize(
    ("mutate", "field", "file"),
    [
        (
            lambda e: e["inputFiles"][1]["contentBatches"][0].pop("key"),
            "inputFiles[1].contentBatches[0].key",
            "s3://src/b.md",
        ),
        (lambda e: e["inputFiles"][0].pop("contentBatches"), "inputFiles[0].contentBatches", "s3://src/a.md"),
        (lambda e: e.pop("bucketName"), "bucketName", None),
        (lambda e: e.__setitem__("inputFiles", "nope"), "inputFiles", None),
        (
            lambda e: e["inputFiles"][0]["originalFileLocation"]["s3_location"].__setitem__("uri", 7),
            "inputFiles[0].originalFileLocation.s3_location.uri",
            None,
        ),
    ],
)
def test_errors_name_the_field_and_the_file(mutate, field: str, file: str | None) -> None:
    raw = event(
        "bucket", [file_entry("s3://src/a.md", ["k/a_1.JSON"]), file_entry("s3://src/b.md", ["k/b_1.JSON"])]
    )
    mutate(raw)
    with pytest.raises(ContractError) as caught:
        parse_event(raw)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"event: {field}: ")
    if file:
        assert caught.value.file == file
        assert file in str(caught.value)


def test_event_must_be_an_object_and_batch_keys_unique() -> None:
    with pytest.raises(ContractError, match="expected a JSON object"):
        parse_event(["not", "an", "event"])
    raw = event(
        "bucket", [file_entry("s3://src/a.md", ["k/x_1.JSON"]), file_entry("s3://src/b.md", ["k/x_1.JSON"])]
    )
    with pytest.raises(ContractError, match="listed twice"):
        parse_event(raw)


def test_batches_follow_their_numbers_not_the_event_order() -> None:
    keys = ["p/doc_10.JSON", "p/doc_2.JSON", "p/doc_1.JSON"]
    parsed = parse_event(event("bucket", [file_entry("s3://src/doc", keys)]))
    assert [b.key for b in parsed.input_files[0].batches_in_document_order()] == [
        "p/doc_1.JSON",
        "p/doc_2.JSON",
        "p/doc_10.JSON",
    ]
    unnumbered = parse_event(event("bucket", [file_entry("s3://src/doc", ["b", "a"])]))
    assert [b.key for b in unnumbered.input_files[0].batches_in_document_order()] == ["b", "a"]


def test_batch_errors_name_the_object_the_field_and_the_file() -> None:
    where = "s3://bucket/k/a_1.JSON"
    with pytest.raises(
        ContractError,
        match=r"s3://bucket/k/a_1.JSON: not valid JSON \(Expecting property name .*: line 1, column 2\) "
        r"\(file s3://src/a.md\)",
    ):
        parse_batch(b"{not json", where=where, file="s3://src/a.md")
    body = json.dumps({"fileContents": [text_item("ok"), {"contentType": "TEXT"}]}).encode()
    with pytest.raises(ContractError) as caught:
        parse_batch(body, where=where, file="s3://src/a.md")
    assert caught.value.field == "fileContents[1].contentBody"
    assert caught.value.__cause__ is None  # pydantic's message (which quotes input) is not chained


def test_document_text_never_appears_in_contract_errors() -> None:
    secret = "TOP-SECRET-CHUNK-TEXT"
    body = json.dumps({"fileContents": [{"contentBody": secret, "contentType": 5}]}).encode()
    with pytest.raises(ContractError) as caught:
        parse_batch(body, where="s3://b/k", file="s3://src/a")
    assert secret not in str(caught.value)


@pytest.mark.parametrize("number", ["Infinity", "NaN", "1e400", "-1e999"])
def test_metadata_numbers_that_cannot_round_trip_are_refused(number: str) -> None:
    item = f'{{"contentBody": "x", "contentType": "TEXT", "contentMetadata": {{"a": [{number}]}}}}'
    body = f'{{"fileContents": [{item}]}}'.encode()
    with pytest.raises(ContractError) as caught:
        parse_batch(body, where="s3://b/k", file="s3://src/a")
    assert caught.value.field == "fileContents[0].contentMetadata"
    assert "not finite" in str(caught.value)
