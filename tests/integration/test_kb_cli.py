"""`ckb upload`, `sync`, `query`, `ask` with the stack found from CloudFormation outputs; AWS APIs stubbed
with botocore's Stubber (S3 through moto, Claude through the Bedrock stand-in)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.query import aws_clients, ingestion
from contextual_kb.query.deployment import Deployment, DeploymentError
from contextual_kb.query.ingestion import Ingestion, IngestionError

REGION = "us-east-1"
KB, DS, BUCKET = "KBID123456", "DSID123456", "ckb-source-bucket"
runner = CliRunner()


def outputs(store: str = "opensearch", extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "Stacks": [
            {
                "StackName": "ContextualKb",
                "CreationTime": "2026-11-22T00:00:00Z",
                "StackStatus": "CREATE_COMPLETE",
                "Outputs": [
                    {"OutputKey": "KnowledgeBaseId", "OutputValue": KB},
                    {"OutputKey": "DataSourceId", "OutputValue": DS},
                    {"OutputKey": "SourceBucketName", "OutputValue": BUCKET},
                    {"OutputKey": "VectorStoreType", "OutputValue": store},
                    *({"OutputKey": k, "OutputValue": v} for k, v in (extra or {}).items()),
                ],
            }
        ]
    }


class Clients:
    """Stubbed clients by service, handed to the CLI through aws_clients.client."""

    def __init__(self) -> None:
        self.clients = {
            name: boto3.client(name, region_name=REGION)
            for name in ("cloudformation", "bedrock-agent", "bedrock-agent-runtime", "cloudwatch")
        }
        self.stubs = {name: Stubber(client) for name, client in self.clients.items()}

    def client(self, service: str, region_name: str) -> Any:
        return (
            self.clients[service]
            if service in self.clients
            else boto3.client(service, region_name=region_name)
        )


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Clients]:
    """``request.param`` (indirect parametrization): more stack outputs."""
    clients = Clients()
    monkeypatch.setattr(aws_clients, "client", clients.client)
    monkeypatch.setattr(ingestion.time, "sleep", lambda _: None)
    for stub in clients.stubs.values():
        stub.activate()
    extra = getattr(request, "param", None)
    clients.stubs["cloudformation"].add_response(
        "describe_stacks", outputs(extra=extra), {"StackName": "ContextualKb"}
    )
    yield clients
    for stub in clients.stubs.values():
        stub.deactivate()


def job(status: str, **statistics: int) -> dict[str, Any]:
    return {
        "ingestionJob": {
            "knowledgeBaseId": KB,
            "dataSourceId": DS,
            "ingestionJobId": "JOB1234567",
            "status": status,
            "statistics": statistics,
            "startedAt": "2026-11-22T00:00:00Z",
            "updatedAt": "2026-11-22T00:00:00Z",
        }
    }


def test_sync_starts_follows_and_reports_every_failed_document(aws: Clients) -> None:
    agent = aws.stubs["bedrock-agent"]
    agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)
    agent.add_response("start_ingestion_job", job("STARTING"), {"knowledgeBaseId": KB, "dataSourceId": DS})
    agent.add_response("get_ingestion_job", job("IN_PROGRESS", numberOfDocumentsScanned=3), GET_REQUEST)
    done = job(
        "COMPLETE", numberOfDocumentsScanned=3, numberOfNewDocumentsIndexed=2, numberOfDocumentsFailed=1
    )
    agent.add_response("get_ingestion_job", done, GET_REQUEST)
    agent.add_response(
        "list_knowledge_base_documents",
        {"documentDetails": [document("s3://b/a.md", "INDEXED")], "nextToken": "n1"},
        {"knowledgeBaseId": KB, "dataSourceId": DS, "maxResults": 100},
    )
    agent.add_response(
        "list_knowledge_base_documents",
        {"documentDetails": [document("s3://b/broken.pdf", "FAILED", "the file is encrypted")]},
        {"knowledgeBaseId": KB, "dataSourceId": DS, "maxResults": 100, "nextToken": "n1"},
    )
    result = runner.invoke(app, ["sync", "--region", REGION, "--interval", "0"])
    assert result.exit_code == 1, result.output  # a document failed
    assert "started ingestion job JOB1234567" in result.output
    assert "numberOfNewDocumentsIndexed" in result.output and "COMPLETE" in result.output
    assert "failed: s3://b/broken.pdf: the file is encrypted" in result.output
    assert "run `ckb doctor`" in result.stderr
    assert "Logs Insights" not in result.stderr  # the Knowledge Base's logs not delivered: no query
    agent.assert_no_pending_responses()


LOG_GROUP = "/aws/vendedlogs/bedrock/knowledge-bases/ContextualKb"


@pytest.mark.parametrize("aws", [{"IngestionLogGroupName": LOG_GROUP}], indirect=True)
def test_sync_ends_the_failure_lines_with_the_query_of_each_failed_documents_reason(aws: Clients) -> None:
    """With the Knowledge Base's ingestion logs delivered (the stack's IngestionLogGroupName), the last
    failure line is the Logs Insights query of this job's failed documents, on that log group, whole."""
    agent = aws.stubs["bedrock-agent"]
    agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)
    agent.add_response("start_ingestion_job", job("STARTING"), {"knowledgeBaseId": KB, "dataSourceId": DS})
    agent.add_response("get_ingestion_job", job("COMPLETE", numberOfDocumentsFailed=2), GET_REQUEST)
    failed = [document(f"s3://b/{n}.pdf", "FAILED", "the file is encrypted") for n in ("a", "b")]
    agent.add_response(
        "list_knowledge_base_documents",
        {"documentDetails": failed},
        {"knowledgeBaseId": KB, "dataSourceId": DS, "maxResults": 100},
    )
    result = runner.invoke(app, ["sync", "--region", REGION, "--interval", "0"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    after = lines.index(next(line for line in lines if line.startswith("failed: s3://b/b.pdf")))
    query = lines[after + 1]
    assert query.startswith(f"each failed document's reason, in CloudWatch Logs Insights on {LOG_GROUP}: ")
    assert query.endswith(
        "fields @timestamp, event.document_location.s3_location.uri as document, event.status as status, "
        "event.status_reasons.0 as reason, event.status_reasons.1 as more"
        ' | filter event_type = "StartIngestionJob.ResourceStatusChanged"'
        ' and event.ingestion_job_id = "JOB1234567" and event.status like /FAILED$/ | sort @timestamp asc'
    )
    agent.assert_no_pending_responses()


def test_sync_follows_a_job_already_running_instead_of_starting_one(aws: Clients) -> None:
    agent = aws.stubs["bedrock-agent"]
    running = {
        "ingestionJobSummaries": [
            {
                "knowledgeBaseId": KB,
                "dataSourceId": DS,
                "ingestionJobId": "JOB1234567",
                "status": "IN_PROGRESS",
                "startedAt": "2026-11-22T00:00:00Z",
                "updatedAt": "2026-11-22T00:00:00Z",
            }
        ]
    }
    agent.add_response("list_ingestion_jobs", running, ANY_LIST_REQUEST)
    agent.add_response("get_ingestion_job", job("IN_PROGRESS"), GET_REQUEST)
    agent.add_response("get_ingestion_job", job("COMPLETE", numberOfDocumentsScanned=4), GET_REQUEST)
    metrics(aws, fallbacks=0, chunks=40)
    result = runner.invoke(app, ["sync", "--region", REGION, "--interval", "0"])
    assert result.exit_code == 0, result.output
    assert "already IN_PROGRESS: following it, not starting another" in " ".join(result.output.split())
    assert "ckb doctor" not in result.output
    agent.assert_no_pending_responses()  # and no StartIngestionJob
    aws.stubs["cloudwatch"].assert_no_pending_responses()


def metrics(aws: Clients, *, fallbacks: int, chunks: int) -> None:
    """The function's ContextFallbacks and ChunksIn over the job, as CloudWatch sums them."""
    for value in (fallbacks, chunks):
        aws.stubs["cloudwatch"].add_response(
            "get_metric_statistics",
            {"Label": "m", "Datapoints": [{"Sum": float(value), "Timestamp": "2026-11-22T00:00:30Z"}]},
        )


def test_sync_suggests_the_doctor_when_most_chunks_fell_back(aws: Clients) -> None:
    agent = aws.stubs["bedrock-agent"]
    agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)
    agent.add_response("start_ingestion_job", job("STARTING"), {"knowledgeBaseId": KB, "dataSourceId": DS})
    agent.add_response("get_ingestion_job", job("COMPLETE", numberOfDocumentsScanned=4), GET_REQUEST)
    metrics(aws, fallbacks=30, chunks=40)
    result = runner.invoke(app, ["sync", "--region", REGION, "--interval", "0"])
    assert result.exit_code == 0, result.output  # the job did complete
    assert "30 of 40 chunks got the structural context" in result.stderr
    assert "run `ckb doctor`" in result.stderr


def test_query_prints_a_table_and_json(aws: Clients) -> None:
    rt = aws.stubs["bedrock-agent-runtime"]
    hits = {
        "retrievalResults": [
            {
                "content": {"text": "File pay.py: payments\n\ndef charge(): ...", "type": "TEXT"},
                "location": {"type": "S3", "s3Location": {"uri": "s3://b/pay.py"}},
                "score": 0.61,
                "metadata": {"ckb_context": "File pay.py: payments"},
            }
        ]
    }
    rt.add_response("retrieve", hits, ANY_RETRIEVE)
    rt.add_response("rerank", {"results": [{"index": 0, "relevanceScore": 0.93}]}, ANY_RERANK)
    result = runner.invoke(app, ["query", "how are payments charged", "--region", REGION, "--k", "5"])
    assert result.exit_code == 0, result.output
    assert "s3://b/pay.py" in result.output and "0.930" in result.output and "def charge()" in result.output
    aws.stubs["cloudformation"].add_response("describe_stacks", outputs(), {"StackName": "ContextualKb"})
    rt.add_response("retrieve", hits, ANY_RETRIEVE)
    as_json = runner.invoke(app, ["query", "payments", "--region", REGION, "--no-rerank", "--json"])
    assert as_json.exit_code == 0, as_json.output
    (row,) = json.loads(as_json.stdout)
    assert row["context"] == "File pay.py: payments" and row["text"] == "def charge(): ..."
    assert row["rerank_score"] is None and row["source"] == "s3://b/pay.py"


def test_query_on_s3_vectors_says_it_searches_semantically(
    aws: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfn = aws.stubs["cloudformation"]
    cfn.deactivate()
    aws.stubs["cloudformation"] = Stubber(aws.clients["cloudformation"])
    aws.stubs["cloudformation"].add_response(
        "describe_stacks", outputs("s3vectors"), {"StackName": "ContextualKb"}
    )
    aws.stubs["cloudformation"].activate()
    aws.stubs["bedrock-agent-runtime"].add_response(
        "retrieve",
        {"retrievalResults": []},
        {
            "knowledgeBaseId": KB,
            "retrievalQuery": {"text": "q"},
            "retrievalConfiguration": {
                "vectorSearchConfiguration": {"numberOfResults": 100, "overrideSearchType": "SEMANTIC"}
            },
        },
    )
    result = runner.invoke(app, ["query", "q", "--region", REGION])
    assert result.exit_code == 0, result.output
    assert "semantic search only: S3 Vectors has no lexical index" in result.output
    assert "no results" in result.output


def test_errors_are_clear_and_exit_non_zero(aws: Clients) -> None:
    aws.stubs["bedrock-agent-runtime"].add_client_error(
        "retrieve", "AccessDeniedException", "not authorized", 403
    )
    result = runner.invoke(app, ["query", "q", "--region", REGION])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "Retrieve failed: AccessDeniedException: not authorized" in text
    aws.stubs["cloudformation"].add_response("describe_stacks", outputs(), {"StackName": "ContextualKb"})
    bad = runner.invoke(app, ["query", "q", "--region", "us-east-1", "--reranker", "amazon.rerank-v1:0"])
    assert bad.exit_code == 1
    assert "not offered in us-east-1" in " ".join(bad.output.split())


def test_a_missing_stack_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    client = boto3.client("cloudformation", region_name=REGION)
    with Stubber(client) as stub:
        stub.add_client_error("describe_stacks", "ValidationError", "Stack with id Nope does not exist", 400)
        with pytest.raises(DeploymentError, match=r"Stack with id Nope does not exist.*make deploy"):
            Deployment.from_stack("Nope", REGION, client)
    with Stubber(client) as stub:
        stub.add_response("describe_stacks", {"Stacks": [{**outputs()["Stacks"][0], "Outputs": []}]})
        with pytest.raises(DeploymentError, match="no output KnowledgeBaseId"):
            Deployment.from_stack("ContextualKb", REGION, client)


def test_ingestion_errors_name_the_api() -> None:
    client = boto3.client("bedrock-agent", region_name=REGION)
    with Stubber(client) as stub:
        stub.add_client_error("list_ingestion_jobs", "AccessDeniedException", "no", 403)
        with pytest.raises(IngestionError, match="ListIngestionJobs failed: AccessDeniedException: no"):
            Ingestion(KB, DS, REGION, client).start()


def test_upload_puts_files_and_folders_in_the_source_bucket(aws: Clients, tmp_path: Path) -> None:
    from moto import mock_aws

    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "a.md").write_text("# A")
    (tmp_path / "docs" / "sub" / "b.md").write_text("# B")
    (tmp_path / "c.txt").write_text("C")
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        result = runner.invoke(
            app,
            [
                "upload",
                str(tmp_path / "docs"),
                str(tmp_path / "c.txt"),
                "--prefix",
                "in/",
                "--region",
                REGION,
            ],
        )
        assert result.exit_code == 0, result.output
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert keys == ["in/a.md", "in/c.txt", "in/sub/b.md"]
    assert "uploaded 3 file(s)" in result.output


def test_ask_answers_from_the_reranked_chunks_with_sources(
    aws: Clients, standin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = aws.stubs["bedrock-agent-runtime"]
    hits = {
        "retrievalResults": [
            {
                "content": {"text": "Refunds take 5 days.", "type": "TEXT"},
                "location": {"type": "S3", "s3Location": {"uri": "s3://b/policy.md"}},
                "score": 0.5,
            }
        ]
    }
    rt.add_response("retrieve", hits, ANY_RETRIEVE)
    rt.add_response("rerank", {"results": [{"index": 0, "relevanceScore": 0.9}]}, ANY_RERANK)
    standin.configure(responder=lambda seen: "Refunds take five days [1].")
    result = runner.invoke(app, ["ask", "how long do refunds take", "--region", REGION])
    assert result.exit_code == 0, result.output
    assert "Refunds take five days [1]." in result.output
    assert "[1] s3://b/policy.md" in result.output
    (request,) = standin.seen
    assert '<source n="1" uri="s3://b/policy.md">' in request["messages"][0]["content"][0]["text"]
    assert "Question: how long do refunds take" in request["messages"][0]["content"][0]["text"]


def document(uri: str, status: str, reason: str = "") -> dict[str, Any]:
    detail: dict[str, Any] = {
        "knowledgeBaseId": KB,
        "dataSourceId": DS,
        "status": status,
        "identifier": {"dataSourceType": "S3", "s3": {"uri": uri}},
    }
    if reason:
        detail["statusReason"] = reason
    return detail


ANY_LIST_REQUEST = {"knowledgeBaseId": KB, "dataSourceId": DS, "filters": ANY, "maxResults": 10}
GET_REQUEST = {"knowledgeBaseId": KB, "dataSourceId": DS, "ingestionJobId": "JOB1234567"}
ANY_RETRIEVE = {"knowledgeBaseId": KB, "retrievalQuery": ANY, "retrievalConfiguration": ANY}
ANY_RERANK = {"queries": ANY, "sources": ANY, "rerankingConfiguration": ANY}


def test_document_text_is_shown_as_text_never_as_markup_or_terminal_codes(aws: Clients, standin: Any) -> None:
    """Chunks, contexts, sources and answers come from documents: Rich markup in them is shown literally
    (``[/docs]`` used to crash the command) and terminal control sequences are dropped."""
    rt = aws.stubs["bedrock-agent-runtime"]
    hostile = "see [/docs] and [link=https://evil.example]here[/link] \x1b]0;pwned\x07[bold]end"
    hits = {
        "retrievalResults": [
            {
                "content": {"text": hostile, "type": "TEXT"},
                "location": {"type": "S3", "s3Location": {"uri": "s3://b/[red]x.md"}},
                "score": 0.5,
            }
        ]
    }
    rt.add_response("retrieve", hits, ANY_RETRIEVE)
    result = runner.invoke(app, ["query", "docs", "--region", REGION, "--no-rerank"])
    assert result.exit_code == 0, result.output
    shown = result.output  # the table wraps long cells: look for short pieces
    assert all(piece in shown for piece in ("[/docs]", "[/link]", "[bold]end", "[red]x.md", "pwned"))
    assert "\x1b" not in result.output and "\x07" not in result.output
    aws.stubs["cloudformation"].add_response("describe_stacks", outputs(), {"StackName": "ContextualKb"})
    rt.add_response("retrieve", hits, ANY_RETRIEVE)
    standin.configure(responder=lambda seen: "Answer [/b] \x1b[2J cleared [1].")
    asked = runner.invoke(app, ["ask", "docs", "--region", REGION, "--no-rerank"])
    assert asked.exit_code == 0, asked.output
    assert "Answer [/b] [2J cleared [1]." in asked.output and "\x1b" not in asked.output
    assert "[1] s3://b/[red]x.md" in asked.output


def data_source_response(prefixes: list[str] | None = None, kind: str = "S3") -> dict[str, Any]:
    configuration: dict[str, Any] = {"type": kind}
    if kind == "S3":
        configuration["s3Configuration"] = {"bucketArn": f"arn:aws:s3:::{BUCKET}"}
        if prefixes:
            configuration["s3Configuration"]["inclusionPrefixes"] = prefixes
    return {
        "dataSource": {
            "knowledgeBaseId": KB,
            "dataSourceId": DS,
            "name": "docs",
            "status": "AVAILABLE",
            "dataSourceConfiguration": configuration,
            "createdAt": "2026-11-22T00:00:00Z",
            "updatedAt": "2026-11-22T00:00:00Z",
        }
    }


def test_sync_reprocess_marks_every_document_then_syncs_and_says_how(aws: Clients) -> None:
    """Each document under the data source's prefix gets ckb_reprocessed in its metadata file (the user's
    kept, their format too), metadata files and documents outside the prefix are left alone; then a job."""
    from moto import mock_aws

    agent = aws.stubs["bedrock-agent"]
    agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)  # none running
    agent.add_response(
        "get_data_source", data_source_response(["docs/"]), {"knowledgeBaseId": KB, "dataSourceId": DS}
    )
    agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)
    agent.add_response("start_ingestion_job", job("STARTING"), {"knowledgeBaseId": KB, "dataSourceId": DS})
    agent.add_response("get_ingestion_job", job("COMPLETE", numberOfModifiedDocumentsIndexed=3), GET_REQUEST)
    metrics(aws, fallbacks=0, chunks=30)
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        for key in ("docs/a.md", "docs/sub/b.pdf", "docs/c.txt", "elsewhere/d.md"):
            s3.put_object(Bucket=BUCKET, Key=key, Body=b"text")
        mine = {"metadataAttributes": {"team": "payments"}}
        s3.put_object(Bucket=BUCKET, Key="docs/a.md.metadata.json", Body=json.dumps(mine).encode())
        s3.put_object(Bucket=BUCKET, Key="docs/c.txt.metadata.json", Body=b"{broken")
        result = runner.invoke(app, ["sync", "--reprocess", "--region", REGION, "--interval", "0"])
        sidecars = {
            key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            for key in (o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
            if key.endswith(".metadata.json")
        }
    assert result.exit_code == 0, result.output
    assert "3 document(s), 12 bytes, under s3://ckb-source-bucket/docs/" in result.output
    assert "marked for re-ingestion: 2 document(s) (1 metadata file(s) made, 1 updated" in result.output
    assert "a metadata change is documented to re-ingest" in result.output
    assert "not marked: s3://ckb-source-bucket/docs/c.txt: its metadata file is not JSON" in result.stderr
    a = json.loads(sidecars["docs/a.md.metadata.json"])["metadataAttributes"]
    assert a["team"] == "payments" and a["ckb_reprocessed"].endswith("Z")
    assert set(json.loads(sidecars["docs/sub/b.pdf.metadata.json"])["metadataAttributes"]) == {
        "ckb_reprocessed"
    }
    assert sidecars["docs/c.txt.metadata.json"] == b"{broken"  # left as it was
    assert "elsewhere/d.md.metadata.json" not in sidecars  # outside the data source's prefix
    assert "started ingestion job JOB1234567" in result.output
    agent.assert_no_pending_responses()


def test_sync_reprocess_dry_run_counts_and_changes_nothing(aws: Clients) -> None:
    from moto import mock_aws

    agent = aws.stubs["bedrock-agent"]
    agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)
    agent.add_response("get_data_source", data_source_response())
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="a.md", Body=b"x" * 4_000_000)
        result = runner.invoke(app, ["sync", "--reprocess", "--dry-run", "--region", REGION])
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert result.exit_code == 0, result.output
    assert "1 document(s), 4,000,000 bytes" in result.output and "about $3.45-$12.34" in result.output
    assert "dry run: nothing changed" in result.output and keys == ["a.md"]
    agent.assert_no_pending_responses()  # no job started


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("web", "of type WEB: --reprocess marks S3 documents only"),
        ("running", "ingestion job JOB1234567 is IN_PROGRESS: documents marked now may be missed by it"),
        ("empty", "no documents under s3://ckb-source-bucket/: nothing to reprocess"),
    ],
)
def test_sync_reprocess_refusals_are_one_line(aws: Clients, setup: str, message: str) -> None:
    from moto import mock_aws

    agent = aws.stubs["bedrock-agent"]
    if setup == "running":
        summary = {
            "knowledgeBaseId": KB,
            "dataSourceId": DS,
            "ingestionJobId": "JOB1234567",
            "status": "IN_PROGRESS",
            "startedAt": "2026-11-22T00:00:00Z",
            "updatedAt": "2026-11-22T00:00:00Z",
        }
        agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": [summary]}, ANY_LIST_REQUEST)
        agent.add_response("get_ingestion_job", job("IN_PROGRESS"), GET_REQUEST)
    else:
        agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)
        agent.add_response("get_data_source", data_source_response(kind="WEB" if setup == "web" else "S3"))
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        result = runner.invoke(app, ["sync", "--reprocess", "--region", REGION])
    assert result.exit_code == 1 and message in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_prefix_and_dry_run_need_reprocess(aws: Clients) -> None:
    result = runner.invoke(app, ["sync", "--dry-run", "--region", REGION])
    assert result.exit_code == 2 and "--dry-run: applies only with --reprocess" in result.stderr


def test_a_metadata_file_changed_while_being_marked_is_not_overwritten() -> None:
    """Someone writes a document's metadata file between our read and our write (or makes one where there
    was none): S3's conditional write refuses ours, the document is skipped with the reason, theirs stays."""
    from moto import mock_aws

    from contextual_kb.query.reprocess import Plan, mark

    class Racing:
        """An S3 client whose every read is followed by someone else's write of the same key."""

        def __init__(self, s3: Any) -> None:
            self.s3 = s3

        def get_object(self, **kwargs: Any) -> Any:
            try:
                return self.s3.get_object(**kwargs)
            finally:
                self.s3.put_object(Bucket=kwargs["Bucket"], Key=kwargs["Key"], Body=b'{"theirs": 1}')

        def put_object(self, **kwargs: Any) -> Any:
            return self.s3.put_object(**kwargs)

    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="docs/a.md.metadata.json", Body=b'{"metadataAttributes": {}}')
        plan = Plan(BUCKET, [("docs/a.md", 4), ("docs/new.md", 4)], ["docs/"])
        marked = mark(Racing(s3), plan, "2026-11-23T00:00:00Z")
        bodies = [
            s3.get_object(Bucket=BUCKET, Key=f"{key}.metadata.json")["Body"].read()
            for key, _ in plan.documents
        ]
    assert (marked.created, marked.updated) == (0, 0)
    assert [why for _, why in marked.skipped] == [
        "its metadata file changed while it was being marked: run again"
    ] * 2
    assert bodies == [b'{"theirs": 1}'] * 2
