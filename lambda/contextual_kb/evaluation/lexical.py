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

# A common English stop list (NLTK's, 127 words). Lucene's 33-word `_english_` set leaves question words
# ("what", "how", "does") that dominate short queries: measured on the codebase benchmark, raw chunks
# 87.6 -> 89.2 Pass@10 with this list (docs/BENCHMARKS.md).
ENGLISH_STOP_WORDS = frozenset(
    "a about above after again against all am an and any are as at be because been before being below "
    "between both but by can did do does doing down during each few for from further had has have having "
    "he her here hers herself him himself his how i if in into is it its itself just me more most my myself "
    "no nor not now of off on once only or other our ours ourselves out over own same she should so some "
    "such than that the their theirs them themselves then there these they this those through to too under "
    "until up very was we were what when where which while who whom why will with you your yours yourself "
    "yourselves".split()
)

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
    the stack's index uses this chain (stacks/vector_store.py)."""
    stem = _stemmer("porter")
    tokens = [
        part.lower()
        for token in _STANDARD_TOKEN.findall(text)
        for piece in re.split(r"[._']+", token)
        for part in _DELIMITED_PART.findall(piece)
    ]
    return [stem(token) for token in tokens if token not in LUCENE_ENGLISH_STOP_WORDS]


ANALYZERS: dict[str, Callable[[str], list[str]]] = {
    "plain": plain_tokens,
    "code-aware": code_aware_tokens,
    "opensearch-builtin": opensearch_builtin_tokens,
}
