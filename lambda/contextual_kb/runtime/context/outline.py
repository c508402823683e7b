"""The outline of a document, read from its text alone: what kind it is, its title or opening comment,
its sections (Markdown headings, numbered clauses) or definitions (classes, functions, ...), and the
names it declares. Pure and deterministic; no parser per language, on purpose: KB documents come in any
language and any state (parsed PDFs, fragments), so we read layout (indentation, headings, keywords)
rather than grammar, and degrade to less context, never to an error.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["code", "markdown", "text"]

CODE_EXTENSIONS = frozenset(
    "py pyi rs c h cc cpp cxx hpp hh hxx java kt kts scala go js jsx mjs cjs ts tsx swift rb php cs "
    "m mm lua pl pm r sh bash zsh ps1 sql dart ex exs erl hs ml fs clj groovy gradle proto tf zig v "
    "nim jl vue svelte".split()
)
MARKDOWN_EXTENSIONS = frozenset("md markdown mdx rst adoc asciidoc org".split())

MAX_LABEL_CHARS = 110
# Longer lines (minified code, tables flattened by a parser) are not read for definitions: no signature is
# that long, and the regular expressions below must stay linear on any input.
MAX_DEFINITION_LINE_CHARS = 400
MAX_SCAN_LINES_FOR_OPENING = 120

_ATX_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_SETEXT_UNDERLINE = re.compile(r"^(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_MARKDOWN_STARTS = frozenset("#`~=-")  # the first character of a heading, a fence or a setext underline
_NUMBERED_HEADING = re.compile(
    r"^(?:(?P<word>ARTICLE|Article|SECTION|Section|CHAPTER|Chapter|PART|Part|SCHEDULE|Schedule)\s+"
    r"(?P<wnum>[0-9IVXLC]+(?:\.[0-9]+)*)|(?P<num>[0-9]+(?:\.[0-9]+)*)\.?)[ \t]+(?P<title>[A-Z][^.]{1,80})$"
)
_CODE_SIGNAL = re.compile(
    r"^\s*(?:def |class |import |from \S+ import |fn |pub |use |impl\b|struct |enum |#include|#define|#if|"
    r"package |public |private |protected |static |return\b|if\s*\(|for\s*\(|while\s*\(|const |let |var |"
    r"function\b|func |namespace |template\s*<|typedef |@\w+|elif |else:|try:|except\b|raise )|"
    r"\bself\.|\)\s*;\s*$|=.*;\s*$|[{}]\s*$|\):\s*$"
)
# Code without semicolons or braces (Python, shell): `assert`, lower-case assignments, brackets left open or
# closed alone. Prose has such lines too, so they count only where comments and fenced examples are set aside.
_SCRIPT_SIGNAL = re.compile(
    r"^\s*assert\b|^\s*[a-z_][\w.]*(?:\[[^\]]*\])?\s*[-+*/|&]?=\s*[^=\s]|[(\[\\]\s*$|^\s*[)\]]+[)\],;]*\s*$"
)
_COMMENTISH = re.compile(r"(?://|/\*|\*|#)")
_MODIFIERS = (
    r"(?:(?:pub(?:\([^)]*\))?|export|default|async|unsafe|const|extern(?:\s+\"[^\"]*\")?|static|public|"
    r"private|protected|internal|abstract|final|sealed|open|override|inline|virtual|partial|data|suspend|"
    r"typedef|template\s*<[^>]*>)\s+)*"
)
_KEYWORD_DEF = re.compile(
    rf"^{_MODIFIERS}(?P<kind>def|class|fn|func|function|struct|enum|trait|interface|impl|mod|module|"
    r"namespace|union|object|record|protocol|extension|macro_rules!)(?![\w!])\s*"
    r"(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_$][\w$]*)?"
)
_TYPE_ALIAS = re.compile(rf"^{_MODIFIERS}type\s+(?P<name>[A-Za-z_]\w*)")
_MACRO = re.compile(r"^#\s*define\s+(?P<name>[A-Za-z_]\w*)")
# A C-family function or method definition: return type(s), a name, an opening parenthesis.
_C_FUNCTION = re.compile(r"^(?:[\w:*&<>,\[\]~]+\s+)+[*&]*(?P<name>[A-Za-z_~][\w:~]*)\s*\((?!.*;\s*$)")
_C_NOT_A_DEF = re.compile(
    r"^(?:return|if|else|for|while|switch|case|do|goto|sizeof|new|delete|throw|catch|using|typedef|"
    r"assert|printf|elif|yield|await|echo|print|raise|with|del|pass|import|from|except|not|lambda|in|is|"
    r"and|or|async|super|self|this)\b"
)
# GNU style: the return type alone on the line above, the name at the start of the line.
_GNU_NAME = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*\((?!.*;\s*$)")
_GNU_TYPE = re.compile(r"^[A-Za-z_][\w\s*]*$")
# C++ `enum class Name` / `enum struct Name`: the keyword after `enum` is not the name.
_SCOPED_ENUM = re.compile(r"\benum\s+(?:class|struct)\s+(?P<name>[A-Za-z_]\w*)")
# A C++ constructor or destructor has no return type, so _C_FUNCTION misses it: `Name(...)`, `~Name(...)`,
# `Name::Name(...)`, accepted only where Name is a class or struct of the same file, with its whole parameter
# list on the line, then only qualifiers and the start of an initializer list or a body, so that calls
# (`Config(...)` in Python, `Meters(x)` in Rust, `Point({1, 2});`) are not taken for one.
_CONSTRUCTOR = re.compile(
    r"^(?:(?:explicit|constexpr|inline)\s+)*(?P<name>(?:[A-Za-z_]\w*::)*~?(?P<type>[A-Za-z_]\w*))"
    r"\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:(?:noexcept|const|override|final)\b\s*)*(?P<rest>[:{].*)?$"
)
_CONSTRUCTOR_TYPES = frozenset(("class", "struct"))
# A bare label line: `public: int f() {}` is a definition, and `private: bool = False` a Python field.
_ACCESS_LABEL = re.compile(r"^(?:public|private|protected)(?:\s+(?:slots|Q_SLOTS))?\s*:(?!:)\s*(?://.*)?$")
_IMPL_TARGET = re.compile(r"\bfor\s+(?P<name>[A-Za-z_]\w*)|^impl(?:<.*?>)?\s+(?P<own>[A-Za-z_]\w*)")
_LICENSE = re.compile(r"copyright|licen[cs]e|spdx|permission is hereby|all rights reserved", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_TYPE_KINDS = frozenset(
    "class struct enum trait interface union object record protocol type impl namespace mod module".split()
)


class OutlineTimeoutError(Exception):
    """The outline could not be read before the time given (``outline(expired=...)``)."""


class _Ticker:
    """Counts lines read; every few thousand asks ``expired`` whether time is up (cheap enough per line)."""

    __slots__ = ("count", "expired")

    def __init__(self, expired: Callable[[], bool] | None) -> None:
        self.count = 0
        self.expired = expired

    def tick(self) -> None:
        self.count += 1
        if not self.count & 4095 and self.expired is not None and self.expired():
            raise OutlineTimeoutError

    def ticks(self, count: int) -> None:
        """``count`` lines at once (a loop that ticks every 1,024 lines)."""
        self.count += count - 1
        self.tick()


@dataclass(frozen=True, slots=True)
class Section:
    """A heading's or a definition's extent in the document and how it is shown."""

    start: int
    end: int
    depth: int
    label: str
    name: str = ""  # a code definition's name ("" for headings, clauses and anonymous definitions)


@dataclass(frozen=True, slots=True)
class Outline:
    kind: Kind
    title: str
    names: tuple[str, ...]
    sections: tuple[Section, ...]
    _starts: tuple[int, ...] = field(default=(), repr=False)
    # Per section (in ``sections`` order), the index of the section below it on the stack of sections open
    # where it starts (-1 for none): every section that encloses a place is on this chain (see ``path_at``).
    _parents: tuple[int, ...] = field(default=(), repr=False)

    def path_at(self, offset: int) -> list[Section]:
        """The sections that enclose ``offset``, outermost first.

        O(depth), not O(sections): a section that encloses ``offset`` starts at or before the last section
        that does, and was still open there, so it lies on that section's chain of parents (the stack of
        open sections when it started); closed ones on the chain are skipped.
        """
        index = bisect.bisect_right(self._starts, offset) - 1
        found = []
        while index >= 0:
            section = self.sections[index]
            if section.start <= offset < section.end:
                found.append(section)
            index = self._parents[index]
        return sorted(found, key=lambda s: (s.depth, s.start))

    def defined_in(self, start: int, end: int) -> list[str]:
        """Names of the definitions that start within ``[start, end)``, in order, each once."""
        first, upto = bisect.bisect_left(self._starts, start), bisect.bisect_left(self._starts, end)
        found = (s.name for s in self.sections[first:upto] if s.name and not _is_dunder(s.name))
        return list(dict.fromkeys(found))


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    text: str

    @property
    def stripped(self) -> str:
        return self.text.strip()

    @property
    def indent(self) -> int:
        expanded = self.text.expandtabs(4)
        return len(expanded) - len(expanded.lstrip())


def outline(text: str, *, path: str | None = None, expired: Callable[[], bool] | None = None) -> Outline:
    """Read the outline of ``text``. ``path`` (the source key), when known, decides the kind by extension.
    ``expired``: asked every few thousand lines; when it says True, ``OutlineTimeoutError`` is raised.
    Linear in the text's size and its sections (O(n log n) with the sort)."""
    ticker = _Ticker(expired)
    lines = _split_lines(text, ticker)
    kind = detect_kind(lines, path)
    if kind == "code":
        sections, names = _code_sections(lines, len(text), ticker)
        title = _opening_comment(lines)
    elif kind == "markdown":
        sections = _sections_from_headings(_markdown_headings(lines, ticker), lines, len(text))
        names = ()
        title = _markdown_title(lines, sections)
    else:
        sections = _numbered_sections(lines, len(text), ticker)
        names = ()
        title = _text_title(lines)
    ordered = tuple(sorted(sections, key=lambda s: (s.start, s.depth)))
    return Outline(kind, title, names, ordered, tuple(s.start for s in ordered), _parents(ordered))


def _parents(sections: tuple[Section, ...]) -> tuple[int, ...]:
    """For each section, the top of the stack of sections still open where it starts (then it is pushed).
    Closed sections leave the stack only from its top, so in nested outlines (headings always, code almost
    always) the stack is exactly the enclosing sections. Linear."""
    parents: list[int] = []
    stack: list[int] = []
    for index, section in enumerate(sections):
        while stack and sections[stack[-1]].end <= section.start:
            stack.pop()
        parents.append(stack[-1] if stack else -1)
        stack.append(index)
    return tuple(parents)


def detect_kind(lines: list[_Line], path: str | None) -> Kind:
    extension = path.rsplit(".", 1)[-1].lower() if path and "." in path.rsplit("/", 1)[-1] else ""
    if extension in CODE_EXTENSIONS:
        return "code"
    if extension in MARKDOWN_EXTENSIONS:
        return "markdown"
    meaningful = [line for line in lines[:400] if line.stripped]
    if not meaningful:
        return "text"
    signals = [bool(_CODE_SIGNAL.search(line.text[:200])) for line in meaningful]
    if sum(signals) / len(meaningful) >= 0.25:
        return "code"
    # Extension-less code behind a long licence or `#` comment block, or without semicolons: judged again on
    # the lines that are neither comment-like (as Markdown bullets and headings also are) nor fenced examples,
    # with the looser signals too, and a higher bar.
    judged = hits = strong = 0
    fenced = False
    for line, signal in zip(meaningful, signals, strict=True):
        if _FENCE.match(line.text):
            fenced = not fenced
        elif not fenced and (signal or not _COMMENTISH.match(line.stripped)):
            judged += 1
            strong += signal
            hits += signal or bool(_SCRIPT_SIGNAL.search(line.text[:200]))
    # `key = value` settings or a sentence left open with "(" alone do not make code: two strong signals do.
    if strong >= 2 and hits >= 3 and hits >= 0.5 * judged:
        return "code"
    headings = sum(1 for line in meaningful if _ATX_HEADING.match(line.stripped))
    if headings >= 1 and not any(line.stripped.startswith(("#include", "#define")) for line in meaningful):
        return "markdown"
    return "text"


def _split_lines(text: str, ticker: _Ticker) -> list[_Line]:
    lines: list[_Line] = []
    position = 0
    for number, raw in enumerate(text.splitlines(keepends=True)):
        if not number & 1023:
            ticker.ticks(1024)
        lines.append(_Line(position, raw.rstrip("\r\n")))
        position += len(raw)
    return lines


# --- Markdown and plain text ------------------------------------------------------------------------------


def _markdown_headings(lines: list[_Line], ticker: _Ticker) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each ATX or setext heading outside fenced code."""
    found: list[tuple[int, int, str]] = []
    fenced = False
    for index, line in enumerate(lines):
        ticker.tick()
        stripped = line.stripped
        first = stripped[:1]
        if first not in _MARKDOWN_STARTS:  # most lines: nothing to match (a heading, fence or underline)
            continue
        if _FENCE.match(line.text):
            fenced = not fenced
            continue
        if fenced:
            continue
        atx = _ATX_HEADING.match(stripped) if first == "#" else None
        if atx and line.indent < 4:
            found.append((index, len(atx.group(1)), atx.group(2).strip()))
            continue
        underline = _SETEXT_UNDERLINE.match(stripped) if first in "=-" else None
        if underline and index > 0 and lines[index - 1].stripped and line.indent < 4:
            above = lines[index - 1].stripped
            if not _ATX_HEADING.match(above) and not (found and found[-1][0] == index - 1):
                found.append((index - 1, 1 if underline.group(1)[0] == "=" else 2, above))
    return found


def _sections_from_headings(
    headings: list[tuple[int, int, str]], lines: list[_Line], text_length: int
) -> list[Section]:
    """A heading's section runs to the next heading of its level or above. One pass with a stack of the
    headings still open (a scan per heading was quadratic: 40,000 headings took 43 s)."""
    ends = [text_length] * len(headings)
    open_headings: list[int] = []
    for position, (index, level, _) in enumerate(headings):
        while open_headings and headings[open_headings[-1]][1] >= level:
            ends[open_headings.pop()] = lines[index].start
        open_headings.append(position)
    return [
        Section(lines[index].start, end, level, _shorten(title))
        for (index, level, title), end in zip(headings, ends, strict=True)
    ]


def _markdown_title(lines: list[_Line], sections: list[Section]) -> str:
    if lines and lines[0].stripped == "---":  # YAML front matter
        for line in lines[1:40]:
            if line.stripped == "---":
                break
            if line.stripped.lower().startswith("title:"):
                return _shorten(line.stripped[6:].strip().strip("\"'"))
    if sections:
        top = min(s.depth for s in sections)
        return next(s.label for s in sections if s.depth == top)
    return _text_title(lines)


def _numbered_sections(lines: list[_Line], text_length: int, ticker: _Ticker) -> list[Section]:
    """Clauses of contracts, filings and manuals: "ARTICLE IV Termination", "7.2 Limitation of liability"."""
    headings: list[tuple[int, int, str]] = []
    for index, line in enumerate(lines):
        ticker.tick()
        match = _NUMBERED_HEADING.match(line.stripped)
        if not match or len(line.stripped) > 90:
            continue
        number = match.group("wnum") or match.group("num") or ""
        level = (1 if match.group("word") else 2) + number.count(".")
        headings.append((index, level, line.stripped))
    return _sections_from_headings(headings, lines, text_length)


def _text_title(lines: list[_Line]) -> str:
    for line in lines[:20]:
        if line.stripped:
            return _shorten(line.stripped)
    return ""


# --- Code -------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Definition:
    line: int
    indent: int
    kind: str
    name: str
    label: str


def _definition_at(line: _Line, following: list[_Line]) -> _Definition | None:
    text = line.stripped
    if len(text) > MAX_DEFINITION_LINE_CHARS:
        return None
    if (
        not text
        or text.startswith(("//", "/*", "*", "#!", "--"))
        or (text.startswith("#") and not text.startswith("#define"))
    ):
        macro = _MACRO.match(text)
        return _Definition(0, line.indent, "macro", macro.group("name"), _label(text)) if macro else None
    keyword = _KEYWORD_DEF.match(text)
    if keyword:
        kind = keyword.group("kind")
        name = keyword.group("name") or ""
        if kind == "impl":
            target = _IMPL_TARGET.search(text)
            name = (target.group("name") or target.group("own") or "") if target else ""
        if kind == "function" and not name:
            return None
        if kind == "enum" and name in _CONSTRUCTOR_TYPES:
            scoped = _SCOPED_ENUM.search(text)
            name = scoped.group("name") if scoped else ""
        return _Definition(0, line.indent, kind, name, _label(text))
    alias = _TYPE_ALIAS.match(text)
    if alias:
        return _Definition(0, line.indent, "type", alias.group("name"), _label(text))
    function = _C_FUNCTION.match(text)
    if function and not _C_NOT_A_DEF.match(text) and _opens_body(text, following):
        name = function.group("name").split("::")[-1]
        return _Definition(0, line.indent, "function", name, _label(text))
    return None


def _gnu_definition(above: _Line, line: _Line, following: list[_Line]) -> _Definition | None:
    match = _GNU_NAME.match(line.stripped)
    kind_line = above.stripped
    if not match or len(line.stripped) > MAX_DEFINITION_LINE_CHARS or not _GNU_TYPE.match(kind_line):
        return None
    if (
        _C_NOT_A_DEF.match(line.stripped)
        or _C_NOT_A_DEF.match(kind_line)
        or not _opens_body(line.stripped, following)
    ):
        return None
    return _Definition(0, 0, "function", match.group("name"), _label(f"{kind_line} {line.stripped}"))


def _opens_body(text: str, following: list[_Line]) -> bool:
    """A C-family header is a definition if a ``{`` comes before any ``;`` (same line or the next few)."""
    for candidate in [text, *(line.stripped for line in following[:6])]:
        brace, semicolon = candidate.find("{"), candidate.find(";")
        if brace != -1 and (semicolon == -1 or brace < semicolon):
            return True
        if semicolon != -1:
            return False
    return False


def _code_sections(
    lines: list[_Line], text_length: int, ticker: _Ticker
) -> tuple[list[Section], tuple[str, ...]]:
    definitions: list[_Definition] = []
    types: set[str] = set()  # classes and structs so far: a C++ constructor comes after its class
    for index, line in enumerate(lines):
        ticker.tick()
        following = lines[index + 1 : index + 7]
        found = _definition_at(line, following)
        if found is None and index and line.indent == 0:
            found = _gnu_definition(lines[index - 1], line, following)
        if found is None and types:
            found = _constructor_at(line, following, types)
        if found:
            found.line = index
            definitions.append(found)
            if found.kind in _CONSTRUCTOR_TYPES and found.name:
                types.add(found.name)
    sections: list[Section] = []
    for definition in definitions:
        end_line = _scope_end(lines, definition.line, definition.indent, ticker)
        end = lines[end_line].start if end_line < len(lines) else text_length
        sections.append(
            Section(lines[definition.line].start, end, definition.indent, definition.label, definition.name)
        )
    return sections, _declared_names(definitions)


def _constructor_at(line: _Line, following: list[_Line], types: set[str]) -> _Definition | None:
    text = line.stripped
    if len(text) > MAX_DEFINITION_LINE_CHARS:
        return None
    match = _CONSTRUCTOR.match(text)
    if not match or match.group("type") not in types:
        return None
    if match.group("rest") is None:  # the body or the initializer list opens the next line
        after = next((later.stripped for later in following if later.stripped), "")
        if not after.startswith(("{", ":")):
            return None
    if not _opens_body(text, following):
        return None
    return _Definition(0, line.indent, "function", match.group("name").rsplit("::", 1)[-1], _label(text))


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _scope_end(lines: list[_Line], first: int, indent: int, ticker: _Ticker) -> int:
    """Index of the first line after a definition's scope, judged by indentation.

    The header may run over several lines at its own indentation (Rust ``where`` clauses, a ``{`` on the
    next line); the body is what follows, indented deeper; a closing ``}`` at the header's indentation
    belongs to the scope and ends it.
    """
    header_open = not _header_closed(lines[first].stripped)
    index = first + 1
    while index < len(lines):
        ticker.tick()
        line = lines[index]
        text = line.stripped
        if not text:
            index += 1
            continue
        if line.indent > indent:
            if header_open and _header_closed(text):
                header_open = False
            index += 1
            continue
        if text.startswith("}"):
            return index + 1
        if _ACCESS_LABEL.match(text):  # C++ `public:` sits at the class's own indentation, inside it
            index += 1
            continue
        if header_open and (
            text.startswith(("where", "{", ")", "->", ":", "throws", "extends", "implements"))
        ):
            header_open = not _header_closed(text)
            index += 1
            continue
        return index
    return index


def _header_closed(text: str) -> bool:
    code = text.split("//", 1)[0].split(" #", 1)[0].rstrip()
    return code.endswith(("{", ":", ";", "}")) or "{" in code


def _declared_names(definitions: list[_Definition]) -> tuple[str, ...]:
    """Names the file declares: types first, then the outermost functions, in order of appearance."""
    if not definitions:
        return ()
    outermost = min(d.indent for d in definitions)
    ranked = sorted(
        (d for d in definitions if d.name),
        key=lambda d: (d.kind not in _TYPE_KINDS, d.indent > outermost, d.line),
    )
    seen: dict[str, None] = {}
    for definition in ranked:
        if not _is_dunder(definition.name):
            seen.setdefault(definition.name, None)
    return tuple(seen)


def _opening_comment(lines: list[_Line]) -> str:
    """The first comment block or docstring near the top that says what the file is (licences skipped)."""
    blocks: list[str] = []
    index = 0
    limit = min(len(lines), MAX_SCAN_LINES_FOR_OPENING)
    while index < limit:
        text = lines[index].stripped
        if text.startswith(('"""', "'''", 'r"""')):
            block, index = _python_docstring(lines, index)
            blocks.append(block)
            continue
        if text.startswith("/*"):
            block, index = _block_comment(lines, index)
            blocks.append(block)
            continue
        if _is_line_comment(text):
            collected = []
            while index < limit and _is_line_comment(lines[index].stripped):
                collected.append(_strip_line_comment(lines[index].stripped))
                index += 1
            blocks.append(" ".join(collected))
            continue
        if text and _definition_at(lines[index], []) is not None and blocks:
            break
        index += 1
    for block in blocks:
        cleaned = " ".join(block.split())
        if len(cleaned) >= 12 and not _LICENSE.search(cleaned):
            return _first_sentences(cleaned)
    return ""


def _is_line_comment(text: str) -> bool:
    if text.startswith("#!") or text.startswith(("#include", "#define", "#if", "#pragma", "#import")):
        return False
    return text.startswith(("//", "#", "--", ";;"))


def _strip_line_comment(text: str) -> str:
    return text.lstrip("/!#-; ").strip()


def _python_docstring(lines: list[_Line], index: int) -> tuple[str, int]:
    first = lines[index].stripped.lstrip("r")
    quote = first[:3]
    body = first[3:]
    if quote in body:
        return body.split(quote, 1)[0], index + 1
    collected = [body]
    index += 1
    while index < len(lines):
        text = lines[index].stripped
        if quote in text:
            collected.append(text.split(quote, 1)[0])
            return " ".join(collected), index + 1
        collected.append(text)
        index += 1
    return " ".join(collected), index


def _block_comment(lines: list[_Line], index: int) -> tuple[str, int]:
    collected = []
    while index < len(lines):
        text = lines[index].stripped
        done = "*/" in text
        text = text.split("*/", 1)[0]
        collected.append(text.lstrip("/*! ").strip())
        index += 1
        if done:
            break
    return " ".join(part for part in collected if part and not part.startswith("@")), index


# --- Helpers ----------------------------------------------------------------------------------------------


def _label(text: str) -> str:
    text = " ".join(text.split())
    for tail in (" {", "{", ":", "("):
        if text.endswith(tail) and not text.endswith("::"):
            text = text[: -len(tail)].rstrip()
            break
    return _shorten(text)


def _shorten(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    # Only the head can be shown: a 10 MB line is not split whole (4x the limit leaves room for blanks).
    text = text.lstrip()
    head = text[: limit * 4]
    shown = " ".join(head.split())
    if len(shown) <= limit and (len(head) == len(text) or not text[len(head) :].strip()):
        return shown
    return shown[: limit - 1].rstrip() + "…"


def _first_sentences(text: str, limit: int = 200) -> str:
    """Whole sentences up to ``limit`` characters (at least the first, shortened if it is too long)."""
    sentences = _SENTENCE_END.split(text)
    out = sentences[0]
    for sentence in sentences[1:]:
        if len(sentence) < 12 or len(out) + 1 + len(sentence) > limit:  # "1.", "e.g." are not sentences
            break
        out += " " + sentence
    return _shorten(out, limit)
