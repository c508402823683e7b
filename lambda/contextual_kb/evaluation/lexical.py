"""Text analysis for lexical (BM25) retrieval, as the Knowledge Base's text field should do it.

``plain``: lowercase word tokens. ``code_aware``: identifiers also split on camelCase and snake_case
(``DiffExecutor`` -> ``diffexecutor diff executor``), English stop words removed, Snowball English
stems. The OpenSearch index's analyzer must use the same chain and the same stop list, so that offline
figures preview the deployed lexical side. Stemming needs PyStemmer (the ``eval`` extra).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import cache
from typing import Any

import regex

from contextual_kb.evaluation import snowball
from contextual_kb.query.index_definition import ANALYSIS, ENGLISH_STOP_WORDS, TEXT_ANALYZER

_WORD = re.compile(r"\w+")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")
_CASE_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def plain_tokens(text: str) -> list[str]:
    return [token.lower() for token in _WORD.findall(text)]


def split_identifier(identifier: str) -> list[str]:
    """``HTTPServerError`` -> ``http server error``; ``max_tokens`` -> ``max tokens``."""
    return [part.lower() for piece in identifier.split("_") for part in _CASE_PART.findall(piece)]


@cache
def _stemmer(algorithm: str = "english") -> Callable[[str], str]:
    import Stemmer  # PyStemmer: Snowball in C

    stem = Stemmer.Stemmer(algorithm)
    return stem.stemWord


def code_aware_tokens(text: str) -> list[str]:
    stem = _stemmer()
    tokens: list[str] = []
    for identifier in _IDENTIFIER.findall(text):
        parts = split_identifier(identifier)
        whole = identifier.lower().strip("_")
        if len(parts) > 1 and whole:
            tokens.append(whole)  # the compound too, so an exact identifier match still counts most
        tokens.extend(parts)
    return [stem(token) for token in tokens if token not in ENGLISH_STOP_WORDS]


# Lucene's default English stop set (OpenSearch's `stop` filter without parameters, `_english_`).
LUCENE_ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
# OpenSearch's standard tokenizer keeps words joined by underscores, or by a dot or an apostrophe between
# letters or digits, as one token; word_delimiter_graph then splits them.
_STANDARD_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[.'][A-Za-z0-9_]+)*")
_DELIMITED_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def opensearch_builtin_tokens(text: str) -> list[str]:
    """What an OpenSearch Serverless index can do with built-in names only (AWS::OpenSearchServerless::Index
    accepts an analyzer as a tokenizer and filter *names*, no filter definitions): tokenizer ``standard``,
    filters ``word_delimiter_graph`` (its defaults: split on case, digits and delimiters, the original not
    kept), ``lowercase``, ``stop`` (``_english_``), ``porter_stem``. An approximation (the tokenizer's
    Unicode rules are simplified), for measuring what the built-in chain costs against ``code_aware_tokens``;
    the stack's index used this chain before its analysis was ours (``index``)."""
    stem = _stemmer("porter")
    tokens = [
        part.lower()
        for token in _STANDARD_TOKEN.findall(text)
        for piece in re.split(r"[._']+", token)
        for part in _DELIMITED_PART.findall(piece)
    ]
    return [stem(token) for token in tokens if token not in LUCENE_ENGLISH_STOP_WORDS]


# --- the deployed index's analysis, read from its definition (query/index_definition.py) ---
# Checked token for token against Lucene 9.12 itself (evaluation/lucene.py; tests/integration/test_lucene.py).

# Lucene's StandardTokenizer grammar (StandardTokenizerImpl.jflex: UAX #29 word breaks, Unicode 9.0) as a
# `regex` pattern, rule for rule: words (letters, digits, `_`, joined across `.` `'` `:` between letters or
# `.` `,` between digits), emoji sequences, South-East Asian runs, one token per Han or Hiragana character.
_X = r"[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]*"
_AH = rf"(?:[\p{{WB=ALetter}}\p{{WB=Hebrew_Letter}}]{_X})"
_NUM = rf"(?:[\p{{WB=Numeric}}[\p{{Block=Halfwidth_And_Fullwidth_Forms}}&&\p{{Nd}}]]{_X})"
_KATAKANA = rf"(?:\p{{WB=Katakana}}{_X})"
_MID_LETTER = rf"(?:[\p{{WB=MidLetter}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{_X})"
_MID_NUM = rf"(?:[\p{{WB=MidNum}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{_X})"
_ENL = rf"(?:\p{{WB=ExtendNumLet}}{_X})"
_HEBREW = rf"(?:\p{{WB=Hebrew_Letter}}{_X})"
_QUOTES = rf"(?:\p{{WB=Single_Quote}}{_X}|\p{{WB=Double_Quote}}{_X}{_HEBREW})"
_RUN = (
    rf"(?:{_KATAKANA}(?:{_ENL}*{_KATAKANA})*"
    rf"|(?:{_HEBREW}{_QUOTES}|{_NUM}(?:(?:{_ENL}*|{_MID_NUM}){_NUM})*|{_AH}(?:(?:{_ENL}*|{_MID_LETTER}){_AH})*)+)"
)
_WORD_RULE = rf"{_ENL}*{_RUN}(?:{_ENL}+{_RUN})*{_ENL}*"
# JFlex's ExtFmtZwjSansPresSel also takes a ZWJ, and its longest match then still joins the next emoji;
# a backtracking regex would stop at the first, so the joins take the ZWJs and the tail takes the rest.
_X_SANS = r"[[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]--[\uFE0E\uFE0F]]*"
_X_SANS_NO_ZWJ = r"[[\p{WB=Format}\p{WB=Extend}]--[\uFE0E\uFE0F]]*"
_EMOJI_CHAR = (
    rf"[\p{{Extended_Pictographic}}[\p{{Emoji}}--[\p{{WB=Regional_Indicator}}0-9#*©®™\u3030\u303D"
    rf"\p{{Emoji_Modifier}}]]]{_X_SANS_NO_ZWJ}"
)
_EMOJI_SEQUENCE = (
    rf"(?:\p{{WB=ZWJ}}*{_EMOJI_CHAR}\uFE0F?"
    rf"|(?:\p{{WB=ZWJ}}*\p{{Emoji_Modifier_Base}}{_X_SANS_NO_ZWJ})?\p{{Emoji_Modifier}}{_X_SANS_NO_ZWJ})"
)
_EMOJI_RULE = (
    rf"{_EMOJI_SEQUENCE}(?:[\U000E0020-\U000E007E]+\U000E007F|(?:\p{{WB=ZWJ}}{_EMOJI_SEQUENCE})*){_X_SANS}"
    rf"|[0-9#*]{_X_SANS}\uFE0F?\u20E3{_X_SANS}"
    rf"|(?:\p{{WB=Regional_Indicator}}{_X}){{2}}"
)
# JFlex takes the longest match; a word never loses to a shorter emoji here, so words are tried first.
_STANDARD = regex.compile(
    rf"{_WORD_RULE}|{_EMOJI_RULE}|(?:\p{{LB=Complex_Context}}{_X})+"
    rf"|\p{{Script=Han}}{_X}|\p{{Script=Hiragana}}{_X}",
    regex.VERSION1,
)


def standard_tokens(text: str, max_token_length: int = 255) -> list[str]:
    """Lucene's (so OpenSearch's) ``standard`` tokenizer: a token longer than ``max_token_length`` is cut
    there and scanning resumes after the cut, as Lucene's scanner does with its buffer that size."""
    tokens: list[str] = []
    position = 0
    while (found := _STANDARD.search(text, position)) is not None:
        start, end = found.span()
        if end - start > max_token_length:
            end = start + max_token_length
        tokens.append(text[start:end])
        position = end
    return tokens


# Lucene's WordDelimiterIterator character classes, from Java's Character.getType. A character outside the
# BMP is two UTF-16 surrogates to Java, which it classes as letter and digit: never a delimiter.
_LOWER, _UPPER, _DIGIT, _DELIMITER = 1, 2, 4, 8
_ALPHA = _LOWER | _UPPER
_CATEGORY_TYPES = {
    "Lu": _UPPER,
    "Ll": _LOWER,
    **dict.fromkeys(("Lt", "Lm", "Lo", "Mn", "Me", "Mc"), _ALPHA),
    **dict.fromkeys(("Nd", "Nl", "No"), _DIGIT),
}


@cache
def _char_type(char: str) -> int:
    if ord(char) > 0xFFFF:
        return _ALPHA | _DIGIT
    return _CATEGORY_TYPES.get(unicodedata.category(char), _DELIMITER)


def _is_break(last: int, kind: int, on_case: bool, on_numerics: bool) -> bool:
    """WordDelimiterIterator.isBreak: only lower to upper is a case change (``HTTPServer`` stays whole,
    ``XMLHttpRequest`` is ``XMLHttp`` ``Request``)."""
    if kind & last:
        return False
    if not on_case and last & _ALPHA and kind & _ALPHA:
        return False
    if last & _UPPER and kind & _ALPHA:
        return False
    alpha_digit = (last & _ALPHA and kind & _DIGIT) or (last & _DIGIT and kind & _ALPHA)
    return on_numerics or not alpha_digit


def _subwords(token: str, on_case: bool, on_numerics: bool, possessive: bool) -> list[tuple[int, int]]:
    """(start, end) of each subword, as Lucene's WordDelimiterIterator finds them."""
    types = [_char_type(c) for c in token]
    start, end = 0, len(token)
    while start < end and types[start] & _DELIMITER:
        start += 1
    while end > start and types[end - 1] & _DELIMITER:
        end -= 1

    def ends_with_possessive(at: int) -> bool:  # only an ASCII apostrophe, as in Lucene
        return (
            possessive
            and at > 2
            and token[at - 2] == "'"
            and token[at - 1] in "sS"
            and bool(types[at - 3] & _ALPHA)
            and (at == end or bool(types[at] & _DELIMITER))
        )

    if ends_with_possessive(end):
        end -= 2
    found, current, skip = [], start, False
    while True:
        if skip:
            current, skip = current + 2, False
        while current < end and types[current] & _DELIMITER:
            current += 1
        if current >= end:
            return found
        last, stop = types[current], current + 1
        while stop < end and not _is_break(last, types[stop], on_case, on_numerics):
            last, stop = types[stop], stop + 1
        skip = stop < end - 1 and ends_with_possessive(stop + 2)
        found.append((current, stop))
        current = stop


_WORD_DELIMITER_OPTIONS = {
    "generate_word_parts": True,
    "generate_number_parts": True,
    "split_on_case_change": True,
    "split_on_numerics": True,
    "stem_english_possessive": True,
    "preserve_original": False,
}
_PLAIN = re.compile(r"[a-z]+")  # no delimiter, no case change, no digit: a token Lucene leaves as it is


def _word_delimiter_graph(options: dict[str, Any]) -> Callable[[list[str]], list[str]]:
    """OpenSearch's ``word_delimiter_graph`` (Lucene's WordDelimiterGraphFilter) with the options this
    emulation knows (others raise): each token split at delimiters, at a lower-to-upper case change and
    between letters and digits; the original kept too when ``preserve_original``; a trailing ``'s``
    dropped when ``stem_english_possessive``. The order is Lucene's (the original, then its parts)."""
    unknown = sorted(set(options) - set(_WORD_DELIMITER_OPTIONS) - {"type"})
    if unknown:
        raise ValueError(f"word_delimiter_graph option {', '.join(unknown)} has no offline counterpart")
    flags = {
        k: str(options.get(k, default)).lower() == "true" for k, default in _WORD_DELIMITER_OPTIONS.items()
    }
    keep, words, numbers = (
        flags["preserve_original"],
        flags["generate_word_parts"],
        flags["generate_number_parts"],
    )
    split = (flags["split_on_case_change"], flags["split_on_numerics"], flags["stem_english_possessive"])

    def delimit(token: str) -> list[str]:
        if _PLAIN.fullmatch(token):
            return [token]
        parts = _subwords(token, *split)
        if not parts:  # delimiters only
            return [token] if keep else []
        if parts == [(0, len(token))]:
            return [token]
        wanted = [
            token[start:end]
            for start, end in parts
            if (words and _char_type(token[start]) & _ALPHA)
            or (numbers and _char_type(token[start]) & _DIGIT)
        ]
        return [token, *wanted] if keep else wanted

    return lambda tokens: [part for token in tokens for part in delimit(token)]


def _lowercase(token: str) -> str:
    """Java's Character.toLowerCase, one character at a time: no final sigma, ``İ`` to ``i``."""
    if token.isascii():
        return token.lower()
    return "".join(c.lower()[0] for c in token)


def _filter(name: str, definitions: dict[str, Any]) -> Callable[[list[str]], list[str]]:
    spec = definitions.get(name, {"type": name})
    kind = spec["type"]
    if kind == "word_delimiter_graph":
        return _word_delimiter_graph(spec)
    if kind == "flatten_graph":  # positions only: the same tokens
        return lambda tokens: tokens
    if kind == "lowercase":
        return lambda tokens: [_lowercase(t) for t in tokens]
    if kind == "stop":
        words = spec.get("stopwords", "_english_")
        stop = LUCENE_ENGLISH_STOP_WORDS if words == "_english_" else frozenset(words)
        return lambda tokens: [t for t in tokens if t not in stop]
    if kind in {"snowball", "stemmer", "porter_stem"}:
        language = str(spec.get("language", "porter" if kind == "porter_stem" else "english")).lower()
        # Lucene: snowball English and stemmer porter2 are Snowball's English (2.2, not PyStemmer's 3.x:
        # evaluation/snowball.py); stemmer english is Porter's.
        if kind == "snowball" or language == "porter2":
            return lambda tokens: [snowball.stem(t) for t in tokens]
        stem = _stemmer("porter")
        return lambda tokens: [stem(t) for t in tokens]
    raise ValueError(f"filter {name!r} ({kind}) has no offline counterpart: add one to evaluation/lexical.py")


def analyzer_from(analysis: dict[str, Any], name: str) -> Callable[[str], list[str]]:
    """A tokenizer that does what an OpenSearch ``custom`` analyzer of ``analysis`` does (standard tokenizer;
    the filters this project uses), so an offline row previews the deployed index."""
    spec = analysis["analyzer"][name]
    if spec.get("type") != "custom" or spec.get("tokenizer") != "standard":
        raise ValueError(f"analyzer {name!r}: only custom analyzers on the standard tokenizer are emulated")
    chain = [_filter(f, analysis.get("filter", {})) for f in spec.get("filter", [])]

    def analyze(text: str) -> list[str]:
        tokens = standard_tokens(text)
        for step in chain:
            tokens = step(tokens)
        return [t for t in tokens if t]

    return analyze


ANALYZERS: dict[str, Callable[[str], list[str]]] = {
    "index": analyzer_from(ANALYSIS, TEXT_ANALYZER),  # the deployed index's analysis
    "code-aware": code_aware_tokens,
    "opensearch-builtin": opensearch_builtin_tokens,  # what built-in names alone allowed (before)
    "plain": plain_tokens,
}
