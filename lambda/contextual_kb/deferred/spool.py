"""The planned records' JSONL lines on local disk while a run is planned: a plan over a large corpus keeps in
memory only what it must know of each record (ids, chunks, sizes), never a document's text. Jobs are cut
once every record's size is known (``records.split_jobs`` evens them), then each job's input is copied out
of the spool and uploaded in parts (boto3's managed transfer), a few megabytes at a time."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import IO, Any

from contextual_kb.deferred.records import Planned

COPY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Spooled:
    """What the run keeps of one record: the record without its line, which is in the spool at ``offset``."""

    record: Planned  # its ``line`` left out (empty)
    size: int  # bytes of its line
    offset: int


class Spool:
    def __init__(self) -> None:
        self._files: dict[str, IO[bytes]] = {}  # one per model: a job's records are contiguous in one
        self._open = ExitStack()
        self.records: list[Spooled] = []

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._open.close()

    def add(self, record: Planned) -> None:
        file = self._files.get(record.model_id)
        if file is None:
            # Closed (and deleted) with the spool, by its ExitStack.
            file = self._open.enter_context(tempfile.TemporaryFile(prefix="ckb-plan-"))  # noqa: SIM115
            self._files[record.model_id] = file
        offset = file.seek(0, 2)
        file.write(record.line)
        self.records.append(Spooled(replace(record, line=b""), len(record.line), offset))

    def pieces(self, indices: Sequence[int]) -> Iterator[bytes]:
        """The lines of records ``indices``, in that order, read in pieces of at most ``COPY_BYTES``
        (neighbouring lines in one read)."""
        ranges: list[tuple[str, int, int]] = []
        for index in indices:
            record = self.records[index]
            model = record.record.model_id
            if ranges and ranges[-1][0] == model and ranges[-1][2] == record.offset:
                ranges[-1] = (model, ranges[-1][1], record.offset + record.size)
            else:
                ranges.append((model, record.offset, record.offset + record.size))
        for model, start, end in ranges:
            file = self._files[model]
            file.seek(start)
            at = start
            while at < end:
                piece = file.read(min(COPY_BYTES, end - at))
                if not piece:
                    raise OSError("the plan's spool file is shorter than what was written to it")
                at += len(piece)
                yield piece

    def upload(self, s3: Any, bucket: str, key: str, indices: Sequence[int]) -> None:
        """Records ``indices`` as one JSONL object (in parts, when large)."""
        with tempfile.TemporaryFile(prefix="ckb-input-") as body:
            for piece in self.pieces(indices):
                body.write(piece)
            body.seek(0)
            s3.upload_fileobj(body, bucket, key, ExtraArgs={"ContentType": "application/jsonl"})
