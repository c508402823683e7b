"""The deployed index's analysis run by the real engine (Lucene 9.12, as OpenSearch 2.19 runs it) agrees,
token for token, with the Python emulation that ``ckb eval``'s ``index`` rows use (evaluation/lexical.py).
The analyzer is built from the exact analysis the stack deploys (query/index_definition.py). `make test`
builds the engine first (`make lucene`) wherever a JDK is installed; without Java this is skipped."""

from __future__ import annotations

import shutil

import pytest

from contextual_kb.evaluation import lucene
from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.query.index_definition import ANALYSIS, TEXT_ANALYZER, index_body

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="no Java: Lucene cannot run here")

SAMPLE = [
    # code: camelCase, PascalCase, snake_case, dunder, dotted paths, members, acronyms, digits
    "getUserName parse_http_header os.path.join self._cache[key] __init__ DiffExecutor max_tokens",
    "HTTPServer XMLHttpRequest2 IOException AVCodecContext PowerShot500 SD500 j2se IPv4 x86_64 utf8",
    "std::vector<int> a:b index.end.0 v1.2.3-beta 0xDEADbeef foo->bar x==y a+b #include <stdio.h>",
    "simpleimage:maven jib:dockerBuild org.apache.lucene.util.Version ${HOME}/.cache C:\\Users\\me",
    # numbers with units, prose, stemming, stop words, possessives
    "10ms 2.5GB 1,000,000 rows 3.14 99% $5 12:30 2026-11-25 1e-9",
    "What does the HTTPServer do? How is it running? The quick brown foxes ran, runs and jumped.",
    "John's O'Neil's users' wi-fi it's internal international intervals adding added generously",
    "email me at foo.bar@example.com or see https://example.com/a_b?c=d#frag",
    # non-ASCII, CJK, kana, Hangul, Thai, Hebrew, emoji
    "naïve café Straße ÀÉÎõü Ωμέγα ΣΟΦΟΣ İstanbul résumé’s",
    "東京都に行きます カタカナ ひらがな 한국어 ภาษาไทย עברית 123",
    "emoji😀test 👍🏽 👨‍👩‍👧 🇫🇷 1️⃣ © ™ ☺ ❌ ✅",
    "a" * 300 + " " + "B" * 260 + "x",
    "",
    "--- ___ ... !!!",
]


def test_the_engine_is_lucene_9_12_as_in_opensearch_2_19() -> None:
    assert lucene.version().startswith("9.12."), lucene.version()


def test_each_analysis_setting_is_built_by_the_lucene_factory_it_maps_to() -> None:
    assert index_body(1024)["settings"]["analysis"] is ANALYSIS
    spec = lucene.lucene_spec(ANALYSIS, TEXT_ANALYZER)
    assert lucene.chain(spec) == [lucene.FACTORIES[step.factory] for step in spec.steps]


def test_lucene_and_the_python_emulation_give_the_same_tokens() -> None:
    engine = lucene.analyze(SAMPLE)
    python = [ANALYZERS["index"](text) for text in SAMPLE]
    different = [
        (text, mine, theirs)
        for text, mine, theirs in zip(SAMPLE, python, engine, strict=True)
        if mine != theirs
    ]
    assert different == []
    assert engine[1][:2] == ["httpserver", "xmlhttprequest2"]  # upper then upper+lower is no case change


def test_bm25_ranks_by_the_deployed_analysis() -> None:
    texts = ["the refill of tokens in the limiter", "DiffExecutor runs diffs", "nothing relevant here"]
    assert lucene.rank_bm25(texts, ["how are tokens refilled?", "diff executor", "the"], 2) == [[0], [1], []]
