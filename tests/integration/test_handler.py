"""The real handler against moto's S3: sample events, bad input, logs and metrics."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.warnings import PowertoolsUserWarning

from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.local.runner import upload_objects
from contextual_kb.runtime import handler
from contextual_kb.runtime.errors import ContractError, StorageError
from tests.conftest import EVENTS, output_lines
from tests.support import event, file_entry, output_key_in, outputs_in, text_item

GOOD_SAMPLES = ["markdown", "source-code", "multi-batch", "no-file-metadata", "whole-documents"]


JOB_DIRECTORY = "aws/bedrock/knowledge_bases/LOCALKB0001/LOCALDS0001/LOCALJOB001/"


def load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name / "event.json").read_text())


def stage(s3: Any, name: str) -> dict[str, Any]:
    raw = load(name)
    upload_objects(s3, raw["bucketName"], EVENTS / name / "objects")
    return raw


def keys(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def read(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


@pytest.mark.parametrize("name", GOOD_SAMPLES)
def test_every_sample_event_is_transformed(s3: Any, name: str) -> None:
    raw = stage(s3, name)
    response = handler.lambda_handler(raw, LocalLambdaContext())
    assert len(response["outputFiles"]) == len(raw["inputFiles"])
    for given, produced in zip(raw["inputFiles"], response["outputFiles"], strict=True):
        assert produced["originalFileLocation"] == given["originalFileLocation"]
        assert produced["fileMetadata"] == given.get("fileMetadata", {})  # {} when the input had none
        # Inside the KB's job directory (where the KB role may read): JOB/contextual-kb/output/<name>.
        assert [b["key"] for b in produced["contentBatches"]] == [
            output_key_in(JOB_DIRECTORY, b["key"]) for b in given["contentBatches"]
        ]
        for before_ref, after_ref in zip(given["contentBatches"], produced["contentBatches"], strict=True):
            before = read(s3, raw["bucketName"], before_ref["key"])["fileContents"]
            after = read(s3, raw["bucketName"], after_ref["key"])["fileContents"]
            assert len(before) == len(after)
            for old, new in zip(before, after, strict=True):
                if old["contentType"] != "TEXT":
                    assert new == old  # non-text passes through untouched
                    continue
                assert new["contentBody"].endswith("\n\n" + old["contentBody"])
                assert (
                    new["contentBody"] == new["contentMetadata"]["ckb_context"] + "\n\n" + old["contentBody"]
                )


def test_chunk_metadata_survives_and_fixed_size_overlap_is_not_in_contexts(s3: Any) -> None:
    raw = stage(s3, "multi-batch")
    response = handler.lambda_handler(raw, LocalLambdaContext())
    first = read(s3, raw["bucketName"], response["outputFiles"][0]["contentBatches"][0]["key"])[
        "fileContents"
    ][0]
    assert first["contentMetadata"]["x-amz-bedrock-kb-document-page-number"] == 1
    assert first["contentMetadata"]["ckb_context"].startswith(
        "Document contracts/northwind-msa.txt: MASTER SERV"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "malformed-event",
            r"event: inputFiles\[1\]\.contentBatches: Field required "
            r"\(file s3://contextual-kb-source-local/src/ratelimit/token_bucket.py\)",
        ),
        ("malformed-batch", r"token_bucket.py_3.JSON: fileContents\[0\]\.contentBody: Field required"),
    ],
)
def test_malformed_samples_fail_clearly_and_write_nothing(
    s3: Any, captured: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    raw = stage(s3, name)
    with pytest.raises(ContractError, match=message):
        handler.lambda_handler(raw, LocalLambdaContext())
    assert outputs_in(s3, raw["bucketName"]) == []
    errors = [line for line in output_lines(captured) if line.get("level") == "ERROR"]
    assert errors and errors[0]["ingestion_job_id"] == "LOCALJOB001"
    assert errors[0]["knowledge_base_id"] == "LOCALKB0001"


def test_missing_and_non_json_batches_name_the_key_and_nothing_is_written(s3: Any) -> None:
    s3.create_bucket(Bucket="inter")
    s3.put_object(Bucket="inter", Key="j/a_1.JSON", Body=json.dumps({"fileContents": [text_item("hello")]}))
    s3.put_object(Bucket="inter", Key="j/b_1.JSON", Body=b"\x89PNG not json")
    missing = event(
        "inter", [file_entry("s3://src/a.md", ["j/a_1.JSON"]), file_entry("s3://src/c.md", ["j/c_1.JSON"])]
    )
    with pytest.raises(StorageError, match=r"s3://inter/j/c_1.JSON: cannot read batch object \(NoSuchKey\)"):
        handler.lambda_handler(missing, LocalLambdaContext())
    not_json = event(
        "inter", [file_entry("s3://src/a.md", ["j/a_1.JSON"]), file_entry("s3://src/b.md", ["j/b_1.JSON"])]
    )
    with pytest.raises(
        ContractError, match=r"s3://inter/j/b_1.JSON: not valid JSON .*\(file s3://src/b.md\)"
    ):
        handler.lambda_handler(not_json, LocalLambdaContext())
    assert outputs_in(s3, "inter") == []


def test_empty_document_gives_an_empty_output_batch(s3: Any) -> None:
    s3.create_bucket(Bucket="inter")
    s3.put_object(Bucket="inter", Key="j/e_1.JSON", Body=json.dumps({"fileContents": []}))
    response = handler.lambda_handler(
        event("inter", [file_entry("s3://src/e.md", ["j/e_1.JSON"])]), LocalLambdaContext()
    )
    key = response["outputFiles"][0]["contentBatches"][0]["key"]
    assert read(s3, "inter", key) == {"fileContents": []}


def test_none_strategy_passes_everything_through(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXT_STRATEGY", "none")
    raw = stage(s3, "markdown")
    response = handler.lambda_handler(raw, LocalLambdaContext())
    for given, produced in zip(
        raw["inputFiles"][0]["contentBatches"], response["outputFiles"][0]["contentBatches"], strict=True
    ):
        assert read(s3, raw["bucketName"], produced["key"]) == read(s3, raw["bucketName"], given["key"])


def test_batches_not_kept_in_memory_are_re_read_pinned_to_their_version(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFETCH_MAX_BYTES", "0")
    raw = stage(s3, "multi-batch")
    response = handler.lambda_handler(raw, LocalLambdaContext())
    assert len(response["outputFiles"][0]["contentBatches"]) == 3


def test_logs_carry_the_job_keys_and_no_document_text_at_info(
    s3: Any, captured: pytest.CaptureFixture[str]
) -> None:
    raw = stage(s3, "source-code")
    captured.readouterr()
    handler.lambda_handler(raw, LocalLambdaContext())
    lines = output_lines(captured)
    logs = [line for line in lines if "level" in line]
    assert {"file transformed", "transformation complete"} <= {line["message"] for line in logs}
    for line in logs:
        assert line["knowledge_base_id"] == "LOCALKB0001"
        assert line["data_source_id"] == "LOCALDS0001"
        assert line["ingestion_job_id"] == "LOCALJOB001"
    text = (EVENTS / "documents" / "token_bucket.py").read_text()
    fragments = [text[i : i + 40] for i in range(0, len(text) - 40, 200)]
    dumped = json.dumps(logs)
    assert not any(fragment in dumped for fragment in fragments)
    summary = next(line for line in logs if line["message"] == "transformation complete")
    assert summary["chunks_in"] == summary["chunks_contextualized"] == 5


def test_metrics_are_emitted_per_strategy(s3: Any, captured: pytest.CaptureFixture[str]) -> None:
    raw = stage(s3, "multi-batch")
    captured.readouterr()
    handler.lambda_handler(raw, LocalLambdaContext())
    emf = [line for line in output_lines(captured) if "_aws" in line and "ChunksIn" in line]
    assert len(emf) == 1
    blob = emf[0]
    assert blob["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "ContextualKBTest"
    assert "Strategy" in blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
    assert blob["Strategy"] == "structural"
    assert blob["Files"] == [1.0]
    assert blob["ChunksIn"] == [8.0]
    assert blob["ChunksContextualized"] == [8.0]
    assert blob["ChunksPassedThrough"] == [0.0]


def test_metrics_carry_the_functions_own_series_beside_the_shared_one(
    s3: Any, captured: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each function's alarms watch its own series (FunctionName, as Lambda's environment names it); the
    {Strategy, service} series stays for what reads it already."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "kb-one-transform")
    raw = stage(s3, "multi-batch")
    captured.readouterr()
    handler.lambda_handler(raw, LocalLambdaContext())
    (blob,) = [line for line in output_lines(captured) if "_aws" in line and "ChunksIn" in line]
    assert blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["Strategy", "service"],
        ["Strategy", "service", "FunctionName"],
    ]
    assert blob["FunctionName"] == "kb-one-transform" and blob["Strategy"] == "structural"


def test_with_metrics_disabled_a_warm_invocation_starts_with_no_metrics(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    raw = stage(s3, "multi-batch")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PowertoolsUserWarning)  # "Dimension 'Strategy' has already been added"
        for strategy in ("none", "structural"):
            monkeypatch.setenv("CONTEXT_STRATEGY", strategy)
            handler.runtime.cache_clear()
            handler.lambda_handler(raw, LocalLambdaContext())
    left = handler.metrics.serialize_metric_set()
    assert left["Strategy"] == "structural" and left["Files"] == [1.0]  # this invocation's, not both


def test_a_bad_setting_fails_the_invocation_naming_the_variable(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXT_STRATEGY", "gpt")
    raw = stage(s3, "markdown")
    with pytest.raises(Exception, match="CONTEXT_STRATEGY"):
        handler.lambda_handler(raw, LocalLambdaContext())


def test_handler_module_is_the_documented_entry_point() -> None:
    from contextual_kb.cdk.function import HANDLER

    assert Path(handler.__file__).parent.name == "runtime"
    assert HANDLER == f"{handler.__name__}.lambda_handler" == "contextual_kb.runtime.handler.lambda_handler"
    assert callable(handler.lambda_handler)


INIT = r"""
import json, os, sys
os.environ.update({"AWS_LAMBDA_FUNCTION_NAME": "ckb-test", "AWS_REGION": "us-east-1",
    "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_TRACE_DISABLED": "true", **json.loads(sys.argv[1])})
from contextual_kb.runtime import handler
print(json.dumps({"built": handler.runtime.cache_info().currsize,
    "client": handler.runtime()[1]._client is not None if handler.runtime.cache_info().currsize else None}))
"""


def _init(env: dict[str, str]) -> dict[str, object]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", INIT, json.dumps(env)], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_in_lambda_the_runtime_and_the_model_client_are_built_at_import() -> None:
    """Lambda's init phase pays for settings, strategy, S3 and model clients (a cold environment's first
    invocation reaches its first model call at once: docs/BENCHMARKS.md); a settings error there is kept for
    the invocation, not raised at import."""
    assert _init({"CONTEXT_STRATEGY": "claude"}) == {"built": 1, "client": True}
    assert _init({"CONTEXT_STRATEGY": "foo"}) == {"built": 0, "client": None}


def test_a_bad_setting_fails_the_invocation_in_one_line_with_the_event_keys(
    s3: Any, monkeypatch: pytest.MonkeyPatch, captured: pytest.CaptureFixture[str]
) -> None:
    from contextual_kb.runtime.settings import ConfigurationError

    monkeypatch.setenv("CONTEXT_STRATEGY", "foo")
    handler.runtime.cache_clear()
    with pytest.raises(ConfigurationError, match="CONTEXT_STRATEGY='foo'"):
        handler.lambda_handler({"knowledgeBaseId": "KB9", "inputFiles": []}, LocalLambdaContext())
    errors = [line for line in output_lines(captured) if line.get("level") == "ERROR"]
    assert errors and errors[0]["knowledge_base_id"] == "KB9"
    assert "environment variable CONTEXT_STRATEGY='foo'" in errors[0]["exception"]


def test_whole_documents_are_chunked_by_structure_end_to_end(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample event of a data source with chunking NONE (each document one item) through the real
    handler with CHUNKING=structure: several chunks per document, covering it in order, each with its
    context, section and span; file metadata kept; outputs inside the job's directory."""
    monkeypatch.setenv("CHUNKING", "structure")
    monkeypatch.setenv("CHUNK_MAX_TOKENS", "120")
    raw = stage(s3, "whole-documents")
    response = handler.lambda_handler(raw, LocalLambdaContext())
    for given, produced in zip(raw["inputFiles"], response["outputFiles"], strict=True):
        assert produced["fileMetadata"] == given.get("fileMetadata", {})
        (in_ref,) = given["contentBatches"]
        (out_ref,) = produced["contentBatches"]
        assert out_ref["key"] == output_key_in(JOB_DIRECTORY, in_ref["key"])
        document = read(s3, raw["bucketName"], in_ref["key"])["fileContents"][0]["contentBody"]
        chunks = read(s3, raw["bucketName"], out_ref["key"])["fileContents"]
        assert len(chunks) > 1
        position = 0
        for chunk in chunks:
            meta = chunk["contentMetadata"]
            assert meta["ckb_start"] == position
            text = document[meta["ckb_start"] : meta["ckb_end"]]
            assert chunk["contentBody"] == meta["ckb_context"] + "\n\n" + text
            position = meta["ckb_end"]
        assert position == len(document)
    runbook = read(s3, raw["bucketName"], response["outputFiles"][0]["contentBatches"][0]["key"])
    sections = [c["contentMetadata"].get("ckb_section") for c in runbook["fileContents"]]
    assert "Payments Service Runbook › Alarms" in sections
