"""A catalogue of malformed and awkward events and batch objects, through the real handler on moto S3.

Each case ends one of two ways:

- ``error: <substring>``: a TransformationError whose message names the object and field at fault, and
  no output object at all (for any file of the event);
- ``ok``: every chunk back exactly once, its original text intact at the end of ``contentBody``, the user's
  metadata (file and chunk) kept as it came, non-text items and unknown fields untouched; plus the case's
  own check.

``python -m tests.integration.test_bad_inputs TABLE.md`` writes the catalogue as a markdown table from
actual runs (for docs/RELIABILITY.md). Decisions the cases pin:

- a key twice in one JSON object is refused (Python and pydantic keep the last value, which would drop
  whatever came first, a whole list of chunks under a duplicated ``fileContents``);
- ``fileMetadata`` absent or ``null`` is answered with ``{}``, as AWS's documented output has it on every
  file;
- a lone surrogate escape (``"\\ud83d"``, legal JSON) is carried through as the same escape;
- a batch key whose output key would pass S3's 1,024 bytes gets a shorter deterministic output key;
- items whose ``contentType`` is not ``TEXT`` (any case) are passed through untouched and are not chunks,
  but must still carry a string ``contentBody`` as the contract says;
- a ``version`` or ``priorTask`` we do not know is accepted (the shapes are what we check);
- the context's metadata copy never overwrites a user's key and only takes the room the user's metadata
  leaves under S3 Vectors' 2 KB of filterable metadata per vector.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.runtime import handler
from contextual_kb.runtime.errors import ContractError, StorageError, TransformationError
from tests.conftest import output_lines
from tests.support import OUTPUT_PREFIX, event, file_entry, output_key_in, outputs_in

BUCKET = "ckb-bad-inputs"
PREFIX = OUTPUT_PREFIX
METADATA_KEY = "ckb_context"
SEPARATOR = "\n\n"
SOURCE = "s3://src/docs/guide.md"
KEY = "j/docs_guide.md_1.JSON"
S3_METADATA_LIMIT = 2048  # S3 Vectors: filterable metadata per vector (aws-facts.md)

Build = Callable[[Any], Any]  # stages objects in BUCKET, returns the event


@dataclass(frozen=True)
class Outcome:
    s3: Any
    event: dict[str, Any]
    response: dict[str, Any]
    summary: dict[str, Any]  # the handler's "transformation complete" log line


@dataclass(frozen=True)
class Case:
    name: str
    input: str  # what is wrong with it, for the table
    build: Build
    expect: str  # "ok" or "error: <substring of the message>"
    check: Callable[[Outcome], None] | None = None
    error: type[TransformationError] = ContractError
    note: str = ""  # what the case's check pins, for the table


# --- building events and objects ---------------------------------------------------------------------------


def text(body: str, metadata: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"contentBody": body, "contentType": "TEXT", **extra}
    if metadata is not None:
        item["contentMetadata"] = metadata
    return item


def good_items() -> list[dict[str, Any]]:
    return [
        text("# Payments guide\n\nHow refunds are issued.", {"x-amz-bedrock-kb-document-page-number": 1}),
        text("## Limits\n\nRefunds above 500 EUR need a second approver.", {"page": 2}),
    ]


def put(s3: Any, key: str, body: bytes | dict[str, Any]) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)


def staged(objects: dict[str, bytes | dict[str, Any]], files: list[dict[str, Any]]) -> Build:
    def build(s3: Any) -> dict[str, Any]:
        for key, body in objects.items():
            put(s3, key, body)
        return event(BUCKET, files)

    return build


def one_batch(items: list[Any], *, file_metadata: dict[str, Any] | None = None, **top: Any) -> Build:
    """One file, one batch object holding ``items`` (and any extra top-level fields)."""
    return staged({KEY: {"fileContents": items, **top}}, [file_entry(SOURCE, [KEY], file_metadata)])


def raw_batch(body: bytes) -> Build:
    return staged({KEY: body}, [file_entry(SOURCE, [KEY])])


def good_event_with(mutate: Callable[[dict[str, Any]], None]) -> Build:
    """The good event (one file, one valid batch object), then ``mutate`` applied to it."""

    def build(s3: Any) -> Any:
        raw = one_batch(good_items(), file_metadata={"team": "payments"})(s3)
        mutate(raw)
        return raw

    return build


def drop(*path: str | int) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        parent: Any = raw
        for part in path[:-1]:
            parent = parent[part]
        del parent[path[-1]]

    return mutate


def assign(value: Any, *path: str | int) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        parent: Any = raw
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = value

    return mutate


def two_files(second_objects: dict[str, bytes | dict[str, Any]], second_keys: list[str]) -> Build:
    """A good first file, then a second file with the given objects: an error in the second must leave no
    output for the first either."""
    first = {KEY: {"fileContents": good_items()}}
    files = [file_entry(SOURCE, [KEY]), file_entry("s3://src/b.md", second_keys)]
    return staged({**first, **second_objects}, files)


def many_chunks(s3: Any) -> dict[str, Any]:
    keys = [f"j/big.md_{n}.JSON" for n in range(1, 6)]
    for n, key in enumerate(keys):
        chunks = [text(f"Chunk {n}.{i}: entry {i} of part {n}.", {"i": i}) for i in range(1000)]
        put(s3, key, {"fileContents": chunks})
    return event(BUCKET, [file_entry("s3://src/big.md", keys)])


def ten_megabytes(s3: Any) -> dict[str, Any]:
    body = "Ledger entry. " + "word " * (2 * 1024 * 1024)
    return one_batch([text(body, {"size": "10MB"})])(s3)


# --- checks ------------------------------------------------------------------------------------------------


def read_json(s3: Any, key: str) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def output_keys(s3: Any) -> list[str]:
    return sorted(outputs_in(s3, BUCKET))


def shared_directory(raw: dict[str, Any]) -> str:
    """The directory every batch key of the event is in (outputs go inside it)."""
    keys = [ref["key"] for file in raw["inputFiles"] for ref in file["contentBatches"]]
    common = keys[0] if keys else ""
    for key in keys[1:]:
        while not key.startswith(common):
            common = common[:-1]
    return common[: common.rfind("/") + 1]


def expected_key(raw: dict[str, Any], key: str) -> str:
    return output_key_in(shared_directory(raw), key)


def is_text(item: dict[str, Any]) -> bool:
    return str(item.get("contentType", "")).upper() == "TEXT"


def compact_size(metadata: dict[str, Any]) -> int:
    return len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def all_items(outcome: Outcome, side: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(item, its file's input entry) for every item, input side ("in") or output side ("out")."""
    pairs = []
    for index, given in enumerate(outcome.event["inputFiles"]):
        refs = (
            given["contentBatches"]
            if side == "in"
            else outcome.response["outputFiles"][index]["contentBatches"]
        )
        for ref in refs:
            pairs.extend((item, given) for item in read_json(outcome.s3, ref["key"])["fileContents"])
    return pairs


def assert_item_kept(old: dict[str, Any], new: dict[str, Any], file_metadata: dict[str, Any] | None) -> None:
    if not is_text(old):
        assert new == old, "a non-text item must pass through untouched"
        return
    assert {k: v for k, v in new.items() if k not in {"contentBody", "contentMetadata"}} == {
        k: v for k, v in old.items() if k not in {"contentBody", "contentMetadata"}
    }, "unknown item fields must travel through"
    before, after = old["contentBody"], new["contentBody"]
    user = old.get("contentMetadata")
    if after == before:  # passed through
        assert new.get("contentMetadata") == user
        return
    assert after.endswith(SEPARATOR + before), "the original text must end the body, byte for byte"
    context = after[: len(after) - len(before) - len(SEPARATOR)]
    assert context.strip()
    metadata = new.get("contentMetadata") or {}
    for key, value in (user or {}).items():
        assert key in metadata and metadata[key] == value, f"user metadata {key!r} lost or altered"
    added = set(metadata) - set(user or {})
    assert added <= {METADATA_KEY}
    if not added:
        assert new.get("contentMetadata") == user
        return
    copy = metadata[METADATA_KEY]
    assert copy == context or (copy.endswith("…") and context.startswith(copy[:-1])), "context copy"
    # Never make metadata past S3 Vectors' filterable limit (escapes in the context are not counted).
    merged = {**(file_metadata or {}), **metadata}
    escapes = len(json.dumps(copy, ensure_ascii=False)) - 2 - len(copy)
    assert compact_size(merged) - escapes <= S3_METADATA_LIMIT


def assert_ok(outcome: Outcome) -> None:
    """The general promise of a successful call (see the module docstring)."""
    given_files, produced = outcome.event["inputFiles"], outcome.response["outputFiles"]
    assert len(produced) == len(given_files)
    text_chunks = 0
    for given, out in zip(given_files, produced, strict=True):
        assert out["originalFileLocation"] == given["originalFileLocation"]
        assert out["fileMetadata"] == (given["fileMetadata"] if given.get("fileMetadata") is not None else {})
        if all(len(b["key"].encode()) + len(PREFIX) <= 1024 for b in given["contentBatches"]):
            assert [b["key"] for b in out["contentBatches"]] == [
                expected_key(outcome.event, b["key"]) for b in given["contentBatches"]
            ]
        for before_ref, after_ref in zip(given["contentBatches"], out["contentBatches"], strict=True):
            before = read_json(outcome.s3, before_ref["key"])
            after = read_json(outcome.s3, after_ref["key"])
            top = {k: v for k, v in before.items() if k != "fileContents"}
            assert {k: v for k, v in after.items() if k != "fileContents"} == top, "top-level fields kept"
            assert len(after["fileContents"]) == len(before["fileContents"]), "every item back exactly once"
            for old, new in zip(before["fileContents"], after["fileContents"], strict=True):
                assert_item_kept(old, new, given.get("fileMetadata"))
                text_chunks += is_text(old)
    assert outcome.summary["chunks_in"] == text_chunks


def contextualized(count: int) -> Callable[[Outcome], None]:
    def check(outcome: Outcome) -> None:
        assert outcome.summary["chunks_contextualized"] == count

    return check


def non_text(count: int, chunks: int) -> Callable[[Outcome], None]:
    def check(outcome: Outcome) -> None:
        assert outcome.summary["non_text_items"] == count
        assert outcome.summary["chunks_in"] == chunks
        # The non-text body (first in the batch) is not part of the document the contexts were read from:
        # were it, it would be the document's title in every context.
        for item, _ in all_items(outcome, "out"):
            assert "iVBORw0KGgo" not in item.get("contentMetadata", {}).get(METADATA_KEY, "")
            if is_text(item):
                assert item["contentBody"].startswith("Document docs/guide.md: ")

    return check


def no_context_copy(outcome: Outcome) -> None:
    """User metadata already past the limit: the context goes in the body only, the metadata is as it came."""
    for item, _ in all_items(outcome, "out"):
        assert METADATA_KEY not in (item.get("contentMetadata") or {})
    summary = outcome.summary
    assert summary["chunks_contextualized"] == summary["chunks_in"] == summary["metadata_truncated"] > 0


def context_copy_capped(outcome: Outcome) -> None:
    (item, given), *_ = all_items(outcome, "out")
    copy = item["contentMetadata"][METADATA_KEY]
    assert copy.endswith("…")
    assert compact_size({**(given.get("fileMetadata") or {}), **item["contentMetadata"]}) <= S3_METADATA_LIMIT
    assert outcome.summary["metadata_truncated"] == 1


def users_own_key_kept(outcome: Outcome) -> None:
    (item, _), *_ = all_items(outcome, "out")
    assert item["contentMetadata"][METADATA_KEY] == "the user's own value"
    assert item["contentBody"].endswith(SEPARATOR + "Refunds are issued within 5 days.")
    assert item["contentBody"] != "Refunds are issued within 5 days."


def passed_through_unchanged(outcome: Outcome) -> None:
    assert outcome.summary["chunks_passed_through"] == outcome.summary["chunks_in"]
    for (new, _), (old, _) in zip(all_items(outcome, "out"), all_items(outcome, "in"), strict=True):
        assert new == old


def no_output_files(outcome: Outcome) -> None:
    assert outcome.response == {"outputFiles": []}
    assert output_keys(outcome.s3) == []


def empty_output_batch(outcome: Outcome) -> None:
    assert read_json(outcome.s3, outcome.response["outputFiles"][0]["contentBatches"][0]["key"]) == {
        "fileContents": []
    }
    assert outcome.summary["empty_documents"] == 1


def no_batches(outcome: Outcome) -> None:
    assert outcome.response["outputFiles"][0]["contentBatches"] == []
    assert output_keys(outcome.s3) == []


def file_metadata_empty(outcome: Outcome) -> None:
    assert outcome.response["outputFiles"][0]["fileMetadata"] == {}


def output_key_is_inside_the_shared_directory(outcome: Outcome) -> None:
    for given, out in zip(outcome.event["inputFiles"], outcome.response["outputFiles"], strict=True):
        assert out["contentBatches"][0]["key"] == expected_key(
            outcome.event, given["contentBatches"][0]["key"]
        )
    assert output_keys(outcome.s3) == sorted(
        expected_key(outcome.event, f["contentBatches"][0]["key"]) for f in outcome.event["inputFiles"]
    )


def shortened_output_key(outcome: Outcome) -> None:
    """The second file's output key: within S3's limit, under the shared directory and our prefix, with the
    input key's head and its batch number; the same key on a second run (deterministic)."""
    key = outcome.response["outputFiles"][1]["contentBatches"][0]["key"]
    assert len(key.encode()) <= 1024
    assert key.startswith("j/" + PREFIX + "kkkk") and key.endswith("_1.JSON")
    assert output_keys(outcome.s3) == sorted([expected_key(outcome.event, KEY), key])
    again = handler.lambda_handler(outcome.event, LocalLambdaContext())
    assert again["outputFiles"][1]["contentBatches"][0]["key"] == key


def surrogate_kept(outcome: Outcome) -> None:
    key = outcome.response["outputFiles"][0]["contentBatches"][0]["key"]
    raw = outcome.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert raw.isascii() and b"cut emoji \\ud83d" in raw  # the escape as it came, valid JSON around it
    assert outcome.summary["chunks_contextualized"] == 1


def chunk_count(count: int) -> Callable[[Outcome], None]:
    def check(outcome: Outcome) -> None:
        assert outcome.summary["chunks_in"] == count
        assert outcome.summary["batches_out"] == len(outcome.response["outputFiles"][0]["contentBatches"])

    return check


# --- the catalogue -----------------------------------------------------------------------------------------

DUPLICATE_TOP = (
    b'{"fileContents": [{"contentBody": "first chunk", "contentType": "TEXT"}],'
    b' "fileContents": [{"contentBody": "second chunk", "contentType": "TEXT"}]}'
)
DUPLICATE_METADATA = (
    b'{"fileContents": [{"contentBody": "a chunk", "contentType": "TEXT",'
    b' "contentMetadata": {"page": 1, "page": 2}}]}'
)
ODD_KEY = "j/My Docs+ü%20文件 (v2)/a+b c.md_1.JSON"
LONG_KEY = "j/" + "k" * (1024 - len(PREFIX) - len("j/") - len("_1.JSON")) + "_1.JSON"  # output: 1,024 bytes
TOO_LONG_KEY = "j/" + "k" * 1000 + "_1.JSON"  # 1,009 bytes: fine as input, 1,030 with our prefix added
ODD_TEXT = "Emoji 😀 (pair \\ud83d\\ude00), RTL עברית, zero-width \u200b, NUL \\u0000, BOM \ufeff, LS \u2028."

CASES: list[Case] = [
    # The event: required fields.
    Case(
        "event-not-an-object",
        "the event is a JSON list",
        lambda s3: [{"version": "1.0"}],
        "error: event: expected a JSON object, got list",
    ),
    Case(
        "event-missing-version",
        "no `version`",
        good_event_with(drop("version")),
        "error: event: version: Field required",
    ),
    Case(
        "event-missing-bucketName",
        "no `bucketName`",
        good_event_with(drop("bucketName")),
        "error: event: bucketName: Field required",
    ),
    Case(
        "event-empty-bucketName",
        '`bucketName: ""`',
        good_event_with(assign("", "bucketName")),
        "error: event: bucketName: String should have at least 1 character",
    ),
    Case(
        "event-missing-inputFiles",
        "no `inputFiles`",
        good_event_with(drop("inputFiles")),
        "error: event: inputFiles: Field required",
    ),
    Case(
        "file-missing-contentBatches",
        "an input file without `contentBatches`",
        good_event_with(drop("inputFiles", 0, "contentBatches")),
        f"error: event: inputFiles[0].contentBatches: Field required (file {SOURCE})",
    ),
    Case(
        "batch-ref-missing-key",
        "a content batch without `key`",
        good_event_with(drop("inputFiles", 0, "contentBatches", 0, "key")),
        "error: event: inputFiles[0].contentBatches[0].key: Field required",
    ),
    Case(
        "file-missing-originalFileLocation",
        "an input file without `originalFileLocation`",
        good_event_with(drop("inputFiles", 0, "originalFileLocation")),
        "error: event: inputFiles[0].originalFileLocation: Field required",
    ),
    # The event: mistyped fields.
    Case(
        "inputFiles-as-dict",
        "`inputFiles` is an object, not a list",
        good_event_with(lambda raw: raw.update(inputFiles=raw["inputFiles"][0])),
        "error: event: inputFiles: Input should be a valid list",
    ),
    Case(
        "key-as-int",
        "a batch `key` is the number 7",
        good_event_with(assign(7, "inputFiles", 0, "contentBatches", 0, "key")),
        "error: event: inputFiles[0].contentBatches[0].key: Input should be a valid string",
    ),
    Case(
        "contentBatches-as-string",
        "`contentBatches` is the key as a string",
        good_event_with(assign(KEY, "inputFiles", 0, "contentBatches")),
        "error: event: inputFiles[0].contentBatches: Input should be a valid list",
    ),
    Case(
        "fileMetadata-as-list",
        "`fileMetadata` is a list",
        good_event_with(assign(["team", "payments"], "inputFiles", 0, "fileMetadata")),
        f"error: event: inputFiles[0].fileMetadata: Input should be a valid dictionary (file {SOURCE})",
    ),
    Case(
        "fileMetadata-NaN",
        "`fileMetadata` holds NaN",
        good_event_with(assign({"score": math.nan}, "inputFiles", 0, "fileMetadata")),
        "error: event: inputFiles[0].fileMetadata: Value error, metadata holds a number that is not finite",
    ),
    Case(
        "version-as-number",
        "`version: 1.0` (a number)",
        good_event_with(assign(1.0, "version")),
        "error: event: version: Input should be a valid string",
    ),
    Case(
        "version-unknown",
        '`version: "2.0"`',
        good_event_with(assign("2.0", "version")),
        "ok",
        contextualized(2),
        note="treated as 1.0: the shapes are what is checked",
    ),
    Case(
        "priorTask-unexpected",
        '`priorTask: "PARSING"`',
        good_event_with(assign("PARSING", "priorTask")),
        "ok",
        contextualized(2),
        note="accepted; `priorTask` is not used",
    ),
    Case(
        "priorTask-absent",
        "no `priorTask`",
        good_event_with(drop("priorTask")),
        "ok",
        contextualized(2),
        note="accepted; `priorTask` is optional",
    ),
    Case(
        "priorTask-as-number",
        "`priorTask: 3`",
        good_event_with(assign(3, "priorTask")),
        "error: event: priorTask: Input should be a valid string",
    ),
    Case(
        "fileMetadata-absent",
        "no `fileMetadata`",
        good_event_with(drop("inputFiles", 0, "fileMetadata")),
        "ok",
        file_metadata_empty,
        note="`fileMetadata: {}` in the response, as AWS's documented output has it",
    ),
    Case(
        "fileMetadata-null",
        "`fileMetadata: null`",
        good_event_with(assign(None, "inputFiles", 0, "fileMetadata")),
        "ok",
        file_metadata_empty,
        note="answered like an absent `fileMetadata`: `{}`",
    ),
    Case(
        "unknown-event-fields",
        "fields the contract does not list, in the event and an input file",
        good_event_with(lambda raw: (raw.update(newField=1), raw["inputFiles"][0].update(extra=[1]))),
        "ok",
        contextualized(2),
        note="unknown event fields ignored",
    ),
    Case(
        "location-without-uri",
        "`originalFileLocation` of another type, no S3 URI",
        good_event_with(
            assign(
                {"type": "WEB", "webLocation": {"url": "https://example.com/guide"}},
                "inputFiles",
                0,
                "originalFileLocation",
            )
        ),
        "ok",
        contextualized(2),
        note="location echoed as it came; the context has no file path",
    ),
    # The event: documents with nothing in them, keys listed twice.
    Case(
        "no-input-files",
        "`inputFiles: []`",
        staged({}, []),
        "ok",
        no_output_files,
        note="`outputFiles: []`, nothing written",
    ),
    Case(
        "file-with-zero-batches",
        "an input file with `contentBatches: []`",
        staged({}, [file_entry(SOURCE, [])]),
        "ok",
        no_batches,
        note="the file comes back with `contentBatches: []`, nothing written",
    ),
    Case(
        "batch-with-zero-items",
        "a batch object with `fileContents: []`",
        one_batch([]),
        "ok",
        empty_output_batch,
        note='one output batch `{"fileContents": []}`',
    ),
    Case(
        "batch-key-twice-in-a-file",
        "one file lists the same batch key twice",
        staged({KEY: {"fileContents": good_items()}}, [file_entry(SOURCE, [KEY, KEY])]),
        f"error: event: inputFiles[].contentBatches[].key: batch key '{KEY}' is listed twice",
    ),
    Case(
        "batch-key-in-two-files",
        "two files list the same batch key",
        staged(
            {KEY: {"fileContents": good_items()}},
            [file_entry(SOURCE, [KEY]), file_entry("s3://src/b.md", [KEY])],
        ),
        f"error: batch key '{KEY}' is listed twice (also for {SOURCE}) (file s3://src/b.md)",
    ),
    # Batch objects that are not the contract's JSON (the first file is fine: nothing written for it either).
    Case(
        "batch-not-json",
        "the second file's batch object is PNG bytes",
        two_files({"j/b_1.JSON": b"\x89PNG\r\n\x1a\n not json"}, ["j/b_1.JSON"]),
        f"error: s3://{BUCKET}/j/b_1.JSON: not valid JSON (not UTF-8 at byte 0)",
    ),
    Case(
        "batch-json-list",
        "the batch object is a JSON list",
        raw_batch(b'[{"contentBody": "x"}]'),
        f"error: s3://{BUCKET}/{KEY}: expected a JSON object, got a list (file {SOURCE})",
    ),
    Case(
        "batch-truncated-json",
        "the batch object is cut short",
        two_files({"j/b_1.JSON": json.dumps({"fileContents": good_items()}).encode()[:-25]}, ["j/b_1.JSON"]),
        f"error: s3://{BUCKET}/j/b_1.JSON: not valid JSON (Unterminated string starting at: line 1, column",
    ),
    Case(
        "batch-wrong-top-level-key",
        '`{"contents": [...]}` instead of `fileContents`',
        raw_batch(json.dumps({"contents": good_items()}).encode()),
        f"error: s3://{BUCKET}/{KEY}: fileContents: Field required (file {SOURCE})",
    ),
    Case(
        "batch-missing-object",
        "the second file's batch object does not exist",
        two_files({}, ["j/b_1.JSON"]),
        f"error: s3://{BUCKET}/j/b_1.JSON: cannot read batch object (NoSuchKey)",
        error=StorageError,
    ),
    Case(
        "batch-empty-object",
        "the batch object is 0 bytes",
        raw_batch(b""),
        f"error: s3://{BUCKET}/{KEY}: not valid JSON (Expecting value: line 1, column 1)",
    ),
    Case(
        "batch-not-utf8",
        "the batch object is Latin-1, not UTF-8",
        raw_batch('{"fileContents": [{"contentBody": "Café", "contentType": "TEXT"}]}'.encode("latin-1")),
        f"error: s3://{BUCKET}/{KEY}: not valid JSON (not UTF-8 at byte 38)",
    ),
    Case(
        "batch-utf16",
        "the batch object is UTF-16 with a BOM",
        raw_batch(json.dumps({"fileContents": good_items()}).encode("utf-16")),
        f"error: s3://{BUCKET}/{KEY}: not valid JSON (not UTF-8 at byte 0)",
    ),
    Case(
        "duplicate-top-level-key",
        "`fileContents` twice in one batch object",
        raw_batch(DUPLICATE_TOP),
        f"error: s3://{BUCKET}/{KEY}: the key 'fileContents' appears twice in one JSON object",
    ),
    Case(
        "duplicate-metadata-key",
        '`contentMetadata: {"page": 1, "page": 2}`',
        raw_batch(DUPLICATE_METADATA),
        f"error: s3://{BUCKET}/{KEY}: the key 'page' appears twice in one JSON object",
    ),
    Case(
        "unknown-batch-fields",
        "unknown fields at the top of the batch object and in an item",
        one_batch([text("Refunds are issued within 5 days.", {"p": 1}, score=0.5)], newTop={"a": [1, 2]}),
        "ok",
        contextualized(1),
        note="unknown fields of the batch object and the item written back as they came",
    ),
    # Items: content types and bodies.
    Case(
        "contentType-IMAGE",
        "an IMAGE item (base64 body) before two text chunks",
        one_batch(
            [
                {
                    "contentBody": "iVBORw0KGgoAAAANSUhEUg==",
                    "contentType": "IMAGE",
                    "contentMetadata": {"alt": "chart"},
                },
                *good_items(),
            ]
        ),
        "ok",
        non_text(1, 2),
        note="the IMAGE item byte-identical, not a chunk, not in the document",
    ),
    Case(
        "contentType-text/html",
        '`contentType: "text/html"`',
        one_batch([{"contentBody": "<p>iVBORw0KGgo</p>", "contentType": "text/html"}, good_items()[0]]),
        "ok",
        non_text(1, 1),
        note="not `TEXT`: byte-identical, not a chunk",
    ),
    Case(
        "contentType-lowercase-text",
        '`contentType: "text"`',
        one_batch([{"contentBody": "Refunds are issued within 5 days.", "contentType": "text"}]),
        "ok",
        contextualized(1),
        note="`contentType` is compared case-insensitively",
    ),
    Case(
        "contentType-missing",
        "an item without `contentType`",
        one_batch([good_items()[0], {"contentBody": "no type"}]),
        f"error: s3://{BUCKET}/{KEY}: fileContents[1].contentType: Field required (file {SOURCE})",
    ),
    Case(
        "contentBody-missing",
        "a text item without `contentBody`",
        one_batch([{"contentType": "TEXT"}]),
        f"error: s3://{BUCKET}/{KEY}: fileContents[0].contentBody: Field required",
    ),
    Case(
        "contentBody-null",
        "`contentBody: null`",
        one_batch([{"contentBody": None, "contentType": "TEXT"}]),
        f"error: s3://{BUCKET}/{KEY}: fileContents[0].contentBody: Input should be a valid string",
    ),
    Case(
        "contentBody-number",
        "`contentBody: 42`",
        one_batch([{"contentBody": 42, "contentType": "TEXT"}]),
        f"error: s3://{BUCKET}/{KEY}: fileContents[0].contentBody: Input should be a valid string",
    ),
    Case(
        "contentBody-bytes-array",
        "a binary body as a list of byte values",
        one_batch([{"contentBody": [137, 80, 78, 71], "contentType": "IMAGE"}]),
        f"error: s3://{BUCKET}/{KEY}: fileContents[0].contentBody: Input should be a valid string",
    ),
    Case(
        "non-text-without-body",
        "an IMAGE item without `contentBody`",
        one_batch([{"contentType": "IMAGE", "contentMetadata": {"alt": "chart"}}]),
        f"error: s3://{BUCKET}/{KEY}: fileContents[0].contentBody: Field required",
    ),
    Case(
        "whitespace-only-chunk",
        "a chunk of only spaces, tabs and newlines",
        one_batch([text(" \n\t  \n", {"page": 1})]),
        "ok",
        passed_through_unchanged,
        note="no context: the item unchanged",
    ),
    Case(
        "empty-string-chunk",
        '`contentBody: ""`',
        one_batch([text("", {"page": 1})]),
        "ok",
        passed_through_unchanged,
        note="no context: the item unchanged",
    ),
    Case(
        "odd-unicode-text",
        "emoji, an escaped surrogate pair, RTL, zero-width, NUL, BOM, U+2028",
        raw_batch(
            ('{"fileContents": [{"contentBody": "' + ODD_TEXT + '", "contentType": "TEXT"}]}').encode()
        ),
        "ok",
        contextualized(1),
        note="text byte-identical after the context",
    ),
    Case(
        "lone-surrogate-escape",
        'a chunk ending in an escaped lone surrogate `"\\ud83d"`',
        raw_batch(b'{"fileContents": [{"contentBody": "cut emoji \\ud83d", "contentType": "TEXT"}]}'),
        "ok",
        surrogate_kept,
        note="the escape written back as it came (legal JSON; UTF-8 cannot carry it)",
    ),
    Case(
        "non-finite-metadata",
        "`contentMetadata` holds `NaN`",
        raw_batch(
            b'{"fileContents": [{"contentBody": "x", "contentType": "TEXT", "contentMetadata": {"a": NaN}}]}'
        ),
        f"error: s3://{BUCKET}/{KEY}: fileContents[0].contentMetadata: Value error, metadata holds a number",
    ),
    Case(
        "non-finite-unknown-field",
        "an unknown item field holds `1e400` (would be written as null)",
        raw_batch(b'{"fileContents": [{"contentBody": "x", "contentType": "TEXT", "score": [1, 1e400]}]}'),
        f"error: s3://{BUCKET}/{KEY}: the value of 'score' holds a number that is not finite",
    ),
    # Sizes.
    Case(
        "ten-megabyte-chunk",
        "one 10 MB chunk",
        ten_megabytes,
        "ok",
        contextualized(1),
        note="original 10 MB intact after the context",
    ),
    Case(
        "five-thousand-chunks",
        "one file of 5,000 chunks in 5 batch objects",
        many_chunks,
        "ok",
        chunk_count(5000),
        note="every chunk back once, in order",
    ),
    # Metadata.
    Case(
        "nested-metadata",
        "deep dicts and lists, null, big ints, floats in chunk and file metadata",
        one_batch(
            [
                text(
                    "Refunds are issued within 5 days.",
                    {"d": {"a": [{"b": {"c": [1, [2, [3, {"e": None}]]]}}]}, "big": 2**70, "f": 0.1},
                )
            ],
            file_metadata={"tags": [["x"], {"y": True}]},
        ),
        "ok",
        contextualized(1),
        note="metadata identical (2**70 and 0.1 round-trip)",
    ),
    Case(
        "odd-metadata-keys",
        "metadata keys: empty, dotted, unicode, `$`, spaces, very long",
        one_batch(
            [
                text(
                    "Refunds are issued within 5 days.",
                    {"": 1, "a.b": 2, "ü 文": 3, "$where": 4, " padded ": 5, "k" * 500: 6},
                )
            ]
        ),
        "ok",
        contextualized(1),
        note="metadata identical",
    ),
    Case(
        "metadata-100kb-value",
        "a 100 KB chunk metadata value (past S3 Vectors' 2 KB and 40 KB)",
        one_batch([text("Refunds are issued within 5 days.", {"blob": "v" * 100_000})]),
        "ok",
        no_context_copy,
        note="user metadata kept whole; context in the body only, no `ckb_context`",
    ),
    Case(
        "file-metadata-past-limit",
        "3 KB of file metadata (merged into every chunk's)",
        one_batch(good_items(), file_metadata={"notes": "n" * 3000}),
        "ok",
        no_context_copy,
        note="no `ckb_context` on any chunk; `fileMetadata` echoed whole",
    ),
    Case(
        "metadata-near-limit",
        "chunk metadata 1,490 bytes as JSON: room for a few bytes of context",
        one_batch([text("Refunds are issued within 5 days.", {"pad": "x" * 1480})]),
        "ok",
        context_copy_capped,
        note="`ckb_context` cut to the room left (2,048 bytes less 512 for the KB's keys), ending in `…`",
    ),
    Case(
        "users-own-ckb_context",
        f"the chunk's metadata already has `{METADATA_KEY}`",
        one_batch([text("Refunds are issued within 5 days.", {METADATA_KEY: "the user's own value"})]),
        "ok",
        users_own_key_kept,
        note="the user's `ckb_context` kept; context in the body only",
    ),
    # S3 keys.
    Case(
        "odd-s3-keys",
        "spaces, `+`, `%20`, unicode and parentheses in the batch key and source URI",
        staged(
            {ODD_KEY: {"fileContents": good_items()}},
            [file_entry("s3://src/My Docs+ü%20文件/a+b c.md", [ODD_KEY])],
        ),
        "ok",
        output_key_is_inside_the_shared_directory,
        note="output key = the keys' shared directory + `OUTPUT_PREFIX` + the rest, byte for byte",
    ),
    Case(
        "long-s3-key",
        "a 1,003-byte batch key (output key exactly 1,024 bytes)",
        staged({LONG_KEY: {"fileContents": good_items()}}, [file_entry(SOURCE, [LONG_KEY])]),
        "ok",
        output_key_is_inside_the_shared_directory,
        note="output key = shared directory + `OUTPUT_PREFIX` + the rest (1,024 bytes)",
    ),
    Case(
        "s3-key-too-long-for-output",
        "the second file's key is 1,009 bytes: 1,030 with the output prefix",
        two_files({TOO_LONG_KEY: {"fileContents": good_items()}}, [TOO_LONG_KEY]),
        "ok",
        shortened_output_key,
        note="a shorter output key, the same on every call: a hash in place of the key's middle",
    ),
]


# --- running -----------------------------------------------------------------------------------------------


def run(s3: Any, case: Case) -> Outcome | TransformationError:
    """The case through the real handler: the outcome, or the TransformationError it raised."""
    s3.create_bucket(Bucket=BUCKET)
    raw = case.build(s3)
    try:
        response = handler.lambda_handler(raw, LocalLambdaContext())
    except TransformationError as exc:
        return exc
    return Outcome(s3, raw, response, {})


def test_the_catalogue_is_large_and_its_names_unique() -> None:
    assert len(CASES) >= 32
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_bad_input(s3: Any, captured: pytest.CaptureFixture[str], case: Case) -> None:
    captured.readouterr()
    result = run(s3, case)
    if case.expect.startswith("error: "):
        assert isinstance(result, case.error), f"expected {case.error.__name__}, got {result!r}"
        assert case.expect.removeprefix("error: ") in str(result)
        assert output_keys(s3) == [], "an error must leave no output for any file of the event"
        return
    assert case.expect == "ok"
    assert isinstance(result, Outcome), f"expected success, got {result!r}"
    summaries = [line for line in output_lines(captured) if line.get("message") == "transformation complete"]
    outcome = Outcome(result.s3, result.event, result.response, summaries[-1])
    assert_ok(outcome)
    if case.check is not None:
        case.check(outcome)


# --- the table for docs/RELIABILITY.md ---------------------------------------------------------------------


def describe(outcome: Outcome, note: str) -> str:
    """What a successful call did, in a table cell."""
    s = outcome.summary
    parts = [f"{len(outcome.response['outputFiles'])} file(s)", f"{s['chunks_in']} chunk(s)"]
    for key, label in (
        ("chunks_contextualized", "contextualized"),
        ("chunks_passed_through", "passed through"),
        ("non_text_items", "non-text item(s) untouched"),
        ("empty_documents", "empty document(s)"),
        ("metadata_truncated", f"`{METADATA_KEY}` shortened or left out"),
    ):
        if s.get(key):
            parts.append(f"{s[key]} {label}")
    return "ok: " + ", ".join(parts) + (f"; {note}" if note else "")


def markdown_table() -> str:
    import io
    import logging

    import boto3
    from moto import mock_aws

    from contextual_kb.runtime.observability import logger

    log_handler = logger.registered_handler
    assert isinstance(log_handler, logging.StreamHandler)
    rows = ["| case | input | outcome |", "|---|---|---|"]
    for case in CASES:
        stream = io.StringIO()
        previous = log_handler.setStream(stream)  # type: ignore[arg-type]
        handler.runtime.cache_clear()
        try:
            with mock_aws():
                result = run(boto3.client("s3", region_name="us-east-1"), case)
                if isinstance(result, Outcome):
                    lines = [json.loads(x) for x in stream.getvalue().splitlines() if x.startswith("{")]
                    summary = [x for x in lines if x.get("message") == "transformation complete"][-1]
                    cell = describe(Outcome(result.s3, result.event, result.response, summary), case.note)
                else:
                    message = str(result)
                    message = message if len(message) <= 240 else message[:237] + "..."
                    cell = f"`{type(result).__name__}`: {message}"
        finally:
            if previous is not None:
                log_handler.setStream(previous)
        cell = cell.replace("|", "\\|")
        rows.append(f"| `{case.name}` | {case.input} | {cell} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    # A path to write to, because the handler prints its metrics (EMF) on stdout.
    Path(sys.argv[1]).write_text(markdown_table(), encoding="utf-8")
