"""Reading the files a user hands the command line (events, corpora, queries), with errors that name the file,
the line and what was expected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class InputFileError(ValueError):
    """A file that cannot be read as what it should be; the message names the file and says what to give."""


def read_text(path: Path, what: str) -> str:
    if path.is_dir():
        raise InputFileError(f"{path}: a folder, not {what}")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file (expected {what})") from None
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not UTF-8 text (expected {what})") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read it ({exc.strerror or exc}); expected {what}") from None


def read_json(path: Path, what: str) -> Any:
    text = read_text(path, what)
    if not text.strip():
        raise InputFileError(f"{path}: the file is empty; expected {what}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); expected {what}"
        ) from None


def read_jsonl(path: Path, what: str) -> list[Any]:
    """One JSON value per non-blank line."""
    values = []
    for number, line in enumerate(read_text(path, what).splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputFileError(
                f"{path}:{number}: not JSON ({exc.msg}, column {exc.colno}); expected {what}"
            ) from None
    if not values:
        raise InputFileError(f"{path}: the file is empty; expected {what}")
    return values
