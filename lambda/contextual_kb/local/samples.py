"""Writes the sample events under ``events/``: each a KB event plus the batch objects it points to.

Run ``python -m contextual_kb.local.samples`` from the repository root to regenerate them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contextual_kb.local.kb_chunking import fixed_size_chunks
from contextual_kb.local.kb_staging import StagedFile, batch_keys_for, batch_objects, build_event

BUCKET = "contextual-kb-intermediate-local"
# A 1x1 PNG: stands for the non-text content a parser may hand over with the chunks.
PIXEL_PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
SOURCE_BUCKET = "contextual-kb-source-local"


def _uri(name: str) -> str:
    return f"s3://{SOURCE_BUCKET}/{name}"


def _write(out: Path, event: dict[str, Any], objects: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "event.json").write_text(json.dumps(event, indent=2) + "\n", encoding="utf-8")
    for key, body in objects.items():
        path = out / "objects" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _file(
    name: str,
    text: str,
    *,
    max_tokens: int,
    overlap: int,
    per_batch: int,
    file_metadata: dict[str, Any] | None,
    page_numbers: bool = False,
) -> tuple[StagedFile, dict[str, Any]]:
    chunks = fixed_size_chunks(text, max_tokens=max_tokens, overlap_percentage=overlap)
    chunk_metadata = (
        [{"x-amz-bedrock-kb-document-page-number": 1 + i // 4} for i in range(len(chunks))]
        if page_numbers
        else None
    )
    batches = batch_objects(chunks, chunks_per_batch=per_batch, chunk_metadata=chunk_metadata)
    keys = batch_keys_for(_uri(name), len(batches))
    return StagedFile(_uri(name), keys, chunks, file_metadata), dict(zip(keys, batches, strict=True))


def write_samples(documents: Path, out: Path) -> list[Path]:
    runbook = (documents / "payments-runbook.md").read_text(encoding="utf-8")
    source = (documents / "token_bucket.py").read_text(encoding="utf-8")
    contract = (documents / "master-services-agreement.txt").read_text(encoding="utf-8")
    written: list[Path] = []

    def emit(name: str, *files: tuple[StagedFile, dict[str, Any]], event_patch: Any = None) -> None:
        event = build_event(BUCKET, [f for f, _ in files])
        if event_patch:
            event_patch(event)
        objects = {key: body for _, objs in files for key, body in objs.items()}
        _write(out / name, event, objects)
        written.append(out / name)

    emit(
        "markdown",
        _file(
            "docs/payments-runbook.md",
            runbook,
            max_tokens=120,
            overlap=20,
            per_batch=50,
            file_metadata={"team": "payments", "doc_type": "runbook"},
        ),
    )
    emit(
        "source-code",
        _file(
            "src/ratelimit/token_bucket.py",
            source,
            max_tokens=150,
            overlap=10,
            per_batch=50,
            file_metadata={"language": "python", "repository": "platform-libs"},
        ),
    )
    emit(
        "multi-batch",
        _file(
            "contracts/northwind-msa.txt",
            contract,
            max_tokens=80,
            overlap=20,
            per_batch=3,
            file_metadata={"counterparty": "Contoso Retail plc", "year": 2026},
            page_numbers=True,
        ),
    )

    no_metadata, objects = _file(
        "notes/untitled.txt", contract[:900], max_tokens=60, overlap=0, per_batch=10, file_metadata=None
    )
    # A non-text item rides along in the same batch: it must come back untouched.
    first_key = no_metadata.batch_keys[0]
    objects[first_key]["fileContents"].append(
        {
            "contentBody": PIXEL_PNG_BASE64,
            "contentType": "IMAGE",
            "contentMetadata": {"x-amz-bedrock-kb-image-index": 0},
        }
    )
    emit("no-file-metadata", (no_metadata, objects))

    def drop_batches(event: dict[str, Any]) -> None:
        del event["inputFiles"][1]["contentBatches"]

    emit(
        "malformed-event",
        _file(
            "docs/payments-runbook.md", runbook, max_tokens=200, overlap=20, per_batch=50, file_metadata={}
        ),
        _file(
            "src/ratelimit/token_bucket.py",
            source,
            max_tokens=200,
            overlap=20,
            per_batch=50,
            file_metadata={},
        ),
        event_patch=drop_batches,
    )

    staged, objects = _file(
        "src/ratelimit/token_bucket.py", source, max_tokens=200, overlap=20, per_batch=2, file_metadata={}
    )
    del objects[staged.batch_keys[-1]]["fileContents"][0]["contentBody"]
    emit("malformed-batch", (staged, objects))

    # Chunking strategy NONE: each document whole, one item in one batch; run with CHUNKING=structure.
    emit(
        "whole-documents",
        _whole("docs/payments-runbook.md", runbook, {"team": "payments", "doc_type": "runbook"}),
        _whole("src/ratelimit/token_bucket.py", source, {"language": "python"}),
        _whole("contracts/northwind-msa.txt", contract, None),
    )
    return written


def _whole(name: str, text: str, file_metadata: dict[str, Any] | None) -> tuple[StagedFile, dict[str, Any]]:
    """A document as a data source with chunking strategy NONE hands it over: one text item, whole."""
    batches = batch_objects([text], chunks_per_batch=1)
    keys = batch_keys_for(_uri(name), len(batches))
    return StagedFile(_uri(name), keys, [text], file_metadata), dict(zip(keys, batches, strict=True))


if __name__ == "__main__":
    root = Path.cwd() / "events"
    for path in write_samples(root / "documents", root):
        print(path)
