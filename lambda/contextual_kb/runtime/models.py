"""The custom-transformation contract as typed models.

Shapes follow the Bedrock Knowledge Bases documentation for POST_CHUNKING transformations (see
``shared/notes/aws-facts.md``). Every model accepts and keeps unknown fields (``extra="allow"``) so that
whatever AWS adds later travels through untouched; dumps use ``exclude_unset`` so nothing is invented.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from contextual_kb.runtime.errors import ContractError

TEXT_CONTENT_TYPE = "TEXT"

_BATCH_NUMBER = re.compile(r"_(\d+)\.json$", re.IGNORECASE)


def _finite(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Refuse numbers JSON cannot carry back (NaN, Infinity, 1e400): written out they would become null,
    silently changing the user's metadata."""
    stack: list[Any] = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, float) and not math.isfinite(current):
            raise ValueError("metadata holds a number that is not finite (NaN, Infinity or out of range)")
        if isinstance(current, dict):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return value


Metadata = Annotated[dict[str, JsonValue], AfterValidator(_finite)]


class _Contract(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=False)

    def dump(self) -> dict[str, Any]:
        """The JSON shape, with only the fields that were set (ours or received)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class S3Location(_Contract):
    uri: str = Field(min_length=1)


class OriginalFileLocation(_Contract):
    type: str
    s3_location: S3Location | None = None

    @property
    def uri(self) -> str | None:
        return self.s3_location.uri if self.s3_location else None


class ContentBatchRef(_Contract):
    key: str = Field(min_length=1)

    @property
    def number(self) -> int | None:
        """The batch's sequence number from its key (``..._3.JSON`` -> 3), if it has one."""
        match = _BATCH_NUMBER.search(self.key)
        return int(match.group(1)) if match else None


class InputFile(_Contract):
    original_file_location: OriginalFileLocation = Field(alias="originalFileLocation")
    file_metadata: Metadata | None = Field(default=None, alias="fileMetadata")
    content_batches: list[ContentBatchRef] = Field(alias="contentBatches")

    @property
    def source(self) -> str:
        """A name for logs and errors: the source URI, or the first batch key."""
        return self.original_file_location.uri or (
            self.content_batches[0].key if self.content_batches else "<unknown>"
        )

    def batches_in_document_order(self) -> list[ContentBatchRef]:
        """Batches in the order their chunks appear in the document.

        The KB numbers a file's batches ``_1.JSON``, ``_2.JSON``, ...; when every key carries a number we
        trust it over the event's order (``_10`` must not come before ``_2``), otherwise the event's order.
        """
        numbers = [b.number for b in self.content_batches]
        if all(n is not None for n in numbers) and len(set(numbers)) == len(numbers):
            return sorted(self.content_batches, key=lambda b: b.number or 0)
        return list(self.content_batches)


class TransformationEvent(_Contract):
    """What the Knowledge Base sends to the Lambda."""

    version: str
    knowledge_base_id: str = Field(alias="knowledgeBaseId")
    data_source_id: str = Field(alias="dataSourceId")
    ingestion_job_id: str = Field(alias="ingestionJobId")
    bucket_name: str = Field(alias="bucketName", min_length=1)
    prior_task: str | None = Field(default=None, alias="priorTask")
    input_files: list[InputFile] = Field(alias="inputFiles")


class ContentItem(_Contract):
    """One chunk (or, for non-text content, one item) of a batch object."""

    content_body: str = Field(alias="contentBody")
    content_type: str = Field(alias="contentType")
    content_metadata: Metadata | None = Field(default=None, alias="contentMetadata")

    @property
    def is_text(self) -> bool:
        return self.content_type.upper() == TEXT_CONTENT_TYPE


class BatchObject(_Contract):
    """The JSON object stored in the intermediate bucket for one content batch."""

    file_contents: list[ContentItem] = Field(alias="fileContents")


class OutputFile(_Contract):
    original_file_location: dict[str, JsonValue] = Field(alias="originalFileLocation")
    file_metadata: dict[str, JsonValue] | None = Field(default=None, alias="fileMetadata")
    content_batches: list[ContentBatchRef] = Field(alias="contentBatches")

    @field_validator("content_batches")
    @classmethod
    def _keys_unique(cls, value: list[ContentBatchRef]) -> list[ContentBatchRef]:
        keys = [b.key for b in value]
        if len(set(keys)) != len(keys):
            raise ValueError("output batch keys must be unique")
        return value


class TransformationResponse(_Contract):
    """What the Lambda returns to the Knowledge Base."""

    output_files: list[OutputFile] = Field(alias="outputFiles")


def parse_event(raw: Any) -> TransformationEvent:
    """The event as a model, or a ContractError naming the field (and the file, when inside one)."""
    if not isinstance(raw, dict):
        raise ContractError(f"expected a JSON object, got {type(raw).__name__}", where="event")
    try:
        event = TransformationEvent.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        # `from None`: pydantic's own message quotes input values, which may be document text.
        raise ContractError.from_validation(
            errors, where="event", file=_file_named_in(raw, errors[0])
        ) from None
    keys: dict[str, str] = {}
    for file in event.input_files:
        for batch in file.content_batches:
            if batch.key in keys:
                raise ContractError(
                    f"batch key {batch.key!r} is listed twice (also for {keys[batch.key]})",
                    where="event",
                    field="inputFiles[].contentBatches[].key",
                    file=file.source,
                )
            keys[batch.key] = file.source
    return event


def parse_batch(body: bytes, *, where: str, file: str) -> BatchObject:
    """A batch object's JSON as a model, or a ContractError naming the object, the field and the file.

    Parsed by ``json`` then validated, not by pydantic's own JSON parser: that one refuses a lone surrogate
    escape (``"\\ud83d"``), which JSON's grammar allows and a KB may hand over (``batch_json`` writes it back
    as it came). One parse, which also refuses what the model would silently change (``_StrictPairs``).
    """
    strict = _StrictPairs(where, file)
    try:
        # UTF-8 only, as JSON between systems must be (RFC 8259); json.loads would guess UTF-16 from bytes.
        raw = json.loads(body.decode("utf-8"), object_pairs_hook=strict)
    except ContractError:
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ContractError(f"not valid JSON ({_json_problem(exc)})", where=where, file=file) from None
    if not isinstance(raw, dict):
        raise ContractError(f"expected a JSON object, got {_json_kind(raw)}", where=where, file=file)
    try:
        batch = BatchObject.model_validate(raw)
    except ValidationError as exc:  # typed fields first: their errors name the field
        raise ContractError.from_validation(exc.errors(), where=where, file=file) from None
    if strict.non_finite is not None:
        raise ContractError(
            f"the value of {strict.non_finite!r} holds a number that is not finite (NaN, Infinity or out of "
            "range)",
            where=where,
            file=file,
        )
    return batch


def batch_json(batch: BatchObject) -> bytes:
    """The batch object as compact JSON in UTF-8. Text that UTF-8 cannot carry (a lone surrogate, received
    as an escape) is written as the escape it came as: the whole object is then ASCII-escaped, which JSON
    readers take as the same text."""
    fields = batch.model_dump(mode="python", by_alias=True, exclude_unset=True)
    text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(fields, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _json_kind(value: Any) -> str:
    kinds = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _json_problem(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg}: line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 at byte {exc.start}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return type(exc).__name__


class _StrictPairs:
    """A JSON object hook: refuses a key twice in one object (the parser would keep the last value and drop
    the other: a whole list of chunks under a duplicated ``fileContents``), and notes the first key holding
    a non-finite number (NaN, Infinity, 1e400: written back it would become null), refused once the model
    has named the field if it is one it types."""

    def __init__(self, where: str, file: str) -> None:
        self.where, self.file = where, file
        self.non_finite: str | None = None

    def __call__(self, items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise ContractError(
                    f"the key {key!r} appears twice in one JSON object (which value is meant is ambiguous)",
                    where=self.where,
                    file=self.file,
                )
            if self.non_finite is None and not _finite_json(value):
                self.non_finite = key
            seen[key] = value
        return seen


def _finite_json(value: Any) -> bool:
    """False for a non-finite float, directly or in nested lists (nested objects are checked on their own)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite_json(v) for v in value)
    return True


def _file_named_in(raw: dict[str, Any], error: Any) -> str | None:
    """The source URI of the input file a validation error points into, read leniently from the raw event."""
    loc = error.get("loc", ()) if isinstance(error, dict) else ()
    if len(loc) < 2 or loc[0] != "inputFiles" or not isinstance(loc[1], int):
        return None
    try:
        return str(raw["inputFiles"][loc[1]]["originalFileLocation"]["s3_location"]["uri"])
    except (KeyError, IndexError, TypeError):
        return None
