"""examples/path_metadata: metadata from the document's path and front matter, through the real handler
path (moto's S3) with the contract cases of events/."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.runtime import handler as own
from contextual_kb.runtime.errors import ContractError
from tests.conftest import output_lines
from tests.examples import load
from tests.integration.test_handler import GOOD_SAMPLES, read, stage
from tests.support import event, file_entry, outputs_in, text_item

example = load("path_metadata")


def batches_of(s3: Any, raw: dict[str, Any], produced: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [read(s3, raw["bucketName"], ref["key"])["fileContents"] for ref in produced["contentBatches"]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no front matter\n---\ntitle: x\n---\n", {}),
        (
            "---\ntitle: \"Setup: the first day\"\nauthor: 'Ana'\ntags: [onboarding, 'it' ]\n"
            "nested:\n  a: 1\n---\nbody",
            {"title": "Setup: the first day", "author": "Ana", "tags": ["onboarding", "it"]},
        ),
        ("\ufeff---\r\nDate: 2026-11-27\r\n...\r\nbody", {"date": "2026-11-27"}),
        ("---\ntitle: " + "x" * 300 + "\n---", {"title": "x" * 100}),
        ("---\ntitle: never closed\n", {}),
    ],
    ids=["none", "quoted-and-lists", "bom-crlf-dots", "long-value", "unclosed"],
)
def test_front_matter(text: str, expected: dict[str, Any]) -> None:
    assert example.front_matter(text) == expected


@pytest.mark.parametrize("name", [*GOOD_SAMPLES, "whole-documents-structure"])
def test_every_contract_case_keeps_every_chunk_and_adds_the_path(
    s3: Any, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    if name == "whole-documents-structure":  # a data source with chunking NONE: chunked here
        monkeypatch.setenv("CHUNKING", "structure")
        name = "whole-documents"
    raw = stage(s3, name)
    reference = own.lambda_handler(raw, LocalLambdaContext())
    response = example.handler(raw, LocalLambdaContext())
    assert response == reference  # the same contract: files, metadata, output keys
    for given, produced, expected in zip(
        raw["inputFiles"], response["outputFiles"], reference["outputFiles"], strict=True
    ):
        path = given["originalFileLocation"]["s3_location"]["uri"].split("/", 3)[3]
        folder = path.rpartition("/")[0]
        fields = {
            "folder": folder,
            "top_folder": folder.partition("/")[0],
            "file_name": path.rpartition("/")[2],
        }
        # The function's own output, every item, with the path's keys added and nothing else changed.
        for mine, theirs in zip(batches_of(s3, raw, produced), batches_of(s3, raw, expected), strict=True):
            assert len(mine) == len(theirs)
            for item, reference_item in zip(mine, theirs, strict=True):
                if item["contentType"] != "TEXT":
                    assert item == reference_item
                    continue
                assert item["contentBody"] == reference_item["contentBody"]
                assert item["contentMetadata"] == {**reference_item["contentMetadata"], **fields}


def test_front_matter_cut_across_batches_reaches_every_chunk_of_the_document(s3: Any) -> None:
    s3.create_bucket(Bucket="inter")
    parts = [
        # The KB's chunker cut the front matter between two lines (and stripped the chunks' edges).
        ["---\ntitle: Onboarding", "author: Ana\ntags: [it, hr]\n---\n# Day one"],
        ["Get a laptop from the service desk.", "Sign the policies."],
    ]
    keys = []
    for number, texts in enumerate(parts, 1):
        keys.append(f"job/team-a_guides_setup.md_{number}.JSON")
        s3.put_object(
            Bucket="inter", Key=keys[-1], Body=json.dumps({"fileContents": [text_item(t, {}) for t in texts]})
        )
    raw = event("inter", [file_entry("s3://src/team-a/guides/setup.md", list(reversed(keys)))])
    response = example.handler(raw, LocalLambdaContext())
    items = [i for batch in batches_of(s3, raw, response["outputFiles"][0]) for i in batch]
    assert len(items) == 4
    for item in items:
        meta = item["contentMetadata"]
        assert meta["title"] == "Onboarding" and meta["author"] == "Ana" and meta["tags"] == ["it", "hr"]
        assert (meta["folder"], meta["top_folder"], meta["file_name"]) == (
            "team-a/guides",
            "team-a",
            "setup.md",
        )
    assert response["outputFiles"][0]["fileMetadata"] == {}  # no-file-metadata: {} as AWS documents


def test_on_s3_vectors_the_last_keys_that_do_not_fit_are_left_out_and_counted(
    s3: Any, monkeypatch: pytest.MonkeyPatch, captured: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VECTOR_STORE", "s3vectors")
    s3.create_bucket(Bucket="inter")
    matter = "---\ntitle: " + "t" * 100 + "\nauthor: " + "a" * 100 + "\ncategory: " + "c" * 100
    matter += "\ntags: [" + ", ".join(f"tag{n:02d}" + "x" * 90 for n in range(10)) + "]\n---\n"
    s3.put_object(
        Bucket="inter", Key="j/a_1.JSON", Body=json.dumps({"fileContents": [text_item(matter + "x")]})
    )
    raw = event("inter", [file_entry("s3://src/a/b.md", ["j/a_1.JSON"], {"team": "a" * 200})])
    captured.readouterr()
    response = example.handler(raw, LocalLambdaContext())
    (item,) = batches_of(s3, raw, response["outputFiles"][0])[0]
    meta = item["contentMetadata"]
    assert {"folder", "file_name", "title", "author", "category"} <= set(meta) and "tags" not in meta
    whole = {**raw["inputFiles"][0]["fileMetadata"], **meta}
    assert len(json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()) <= 1024
    (emf,) = [line for line in output_lines(captured) if "_aws" in line and "ChunksIn" in line]
    assert emf["StepMetadataLeftOut"] == [1.0]


@pytest.mark.parametrize("name", ["malformed-event", "malformed-batch"])
def test_malformed_input_fails_in_one_line_and_writes_nothing(s3: Any, name: str) -> None:
    raw = stage(s3, name)
    with pytest.raises(ContractError):
        example.handler(raw, LocalLambdaContext())
    assert outputs_in(s3, raw["bucketName"]) == []
