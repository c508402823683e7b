"""Errors the transformation raises on purpose. Each names what is wrong and where."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class TransformationError(Exception):
    """Base class: the Lambda fails and the Knowledge Base is expected to mark the file(s) as failed (observed
    and expected; AWS documents no failure scope for the transformation call)."""


class ContractError(TransformationError):
    """The event or a batch object is not what the custom-transformation contract says.

    ``where`` is the object the problem is in (``event`` or an S3 key), ``field`` the path to the
    offending field inside it, ``file`` the source document concerned when known.
    """

    def __init__(self, message: str, *, where: str, field: str = "", file: str | None = None) -> None:
        self.where = where
        self.field = field
        self.file = file
        location = f"{where}: {field}" if field else where
        suffix = f" (file {file})" if file else ""
        super().__init__(f"{location}: {message}{suffix}")

    @classmethod
    def from_validation(
        cls, errors: Iterable[dict[str, Any]], *, where: str, file: str | None = None, prefix: str = ""
    ) -> ContractError:
        """One error from pydantic's error list: the first offending field named, the rest counted."""
        items = list(errors)
        first = items[0]
        field = prefix + format_loc(first.get("loc", ()))
        more = f" (and {len(items) - 1} more problem(s))" if len(items) > 1 else ""
        return cls(f"{first.get('msg', 'invalid')}{more}", where=where, field=field, file=file)


class StorageError(TransformationError):
    """An object could not be read or written (after the SDK's own retries)."""


def format_loc(loc: Iterable[str | int]) -> str:
    """``("inputFiles", 2, "contentBatches", 0, "key")`` -> ``inputFiles[2].contentBatches[0].key``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class ModelError(TransformationError):
    """The model failed for good and ``ON_MODEL_ERROR=fail``: the file is failed rather than contextualized
    without it."""
