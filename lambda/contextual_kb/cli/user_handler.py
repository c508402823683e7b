"""``--handler FILE[:NAME]`` of ``ckb transform`` and ``ckb local``: a user's own SDK handler, run offline
instead of ours (``local/user_handler.py`` loads it); its mistakes said in one line."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from contextual_kb.cli.errors import CliError

if TYPE_CHECKING:
    from rich.console import Console

    from contextual_kb.local.runner import RunResult
    from contextual_kb.local.user_handler import UserHandler

HANDLER_HELP = (
    "Run your own handler (contextual_kb.runtime.sdk, docs/SDK.md) instead of ours: the function NAME "
    "(default handler) of the Python FILE, loaded as Lambda would load it."
)


def load_user_handler(spec: str) -> UserHandler:
    """A user's handler, or one usage line naming --handler (the import's traceback with --debug)."""
    from contextual_kb.cli.errors import usage
    from contextual_kb.local.user_handler import HandlerFileError, load

    try:
        return load(spec)
    except HandlerFileError as exc:
        hint = "--debug shows its traceback" if exc.__cause__ is not None else ""
        raise usage("--handler", str(exc), hint) from exc.__cause__


def user_handler_failed(spec: str, failed: Exception) -> Exception:
    """A user's handler that raised: what it raised, in one line (its traceback with --debug)."""
    from contextual_kb.cli.errors import explain
    from contextual_kb.local.runner import HandlerError
    from contextual_kb.runtime.errors import TransformationError

    error = failed.error if isinstance(failed, HandlerError) else failed
    if not isinstance(error, TransformationError) and explain(error) is not None:
        return failed  # an AWS or input error: said as for our handler
    message = " ".join(str(error).split()) or "(no message)"
    return CliError(
        f"your handler {spec} failed",
        f"{type(error).__name__}: {message}",
        "--debug shows its traceback, --logs its log",
    )


def print_handler_output(out: Console, result: RunResult, count: int) -> None:
    """The first ``count`` chunks of each file as the user's handler wrote them: the metadata keys it set or
    changed (against the Knowledge Base's chunk in the same place) and the start of the text indexed."""
    for given, produced in zip(result.response_inputs(), result.response["outputFiles"], strict=True):
        before = [i for k in given for i in result.before[k].file_contents if i.is_text]
        after = [
            i for b in produced["contentBatches"] for i in result.after[b["key"]].file_contents if i.is_text
        ]
        uri = produced["originalFileLocation"].get("s3_location", {}).get("uri", "?")
        counts = f": {len(before)} chunk(s) in, {len(after)} out"
        out.print(_short(uri, max(20, out.width - len(counts))) + counts, markup=False, highlight=False)
        for index, item in enumerate(after[:count]):
            old = (before[index].content_metadata or {}) if len(before) == len(after) else {}
            new = item.content_metadata or {}
            changed = {key: value for key, value in new.items() if old.get(key, _ABSENT) != value}
            width = max(40, out.width - 6)  # each line fits the terminal (80 columns too)
            out.print(f"  chunk {index + 1}: metadata set{':' if changed else ': (none)'}", markup=False)
            for key, value in changed.items():
                shown = f"{key}={json.dumps(value, ensure_ascii=False)}"
                out.print(f"    {_short(shown, width)}", markup=False, highlight=False)
            out.print(f"    text: {_short(item.content_body, width - 6)}", markup=False, highlight=False)


_ABSENT = object()


def _short(text: str, width: int) -> str:
    squeezed = " ".join(text.split())
    return squeezed if len(squeezed) <= width else squeezed[: width - 1] + "…"
