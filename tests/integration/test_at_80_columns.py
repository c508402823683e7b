"""`ckb query`, `ckb sync` and `ckb eval --local` read on a real terminal 80 columns wide (a pty; the screen
read back as a person sees it): no field cut into a column of 17 characters, no figure cut to `100.…`, no
flood of failure lines. AWS's answers are stubbed (botocore's Stubber, as in test_kb_cli.py)."""

from __future__ import annotations

import textwrap

from tests.integration.terminal import run

# The child's common part: test_kb_cli's stubbed clients, handed to the CLI, then `ckb ARGS` as the console
# script runs it.
_STUBBED = """
import sys
from tests.integration import test_kb_cli as t
from contextual_kb.query import aws_clients, ingestion
clients = t.Clients()
aws_clients.client = clients.client
ingestion.time.sleep = lambda _: None
for stub in clients.stubs.values():
    stub.activate()
clients.stubs["cloudformation"].add_response("describe_stacks", t.outputs(), {"StackName": "ContextualKb"})
"""


def _child(setup: str, args: list[str]) -> str:
    return (
        _STUBBED
        + textwrap.dedent(setup)
        + f"sys.argv = ['ckb', *{args!r}]\nfrom contextual_kb.cli.main import main\nmain()\n"
    )


_QUERY = """
long_key = "teams/platform/services/payments-gateway/src/ratelimit/strategies/token_bucket_refill.py"
chunk = "def refill(self, now: float) -> None:\\n" + "    tokens += rate * elapsed  # refill\\n" * 40
context = "File " + long_key + ": the token bucket behind outbound API calls. Within: class TokenBucket"
hits = {"retrievalResults": [
    {"content": {"text": context + "\\n\\n" + chunk, "type": "TEXT"},
     "location": {"type": "S3", "s3Location": {"uri": f"s3://contextualkb-source-123456789012/{long_key}{i}"}},
     "score": 0.016, "metadata": {"ckb_context": context}}
    for i in range(20)]}
rt = clients.stubs["bedrock-agent-runtime"]
rt.add_response("retrieve", hits, t.ANY_RETRIEVE)
rt.add_response("rerank", {"results": [{"index": i, "relevanceScore": 0.9 - i / 100} for i in range(20)]},
                t.ANY_RERANK)
"""


def test_query_reads_at_80_columns() -> None:
    lines, code = run(_child(_QUERY, ["query", "how does the bucket refill"]))
    assert code == 0, "\n".join(lines)
    assert all(len(line) <= 80 for line in lines)
    # Five results of the twenty retrieved, each a panel whose title holds rank, scores and the file's name.
    titles = [line for line in lines if line.startswith("╭─ #")]
    assert len(titles) == 5, "\n".join(lines)
    assert "#1 · rerank 0.900 · retrieval 0.016 · " in titles[0]
    assert titles[0].rstrip("─╮ ").endswith("token_bucket_refill.py0")  # the key's tail kept whole
    assert sum("more chars; --full" in line for line in lines) == 5  # each long chunk cut, and said
    assert any("15 more result(s) retrieved, not shown: --show 20" in line for line in lines)
    assert len(lines) < 120, len(lines)  # was 527 lines


def test_query_full_and_show_all_print_everything() -> None:
    lines, code = run(_child(_QUERY, ["query", "refill", "--show", "0", "--full"]), rows=50)
    assert code == 0, "\n".join(lines)
    assert sum(line.startswith("╭─ #") for line in lines) == 20
    assert not any("--full" in line for line in lines)


_SYNC = """
agent = clients.stubs["bedrock-agent"]
agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, t.ANY_LIST_REQUEST)
agent.add_response("start_ingestion_job", t.job("STARTING"), {"knowledgeBaseId": t.KB, "dataSourceId": t.DS})
agent.add_response("get_ingestion_job",
                   t.job("COMPLETE", numberOfDocumentsScanned=210, numberOfNewDocumentsIndexed=10,
                         numberOfDocumentsFailed=200), t.GET_REQUEST)
failed = [t.document(f"s3://bucket/scans/contract-{i:03}.pdf", "FAILED",
                     "The file is encrypted and cannot be parsed.") for i in range(150)]
failed += [t.document(f"s3://bucket/images/photo-{i:03}.heic", "FAILED",
                      "Unsupported file format: heic") for i in range(50)]
agent.add_response("list_knowledge_base_documents", {"documentDetails": failed},
                   {"knowledgeBaseId": t.KB, "dataSourceId": t.DS, "maxResults": 100})
"""


def test_sync_groups_its_failures_at_80_columns_and_does_not_send_unreadable_files_to_doctor() -> None:
    lines, code = run(_child(_SYNC, ["sync", "--interval", "0"]))
    assert code == 1
    text = "\n".join(lines)
    failed = [line for line in lines if line.startswith("failed:")]
    assert len(failed) == 2, text  # one per reason, not 200
    assert failed[0].startswith("failed: 150 document(s): The file is encrypted and cannot be parsed.")
    at = lines.index(failed[0])
    assert lines[at + 1 : at + 5] == [
        "    s3://bucket/scans/contract-000.pdf",
        "    s3://bucket/scans/contract-001.pdf",
        "    s3://bucket/scans/contract-002.pdf",
        "    ... and 147 more (--json lists them all)",
    ]
    assert failed[1] == "failed: 50 document(s): Unsupported file format: heic"
    assert "ckb doctor" not in text  # doctor checks the stack, not the documents
    assert len(lines) < 40, text


def test_sync_json_lists_every_failed_document() -> None:
    import json

    lines, code = run(_child(_SYNC, ["sync", "--interval", "0", "--json"]), columns=200, rows=100)
    assert code == 1
    start = next(i for i, line in enumerate(lines) if line.startswith("{"))
    end = next(i for i, line in enumerate(lines) if line == "}")
    report = json.loads("\n".join(lines[start : end + 1]))
    assert report["status"] == "COMPLETE"
    assert len(report["failedDocuments"]) == 200
    assert report["failedDocuments"][0] == {
        "uri": "s3://bucket/scans/contract-000.pdf",
        "reason": "The file is encrypted and cannot be parsed.",
    }


_CTRL_C = """
agent = clients.stubs["bedrock-agent"]
agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, t.ANY_LIST_REQUEST)
agent.add_response("start_ingestion_job", t.job("STARTING"), {"knowledgeBaseId": t.KB, "dataSourceId": t.DS})
def interrupted(*_args, **_kwargs):
    raise KeyboardInterrupt
ingestion.Ingestion.follow = interrupted
"""


def test_ctrl_c_during_sync_says_the_job_goes_on_and_exits_130() -> None:
    lines, code = run(_child(_CTRL_C, ["sync", "--interval", "0"]))
    assert code == 130, "\n".join(lines)
    text = " ".join(lines)
    assert "ingestion job JOB1234567 goes on in AWS" in text
    assert "`ckb sync` follows it again" in text


_CTRL_C_WAITING = """
agent = clients.stubs["bedrock-agent"]
def interrupted(*_args, **_kwargs):
    raise KeyboardInterrupt
ingestion.Ingestion.start = interrupted
"""


def test_ctrl_c_while_waiting_to_start_says_what_goes_on_and_exits_130() -> None:
    lines, code = run(_child(_CTRL_C_WAITING, ["sync", "--interval", "0"]))
    assert code == 130, "\n".join(lines)
    said = " ".join(" ".join(lines).split())  # the terminal wrapped the line
    assert "goes on in AWS (Ctrl-C does not stop it); `ckb sync` follows it, or starts one" in said


_EVAL = """
import json, pathlib, tempfile
folder = pathlib.Path(tempfile.mkdtemp())
documents = [{"doc_id": f"doc{d}", "original_uuid": f"u{d}", "content": "",
              "chunks": [{"chunk_id": f"doc{d}_{i}", "original_index": i,
                          "content": f"def handler_{d}_{i}(): return {i}"} for i in range(3)]}
             for d in range(4)]
for document in documents:
    document["content"] = "\\n".join(c["content"] for c in document["chunks"])
(folder / "corpus.json").write_text(json.dumps(documents))
(folder / "queries.jsonl").write_text("\\n".join(
    json.dumps({"query": f"handler {d} {i}", "golden_chunk_uuids": [[f"u{d}", i]]})
    for d, i in ((0, 1), (2, 2), (3, 0))))
sys.argv = ["ckb", "eval", "--local", "--corpus", str(folder / "corpus.json"),
            "--queries", str(folder / "queries.jsonl"), "--k", "1,5,10",
            "--strategies", "none,structural,claude",
            "--analyzers", "index,code-aware,opensearch-builtin,plain"]
"""


def test_eval_local_keeps_its_figures_whole_at_80_columns() -> None:
    code = (
        _STUBBED.split("from tests", maxsplit=1)[0]
        + textwrap.dedent(_EVAL)
        + "from contextual_kb.cli.main import main\nmain()\n"
    )
    lines, status = run(code)
    text = "\n".join(lines)
    assert status == 0, text
    # The README's line: twelve rows, seven columns, every figure and label whole (was `100.…`).
    header = next(line for line in lines if line.lstrip().startswith("chunks"))
    assert header.split() == ["chunks", "retrieval", "P@1", "P@5", "P@10", "R@10", "MRR"]
    rows = [line for line in lines if line.startswith((" raw", " structural", " claude (stand-in)"))]
    assert len(rows) == 12, text
    assert all(len(row.split()[-5:]) == 5 and "…" not in row for row in rows), text
    assert "100.00" in text
    assert all(len(line) <= 80 for line in lines)


def _eval_screen(columns: int) -> tuple[list[str], str]:
    code = (
        _STUBBED.split("from tests", maxsplit=1)[0]
        + textwrap.dedent(_EVAL)
        + "from contextual_kb.cli.main import main\nmain()\n"
    )
    lines, status = run(code, columns=columns)
    text = "\n".join(lines)
    assert status == 0, text
    start = next(i for i, line in enumerate(lines) if "gain over raw chunks" in line)
    start = next(i for i in range(start, len(lines)) if lines[i].endswith("(sign-test p):"))  # prose wraps
    return lines[start + 1 :], text


def test_eval_local_keeps_each_gain_on_its_line_at_80_columns() -> None:
    """The 'P@k gain' lines were 81 characters: the terminal put each one's '(p 1)' on a line of its own."""
    gains, text = _eval_screen(80)
    # Eight rows against raw chunks (two strategies by four analyzers), each whole on one line.
    assert len(gains) == 8, text
    assert all(line.startswith("  ") and line.endswith(" down (p 1)") for line in gains), text
    assert all(len(line) <= 80 for line in gains), text


def test_eval_local_gains_too_wide_for_the_terminal_put_each_label_above_its_figures() -> None:
    gains, text = _eval_screen(60)
    labels, figures = gains[0::2], gains[1::2]
    assert len(labels) == len(figures) == 8, text
    assert labels[-1].strip() == "claude (stand-in), bm25 plain", text
    assert figures[-1].split() == ["+33.33", "[-32.00,", "+98.67]", "1", "up,", "0", "down", "(p", "1)"], text
    assert all(len(line) <= 60 for line in gains), text
