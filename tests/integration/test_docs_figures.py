"""The figures docs/ quotes from commands that run offline, checked by running the commands as docs/ shows
them and comparing what they print with what the pages say (a table row, a gain with its interval, a
figure in a sentence), or, for a table docs/ holds as generated, the whole table with the command that
regenerates it. Every command a page of docs/ shows is either checked here (or by the test named) or
excused with the reason, so a new one nobody checks fails here.

The codebase benchmark is read from the cache (CKB_DATA_DIR in CI: tests never download it) and passed to
every command explicitly; where it is absent these tests are skipped, saying so (marker ``benchmark``).
Commands of a minute or more are `long` (make test-long).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextual_kb.evaluation.datasets import codebase_dir
from tests.unit.test_readme import fenced

ROOT = Path(__file__).resolve().parents[2]
DATASET = codebase_dir()  # where the benchmark is when it is here; the tests using it are marked
DATA = ["--queries", str(DATASET / "evaluation_dev.jsonl"), "--corpus", str(DATASET / "codebase_chunks.json")]
needs_dataset = pytest.mark.benchmark

# The commands docs/ shows whose output a test compares with what docs/ quotes, and which test.
CHECKED = {
    "ckb eval --local": "eval_table (its default analyses are two of the four run there)",
    "ckb eval --local --analyzers index,code-aware,opensearch-builtin": "eval_table",
    "ckb eval --local --chunkers fixed,structure --chunk-tokens 300": "chunker_table",
    "ckb eval --local --chunkers fixed,structure [--chunk-tokens 300] [--chunk-overlap 0]": "chunker_table",
    "make bench": "eval_table (bench/bm25_contexts.py scores with ckb eval --local's functions)",
    "make bench-chunking": "test_the_chunking_table_is_what_the_bench_prints (its quality part)",
    "python bench/quota_bound.py --orders 20": "test_the_quota_bound_is_what_the_script_prints",
    "ckb contextualize --local --json": "test_contextualize_figures",
    "ckb contextualize --local": "test_contextualize_figures (the same run; --json prints its summary)",
    "$ ckb query": "test_kb_cli.py::test_cli_md_shows_what_query_prints",
    "$ ckb sync": "test_kb_cli.py::test_cli_md_shows_what_sync_prints_after_a_failed_document",
    "python -m tests.integration.test_bad_inputs TABLE.md": "test_the_bad_inputs_catalogue_is_as_run",
    "make synth": "tests/infra/test_readme_commands.py (the README's same command)",
    "make deploy": "tests/infra/test_readme_commands.py (the README's same command)",
    "make destroy": "tests/infra/test_readme_commands.py (the README's same command)",
    'make deploy CDK_CONTEXT="-c alarmEmail=oncall@example.com"': (
        "tests/infra/test_readme_commands.py (the README's same command)"
    ),
    'make deploy CDK_CONTEXT="-c alarmTopicArn=arn:aws:sns:us-east-1:123456789012:oncall"': (
        "tests/infra/test_alarms_and_logs.py (the user's topic, synthesized through the CDK CLI)"
    ),
    'make deploy CDK_CONTEXT="-c modelRequestsPerMinute=900 -c modelTokensPerMinute=3600000"': (
        "tests/infra/test_readme_commands.py (the README's same command)"
    ),
}
# The other commands docs/ shows, and why no test here compares their output with the page.
EXCUSED = {
    "ckb eval --local --strategies none,structural,claude "
    "--analyzers index,code-aware,opensearch-builtin,plain --k 1,5,10": "no output quoted",
    "ckb eval --local --retrieval bm25,dense,hybrid": "needs the dense extra (torch); BM25 rows: eval_table",
    "python -m pytest -q tests/integration/test_security.py tests/infra/test_security_template.py": "tests",
    "python -m pytest tests/integration/test_contextualize.py tests/unit/test_batch_records.py -q": "tests",
    "make bench-query": "timings of the query side on the local Knowledge Base: dated measurements",
    'ckb ask "how does the token bucket refill?"': "test_local_kb.py: upload, sync, query and ask as shown",
    "ckb local --strategy structural": "test_local_kb.py (ckb local used from other processes)",
    "ckb mcp": "test_mcp.py (every tool through the MCP SDK's stdio client)",
    "ckb upload events/documents --prefix docs/": (
        "test_local_kb.py (upload, sync, query as shown, the code as .txt); the warning and the refusal of "
        "token_bucket.py: test_local_kb_promises.py"
    ),
    "ckb sync": "test_local_kb.py and test_local_kb_promises.py (a refused type fails, named)",
    'ckb query "service availability each calendar month"': "test_local_kb.py (the same query)",
    "ckb mcp --transport streamable-http --host 10.0.0.5 --allowed-host mcp.internal.example": (
        "an address this machine does not have; the checks off loopback: test_mcp_http.py"
    ),
    "ckb mcp --stack ContextualKbAttached --region eu-central-1 --tag-key mcp-multirag-kb": (
        "needs AWS; the options are tested on the local stack in test_mcp.py"
    ),
    "ckb mcp --transport streamable-http --port 8000": "test_mcp.py (HTTP bound to loopback)",
    "ckb eval --local --retrieval bm25,dense,hybrid --analyzers opensearch-builtin,code-aware": (
        "needs the dense extra (torch, make eval-dense); its BM25 rows are checked from eval_table"
    ),
    "make eval-dense": "installs torch (~1 GB); its BM25 rows are checked from eval_table",
    "ckb eval --local --queries my_queries.jsonl --corpus my_corpus.json --json": "the reader's own files",
    "ckb eval --stack ContextualKb --k 5,10,20": "a deployed stack (AWS)",
    "ckb eval --local --engine lucene --analyzers index,code-aware": (
        "needs a JDK (make lucene); its bm25s rows are checked from eval_table, Lucene's tokens by "
        "tests/integration/test_lucene.py"
    ),
    "make lucene": "downloads and compiles Lucene (a JDK)",
    "python bench/lucene_bm25.py": "needs a JDK; its agreement is tests/integration/test_lucene.py's",
    "ckb transform events/multi-batch/event.json --show 2": "no output quoted",
    "ckb transform events/markdown/event.json --json": "no output quoted",
    "ckb transform events/malformed-event/event.json": "no output quoted (tests/integration/test_cli.py)",
    "AWS_ENDPOINT_URL_S3=http://127.0.0.1:4566 ckb transform EVENT.json": "the reader's own S3 and event",
    "ckb demo --max-tokens 200 --overlap 10 --strategy structural": "no output quoted",
    "ckb transform events/markdown/event.json --handler examples/path_metadata/handler.py --show 2": (
        "tests/examples/test_offline_run.py (the example README's same command, with --strategy structural)"
    ),
    "python bench/eval_paths.py": "eval --stack against ckb local, 15 minutes: a dated measurement",
    "ckb eval --local --strategies none,structural,claude --analyzers index --k 5,10,20 --json": (
        "bench/eval_paths.py's offline half, in its dated measurement (raw and structural: eval_table's)"
    ),
    "ckb local --strategy claude --max-tokens 300 --overlap 20": "bench/eval_paths.py's, for each strategy",
    "ckb eval --k 5,10,20 --yes --state claude.jsonl --json": "bench/eval_paths.py's, against ckb local",
    "python -m contextual_kb.local.bedrock_standin --port 8765 --rpm 600": "a server; no output quoted",
    "ckb sync --reprocess --stack ContextualKbAttached": "a deployed stack (AWS)",
    "ckb contextualize --dry-run": "a deployed stack (AWS)",
    "ckb contextualize": "a deployed stack (AWS)",
    "aws s3 cp ./docs/ s3://<SourceBucketName>/ --recursive": "AWS",
    "aws bedrock-agent start-ingestion-job --knowledge-base-id <KnowledgeBaseId> --data-source-id "
    "<DataSourceId>": "AWS",
    "make test": "the suite itself",
    "make test-long": "the long suite itself",
    "make bench-contextualize": "timings on a loaded machine: dated measurements, not reproducible figures",
    "python bench/contextualize.py --modes per_chunk,grouped,auto": "timings: dated measurements",
    "make bench-structural": "timings: dated measurements",
    "make bench-cold-start": "timings and the asset's size: dated measurements (the size: test_stack.py)",
    "make bench-batch": "timings; its cost rows are ckb contextualize --local's (test_contextualize_figures)",
    "make bench-batch-at-scale": "timings of 100,000 documents, over an hour and 15+ GB: a dated measurement",
    "make bench-fleet": "timings of a fleet, 15 minutes: dated measurements",
    "python bench/fleet.py --shared-quota 1.0": "timings of a fleet: dated measurements",
    "python bench/fleet.py": "timings of a fleet: dated measurements",
    "python bench/fleet.py --shared-quota 1.0 --burst-seconds 10": "timings of a fleet: dated measurements",
    "python bench/fleet.py --shared-quota 1.0 --tpm 4000000": "timings of a fleet: dated measurements",
    "python bench/fleet.py --fleet 16 --without hold,pacing": "timings of a fleet: dated measurements",
    **{
        f"python bench/fleet.py --shared-quota 1.0 {options}": "timings of a fleet: dated measurements"
        for options in (
            "--window sliding-minute",
            "--window bucket --burst-seconds 1",
            "--window bucket --burst-seconds 10",
            "--fleet 4 --tpm 300000 --model global.anthropic.claude-sonnet-4-6",
            "--fleet 4 --model global.anthropic.claude-sonnet-5",
        )
    },
    "python bench/quota_bound.py --burst 10 --scheduler-burst 5": "the same script as the generated block's",
    "python bench/tokens.py": "needs Mistral's Tekken vocabulary (mistral-common)",
    "make bench-reliability": "fault injection at full size, minutes; tests/reliability runs it scaled down",
    "make bench-load": "timings and memory: dated measurements (make test-long asserts the promises)",
}


def _command(line: str) -> str | None:
    """A fenced line as a command (`.venv/bin/` and the comment dropped; a sample's `$ ckb x` as that), or
    None for other text (output, diagrams)."""
    sample = line.startswith("$ ")
    line = " ".join(re.split(r"\s+#(?:\s|$)", line.removeprefix("$ ").replace(".venv/bin/", ""))[0].split())
    first = next((word for word in line.split() if not re.match(r"[A-Z_][A-Z0-9_]*=", word)), "")
    if first not in {"ckb", "make", "python", "aws"}:
        return None
    return "$ " + " ".join(line.split()[:2]) if sample else line


def doc_commands() -> list[tuple[str, str]]:
    """(page, command) for every command docs/ shows in a fenced block."""
    return [
        (page.name, command)
        for page in sorted((ROOT / "docs").glob("*.md"))
        for line in fenced(page.read_text())
        if (command := _command(line))
    ]


def test_every_command_docs_show_is_checked_or_excused() -> None:
    shown = doc_commands()
    assert len(shown) > 30
    # A command that runs the tests is its own check.
    tests = ("python -m pytest", "make test")
    unknown = sorted(
        {
            f"{page}: {c}"
            for page, c in shown
            if c not in CHECKED and c not in EXCUSED and not c.startswith(tests)
        }
    )
    assert not unknown, f"commands docs/ shows that no test checks and nothing excuses: {unknown}"
    stale = sorted((set(CHECKED) | set(EXCUSED)) - {c for _, c in shown})
    assert not stale, f"listed here but no longer in docs/: {stale}"


# --- reading the pages ------------------------------------------------------------------------------------


def _page(name: str) -> str:
    """A page's text with its lines joined and its emphasis dropped, as a reader reads a sentence."""
    return " ".join((ROOT / "docs" / name).read_text().replace("**", "").split())


def _rows(name: str) -> list[list[str]]:
    """Every table row of a page, as cells without emphasis or code marks."""
    return [
        [cell.strip().replace("**", "").replace("`", "") for cell in line.strip().strip("|").split("|")]
        for line in (ROOT / "docs" / name).read_text().splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]


def assert_row(name: str, labels: list[str], figures: list[str]) -> None:
    """Each row of ``name`` labelled ``labels`` holds ``figures`` next; at least one such row exists."""
    rows = [row for row in _rows(name) if row[: len(labels)] == labels]
    assert rows, f"docs/{name} has no row {labels}"
    for row in rows:
        quoted = row[len(labels) : len(labels) + len(figures)]
        assert quoted == figures, f"docs/{name} row {labels} quotes {quoted}; the command prints {figures}"


def quoted(name: str, pattern: str) -> dict[str, str]:
    """The figures a passage of ``name`` quotes (the named groups of ``pattern``, spaces as one)."""
    found = re.search(pattern, _page(name))
    assert found, f"docs/{name} no longer holds the passage {pattern!r}"
    return found.groupdict()


def assert_quotes(name: str, pattern: str, **printed: str) -> None:
    said = quoted(name, pattern)
    assert said == printed, f"docs/{name} quotes {said}; the command prints {printed}"


# --- running the commands ---------------------------------------------------------------------------------


def ckb(*args: str) -> str:
    """What `ckb ARGS` prints on a terminal wide enough for its tables (stdout)."""
    from contextual_kb.cli.main import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


NUMBER = r"[+-]?\d+(?:\.\d+)?"
GAIN = rf"{NUMBER} \[{NUMBER}, {NUMBER}\]"  # a gain and its 95% interval, as printed: +1.90 [-1.25, +5.05]


def _gains(printed: str) -> dict[str, dict[str, str]]:
    """The gain lines under a table: label -> points, the interval as printed, queries up/down, p."""
    found = {}
    line = re.compile(
        rf"^\s+(?:structural, bm25 )?(?P<label>[\w-]+)\s+(?P<points>{NUMBER}) (?P<interval>\[[^\]]+\])\s+"
        r"(?P<up>\d+) up, (?P<down>\d+) down \(p (?P<p>[\d.e-]+)\)$"
    )
    for text in printed.splitlines():
        if match := line.match(text):
            found[match["label"]] = {k: v for k, v in match.groupdict().items() if k != "label"}
    return found


@pytest.fixture(scope="module")
def eval_table() -> dict[str, Any]:
    """`ckb eval --local` with every lexical analysis docs/ quotes, cut-offs 5, 10, 20: rows by
    (chunks, analysis) as printed, and the P@10 gains over raw chunks."""
    printed = ckb(
        "eval", "--local", "--analyzers", "index,code-aware,opensearch-builtin,plain", "--k", "5,10,20", *DATA
    )
    rows = {}
    for text in printed.splitlines():
        cells = text.split()
        if len(cells) == 8 and cells[0] in ("raw", "structural") and cells[1] == "bm25":
            rows[cells[0], cells[2]] = dict(zip(["p5", "p10", "p20", "r20", "mrr"], cells[3:], strict=True))
    assert len(rows) == 8, printed
    return {"rows": rows, "gains": _gains(printed)}


@needs_dataset
def test_the_retrieval_tables_are_what_ckb_eval_prints(eval_table: dict[str, Any]) -> None:
    rows = eval_table["rows"]

    def p(chunks: str, analysis: str, *keys: str) -> list[str]:
        return [rows[chunks, analysis][k] for k in keys]

    # BENCHMARKS, the first table (Pass@5/10/20): its row labels, and the rows of ckb eval they are.
    first = {
        ("raw", "plain"): ["raw", "plain"],
        ("raw", "code-aware"): ["raw", "code-aware"],
        ("structural", "plain"): ["structural context (CONTEXT_STRATEGY=structural)", "plain"],
        ("structural", "code-aware"): ["structural context", "code-aware"],
        ("raw", "builtin"): ["raw", "OpenSearch built-in chain"],
        ("structural", "builtin"): ["structural context", "OpenSearch built-in chain"],
    }
    for (chunks, analysis), labels in first.items():
        assert_row("BENCHMARKS.md", labels, p(chunks, analysis, "p5", "p10", "p20"))
    # BENCHMARKS, the deployed index's analysis (issue 17) and the dense table's BM25 rows.
    named = {
        "index": "index (ours, deployed now)",
        "code-aware": "code-aware (Python)",
        "builtin": "built-in names only (deployed before)",
    }
    dense = {"code-aware": "BM25, code-aware", "builtin": "BM25, built-in names (opensearch-builtin)"}
    lucene = {"index": "bm25s (k1=1.5), index tokens in Python", "code-aware": "bm25s, code-aware"}
    for chunks in ("raw", "structural"):
        for analysis, label in named.items():
            assert_row(
                "BENCHMARKS.md", [chunks, label], p(chunks, analysis, "p5", "p10", "p20", "r20", "mrr")
            )
        for analysis, label in dense.items():
            assert_row(
                "BENCHMARKS.md", [chunks, label], p(chunks, analysis, "p5", "p10", "p20", "r20", "mrr")
            )
        for analysis, label in lucene.items():
            assert_row(
                "BENCHMARKS.md", [chunks, label], p(chunks, analysis, "p5", "p10", "p20", "r20", "mrr")
            )
    assert_row(
        "BENCHMARKS.md",
        ["+ the definitions that start in the chunk (Defines:, default)"],
        p("structural", "code-aware", "p5", "p10", "p20"),
    )


@needs_dataset
def test_the_analyses_compared_are_what_ckb_eval_prints(eval_table: dict[str, Any]) -> None:
    rows, gains = eval_table["rows"], eval_table["gains"]
    ours, builtin = (
        float(rows["structural", "code-aware"]["p10"]),
        float(rows["structural", "builtin"]["p10"]),
    )
    assert_quotes(
        "BENCHMARKS.md",
        rf"it costs (?P<gap>{NUMBER}) Pass@10 over structural-context chunks against our analyzer "
        rf"\((?P<builtin>{NUMBER}) vs (?P<ours>{NUMBER})\)",
        gap=f"{ours - builtin:.2f}",
        builtin=rows["structural", "builtin"]["p10"],
        ours=rows["structural", "code-aware"]["p10"],
    )
    # HOW-IT-WORKS gives the dev split's figures to one decimal.
    one = {key: {k: f"{float(v):.1f}" for k, v in row.items()} for key, row in rows.items()}
    assert_quotes(
        "HOW-IT-WORKS.md",
        rf"top 10 for (?P<ours10>{NUMBER})% of golden chunks versus (?P<raw10>{NUMBER})% over raw chunks, "
        rf"in the top 5 for (?P<ours5>{NUMBER})% versus (?P<raw5>{NUMBER})%, and in the top 20 for "
        rf"(?P<ours20>{NUMBER})% versus (?P<raw20>{NUMBER})%",
        **{
            f"{who}{k}": one[chunks, "code-aware"][f"p{k}"]
            for who, chunks in (("ours", "structural"), ("raw", "raw"))
            for k in ("5", "10", "20")
        },
    )
    assert_quotes(
        "HOW-IT-WORKS.md",
        rf"\(`index`\), the top 10 holds (?P<index>{NUMBER})% versus (?P<raw>{NUMBER})%",
        index=one["structural", "index"]["p10"],
        raw=one["raw", "index"]["p10"],
    )
    assert_quotes(
        "OPERATIONS.md",
        rf"it gives Pass@10 (?P<index>{NUMBER}) over structural-context chunks, "
        rf"against (?P<builtin>{NUMBER}) for the built-in names",
        index=rows["structural", "index"]["p10"],
        builtin=rows["structural", "builtin"]["p10"],
    )
    ca = gains["code-aware"]
    assert_quotes(
        "CLI.md",
        rf"structural contexts gain (?P<points>{NUMBER}) points of Pass@10 with code-aware BM25, interval "
        rf"(?P<low>{NUMBER}) to (?P<high>{NUMBER}), (?P<up>\d+) queries up and (?P<down>\d+) down, "
        r"p (?P<p>\d+(?:\.\d+)?)",
        points=ca["points"].lstrip("+"),
        low=ca["interval"].strip("[]").split(", ")[0],
        high=ca["interval"].strip("[]").split(", ")[1],
        up=ca["up"],
        down=ca["down"],
        p=ca["p"],
    )
    said = quoted(
        "BENCHMARKS.md",
        rf"code-aware (?P<ca>{GAIN}), (?P<ca_up>\d+) queries up and (?P<ca_down>\d+) down, "
        r"p (?P<ca_p>\d+(?:\.\d+)?); the deployed index's analysis \(`index`, [^)]*\) "
        rf"(?P<index>{GAIN}), (?P<index_up>\d+) up and (?P<index_down>\d+) down, "
        r"p (?P<index_p>\d+(?:\.\d+)?); "
        r"the built-in names the index used before \(`opensearch-builtin`\) "
        rf"(?P<builtin>{GAIN}), (?P<builtin_up>\d+) up and (?P<builtin_down>\d+) down, "
        r"p (?P<builtin_p>\d+(?:\.\d+)?)",
    )
    short = {"code-aware": "ca", "index": "index", "builtin": "builtin"}
    printed = {
        **{short[name]: f"{gains[name]['points']} {gains[name]['interval']}" for name in short},
        **{f"{short[name]}_{k}": gains[name][k] for name in short for k in ("up", "down", "p")},
    }
    assert said == {k: printed[k] for k in said}, (
        f"docs/BENCHMARKS.md quotes {said}; ckb eval prints {printed}"
    )


@pytest.mark.long
@needs_dataset
def test_the_gains_at_20_are_what_ckb_eval_prints() -> None:
    """BENCHMARKS' and CLI.md's Pass@20 gains, from the command BENCHMARKS names (the middle cut-off, 20)."""
    gains = _gains(
        ckb("eval", "--local", "--analyzers", "index,code-aware,opensearch-builtin", "--k", "10,20,30", *DATA)
    )

    def none(count: str) -> str:
        return "none" if count == "0" else count

    ca, index, builtin = gains["code-aware"], gains["index"], gains["builtin"]
    assert (ca["points"], ca["interval"], ca["up"], ca["down"]) == (
        index["points"],
        index["interval"],
        index["up"],
        index["down"],
    ), gains
    assert (ca["up"], ca["down"], ca["p"]) == (builtin["up"], builtin["down"], builtin["p"]), gains
    assert_quotes(
        "BENCHMARKS.md",
        rf"Pass@20 (?P<ca>{GAIN}) with code-aware and with `index`, (?P<builtin>{GAIN}) with the "
        r"built-in names, (?P<up>\d+) queries up and (?P<down>\w+) down each way, p (?P<p>\d+(?:\.\d+)?)",
        ca=f"{ca['points']} {ca['interval']}",
        builtin=f"{builtin['points']} {builtin['interval']}",
        up=ca["up"],
        down=none(ca["down"]),
        p=ca["p"],
    )
    assert_quotes(
        "CLI.md",
        rf"at Pass@20, (?P<gain>{GAIN}), (?P<up>\d+) up and (?P<down>\w+) down, p (?P<p>\d+(?:\.\d+)?)",
        gain=f"{ca['points']} {ca['interval']}",
        up=ca["up"],
        down=none(ca["down"]),
        p=ca["p"],
    )


@pytest.fixture(scope="module")
def chunker_table() -> dict[str, Any]:
    """`ckb eval --local --chunkers fixed,structure --chunk-tokens 300`: rows by (chunker, analysis), the
    gains of ours over fixed-size by analysis."""
    printed = ckb("eval", "--local", "--chunkers", "fixed,structure", "--chunk-tokens", "300", *DATA)
    rows = {}
    for text in printed.splitlines():
        cells = text.split()
        if len(cells) == 8 and cells[0] in ("fixed", "structure"):
            rows[cells[0], cells[3]] = dict(
                zip(["chunks", "chars", "", "c5", "c10", "c20", "h10"], cells[1:], strict=True)
            )
    assert len(rows) == 4, printed
    return {"rows": rows, "gains": _gains(printed)}


@needs_dataset
def test_the_chunker_comparison_is_what_ckb_eval_prints(chunker_table: dict[str, Any]) -> None:
    rows, gains = chunker_table["rows"], chunker_table["gains"]
    lower = {name: gains[name]["points"].removeprefix("-") for name in ("index", "code-aware")}
    assert all(gains[name]["points"].startswith("-") for name in lower), gains
    fewer = 1 - int(rows["structure", "index"]["chunks"]) / int(rows["fixed", "index"]["chunks"])
    assert_quotes(
        "HOW-IT-WORKS.md",
        rf"Cov@10 (?P<index>{NUMBER}) points lower with the index's analysis and (?P<ca>{NUMBER}) with "
        r"code-aware, not significant; .{0,200}? with (?P<fewer>\d+)% fewer chunks to embed",
        index=lower["index"],
        ca=lower["code-aware"],
        fewer=f"{100 * fewer:.0f}",
    )
    ours, ca = rows["structure", "code-aware"], gains["code-aware"]
    assert_quotes(
        "BENCHMARKS.md",
        r"ours (?P<chunks>\d+) chunks of (?P<chars>\d+) characters on average \(was \d+ of \d+\), "
        rf"Cov@5 / Cov@10 / Cov@20 (?P<c5>{NUMBER}) / (?P<c10>{NUMBER}) / (?P<c20>{NUMBER}) with the "
        rf"code-aware analysis \(was [^)]*\); against fixed-size chunks of the same length, "
        rf"Cov@10 (?P<gain>{GAIN})",
        chunks=ours["chunks"],
        chars=ours["chars"],
        c5=ours["c5"],
        c10=ours["c10"],
        c20=ours["c20"],
        gain=f"{ca['points']} {ca['interval']}",
    )
    # The default size's rows of BENCHMARKS' generated table (all of it: the long test below).
    for (chunker, analysis), row in rows.items():
        setting = (
            "max 300 tokens"
            if chunker == "structure"
            else next(r[1] for r in _rows("BENCHMARKS.md") if r[0] == "fixed" and r[2] == row["chunks"])
        )
        assert_row(
            "BENCHMARKS.md",
            [chunker, setting, row["chunks"], row["chars"], analysis],
            [row["c5"], row["c10"], row["c20"], row["h10"]],
        )


GENERATED = re.compile(
    r"<!-- generated by: (?P<command>[^(]+?) \([^)]*\) -->\n(?P<table>.*?)<!-- end of generated -->", re.S
)


@pytest.mark.long
@needs_dataset
def test_the_chunking_table_is_what_the_bench_prints() -> None:
    """BENCHMARKS' chunking table is bench/chunking.py quality's output as printed (about a minute of CPU)."""
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    (block,) = [b for b in GENERATED.finditer(text) if "bench/chunking.py" in b["command"]]
    assert block["command"] == ".venv/bin/python bench/chunking.py quality"
    printed = subprocess.run(
        [sys.executable, "bench/chunking.py", "quality", "--dataset", str(DATASET)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=1200,
    ).stdout
    assert block["table"].strip().splitlines() == printed.strip().splitlines()


@needs_dataset
def test_the_quota_bound_is_what_the_script_prints() -> None:
    """BENCHMARKS' bound on the token-bound fleet (issue 41) is bench/quota_bound.py's output as printed:
    pure arithmetic on the corpus, the same figures on every machine (about 15 s)."""
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    (block,) = [b for b in GENERATED.finditer(text) if "bench/quota_bound.py" in b["command"]]
    assert block["command"] == ".venv/bin/python bench/quota_bound.py --orders 20"
    printed = subprocess.run(
        [sys.executable, "bench/quota_bound.py", "--orders", "20", "--dataset", str(DATASET)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    assert block["table"].strip().splitlines() == printed.strip().splitlines()


@pytest.mark.long
@needs_dataset
def test_contextualize_figures() -> None:
    """BENCHMARKS' batch cost table (records of 40, the default, and of 20) and the ratio DEFERRED quotes."""
    for size, label in (("40", "40 chunks (default)"), ("20", "20 chunks")):
        args = ["contextualize", "--local", "--json", "--corpus", str(DATASET / "codebase_chunks.json")]
        run = json.loads(ckb(*args, *([] if size == "40" else ["--group-size", size])))
        assert_row(
            "BENCHMARKS.md",
            [label],
            [
                f"{run['records']}",
                f"{run['jobs']}",
                f"{run['input_tokens']:,}",
                f"{run['output_tokens']:,}",
                f"${run['cost_usd']:.4f}",
                f"${run['floor_usd']:.4f}",
                f"{run['cost_vs_floor']:.3f}",
                f"{run['pending_after']}",
                f"{run['model_contexts']} of {run['chunks']}",
                f"{run['model_calls_during_reingest']}",
            ],
        )
        if size == "40":
            ratio = f"{run['cost_usd'] / run['floor_usd']:.2f}x"
            assert_quotes(
                "BENCHMARKS.md", r"model cost per million document tokens (?P<r>[\d.]+x) the floor", r=ratio
            )
            assert_quotes(
                "DEFERRED.md", r"on the codebase corpus, (?P<r>[\d.]+x) the on-demand floor", r=ratio
            )


@pytest.mark.long
def test_the_bad_inputs_catalogue_is_as_run(tmp_path: Path) -> None:
    """RELIABILITY's catalogue of bad inputs, as `python -m tests.integration.test_bad_inputs TABLE.md`
    writes it from actual runs of the handler (about 15 s of CPU)."""
    out = tmp_path / "TABLE.md"
    subprocess.run(
        [sys.executable, "-m", "tests.integration.test_bad_inputs", str(out)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=600,
    )
    printed = out.read_text().strip().splitlines()
    page = (ROOT / "docs" / "RELIABILITY.md").read_text().splitlines()
    assert printed[0] in page, "docs/RELIABILITY.md has no catalogue table"
    start = page.index(printed[0])
    shown = page[start : start + next(i for i, line in enumerate(page[start:]) if not line.startswith("|"))]
    assert shown == printed
