"""Text from documents, models or AWS, made safe to show in a terminal."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.text import Text

# C0 and C1 controls but newline and tab, and the bidirectional embeddings, overrides and isolates (which
# can make text read in another order than it is); zero-width joiners stay (emoji, Indic scripts).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(value: str) -> str:
    """``value`` without terminal control characters (escape sequences could retitle or clear the
    terminal, or hide text) or bidirectional overrides; newlines and tabs kept."""
    return _CONTROL.sub("", value)


def plain(value: str) -> Text:
    """``value`` as it is: never read as Rich markup (``[/docs]`` in a chunk would crash the command,
    ``[link=...]`` hide a link), and cleaned of control characters."""
    return Text(clean(value))


# What ends a line for a terminal, a pager or an editor (U+2028/U+2029: Unicode's line and paragraph
# separators), shown escaped in a field that must stay on its line.
_LINE_BREAKS = {
    "\n": "\\n",
    "\r": "\\r",
    "\x0b": "\\v",
    "\x0c": "\\f",
    "\x85": "\\x85",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_LINE_BREAK = re.compile("[" + "".join(_LINE_BREAKS) + "]")


def one_line(value: str) -> str:
    """``value`` on one line: its line breaks shown escaped (``\\n``), so a name holding one cannot start a
    line of its own that reads as the command's (a forged "failed:" line, a forged source). Pure."""
    return _LINE_BREAK.sub(lambda found: _LINE_BREAKS[found.group()], value)


def plain_line(value: str) -> Text:
    """``value`` as one line of plain text: :func:`one_line`, then :func:`plain`."""
    return plain(one_line(value))


def console() -> Console:
    """Standard output: wrapped to the terminal when it is one; never hard-wrapped when piped or redirected,
    so the lines a script reads stay whole."""
    return Console(soft_wrap=not sys.stdout.isatty(), highlight=False)


def error_console() -> Console:
    """Standard error, never hard-wrapped: notes and failure lines stay whole (an S3 key is not cut)."""
    return Console(stderr=True, soft_wrap=True, highlight=False)


def write_json(value: object) -> None:
    """JSON alone on standard output, whatever the terminal."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


@contextmanager
def status_line(first: str, *, output: Console | None = None) -> Iterator[Callable[[str], None]]:
    """A long run's progress: one line on stderr, rewritten as the run moves on and gone when it ends; on a
    terminal only (a log or a pipe gets the results, not the animation). A run that prints meanwhile gives
    its ``output`` console: the line is drawn through it when it is the terminal, so what it prints lands
    above the line, not across it (a console writes past another's live line)."""
    errors = output if output is not None and output.is_terminal else error_console()
    if not errors.is_terminal:
        yield lambda _text: None
        return
    with errors.status(Text(clean(first))) as shown:
        yield lambda text: shown.update(Text(clean(text)))
