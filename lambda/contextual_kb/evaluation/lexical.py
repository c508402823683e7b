"""Text analysis for lexical (BM25) retrieval, as the Knowledge Base's text field should do it.

``plain``: lowercase word tokens. ``code_aware``: identifiers also split on camelCase and snake_case
(``DiffExecutor`` -> ``diffexecutor diff executor``), English stop words removed, Snowball English
stems. The OpenSearch index's analyzer must use the same chain and the same stop list, so that offline
figures preview the deployed lexical side. Stemming needs PyStemmer (the ``eval`` extra).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

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

# OpenSearch's standard tokenizer (Unicode text segmentation), closely enough for code and English: runs of
# letters, digits and underscores, joined across a dot or an apostrophe between two of them.
_UNICODE_STANDARD_TOKEN = re.compile(r"\w+(?:[.'’]\w+)*")
_CASE_AND_DIGITS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")


def _word_delimiter_graph(options: dict[str, Any]) -> Callable[[list[str]], list[str]]:
    """OpenSearch's ``word_delimiter_graph``: each token split at delimiters (anything not a letter or a
    digit), at case changes and between letters and digits (as the options say); the original kept too
    when ``preserve_original``; a trailing ``'s`` dropped when ``stem_english_possessive``."""
    keep = bool(options.get("preserve_original", False))
    on_case = options.get("split_on_case_change", True)
    on_numerics = options.get("split_on_numerics", True)
    possessive = options.get("stem_english_possessive", True)

    def parts(token: str) -> list[str]:
        found = []
        if possessive and token.endswith(("'s", "’s", "'S")):
            token = token[:-2]
        for piece in re.split(r"[^\w]+|_+", token):
            if not piece:
                continue
            if on_case and on_numerics:
                found.extend(_CASE_AND_DIGITS.findall(piece))
            elif on_numerics:
                found.extend(re.findall(r"[^\W\d_]+|\d+", piece))
            elif on_case:
                found.extend(re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[^\WA-Z_]+|[A-Z]+", piece))
            else:
                found.append(piece)
        return found

    def apply(tokens: list[str]) -> list[str]:
        out = []
        for token in tokens:
            split = parts(token)
            if keep and split != [token]:
                out.append(token)
            out.extend(split)
        return out

    return apply


def _filter(name: str, definitions: dict[str, Any]) -> Callable[[list[str]], list[str]]:
    spec = definitions.get(name, {"type": name})
    kind = spec["type"]
    if kind == "word_delimiter_graph":
        return _word_delimiter_graph(spec)
    if kind == "flatten_graph":  # positions only: the same tokens
        return lambda tokens: tokens
    if kind == "lowercase":
        return lambda tokens: [t.lower() for t in tokens]
    if kind == "stop":
        words = spec.get("stopwords", "_english_")
        stop = LUCENE_ENGLISH_STOP_WORDS if words == "_english_" else frozenset(words)
        return lambda tokens: [t for t in tokens if t not in stop]
    if kind in {"snowball", "stemmer", "porter_stem"}:
        language = str(spec.get("language", "porter" if kind == "porter_stem" else "english")).lower()
        # Lucene: snowball English and stemmer porter2 are Snowball's English; stemmer english is Porter's.
        algorithm = "english" if (kind == "snowball" or language == "porter2") else "porter"
        stem = _stemmer(algorithm)
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
        tokens = _UNICODE_STANDARD_TOKEN.findall(text)
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
