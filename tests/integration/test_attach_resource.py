"""The attach mode's custom resources against botocore's Stubber: real-looking data sources of each chunking
kind go through create, update and delete with their configuration exactly as it was but for the
transformation; refusals come before any write."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from contextual_kb.resources.attach_data_source import (
    LOGS_CREATE,
    LOGS_OFF,
    LOGS_USE,
    AttachError,
    DataSources,
    handle,
    inspect,
    ours,
    parse_physical_id,
    physical_id,
)

KB, DS = "KBEXIST001", "DSEXIST001"
REGION = "us-east-1"
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:Attach-TransformFunction-abc"
NEW_FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:Attach-TransformFunction-def"
OTHER = "arn:aws:lambda:us-east-1:123456789012:function:teams-own-chunker"
ROLE = "arn:aws:iam::123456789012:role/service-role/AmazonBedrockExecutionRoleForKnowledgeBase_x1"
URI = "s3://attach-intermediate/"
PARSER = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0"
WHEN = datetime(2026, 11, 1, tzinfo=UTC)

CHUNKINGS: dict[str, dict[str, Any] | None] = {
    "fixed_size": {
        "chunkingStrategy": "FIXED_SIZE",
        "fixedSizeChunkingConfiguration": {"maxTokens": 512, "overlapPercentage": 10},
    },
    "hierarchical": {
        "chunkingStrategy": "HIERARCHICAL",
        "hierarchicalChunkingConfiguration": {
            "levelConfigurations": [{"maxTokens": 1500}, {"maxTokens": 300}],
            "overlapTokens": 60,
        },
    },
    "semantic": {
        "chunkingStrategy": "SEMANTIC",
        "semanticChunkingConfiguration": {
            "maxTokens": 300,
            "bufferSize": 1,
            "breakpointPercentileThreshold": 90,
        },
    },
    "none": {"chunkingStrategy": "NONE"},
    "default": None,
}


def data_source(
    chunking: dict[str, Any] | None, transformation: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A data source as GetDataSource returns it: everything a console user may have set."""
    ingestion: dict[str, Any] = {
        "parsingConfiguration": {
            "parsingStrategy": "BEDROCK_FOUNDATION_MODEL",
            "bedrockFoundationModelConfiguration": {
                "modelArn": PARSER,
                "parsingPrompt": {"parsingPromptText": "Transcribe tables as Markdown."},
            },
        }
    }
    if chunking is not None:
        ingestion["chunkingConfiguration"] = copy.deepcopy(chunking)
    if transformation is not None:
        ingestion["customTransformationConfiguration"] = copy.deepcopy(transformation)
    return {
        "knowledgeBaseId": KB,
        "dataSourceId": DS,
        "name": "team-docs",
        "status": "AVAILABLE",
        "description": "The team's runbooks",
        "dataSourceConfiguration": {
            "type": "S3",
            "s3Configuration": {
                "bucketArn": "arn:aws:s3:::team-docs-bucket",
                "inclusionPrefixes": ["runbooks/"],
                "bucketOwnerAccountId": "123456789012",
            },
        },
        "serverSideEncryptionConfiguration": {"kmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/abc"},
        "vectorIngestionConfiguration": ingestion,
        "dataDeletionPolicy": "RETAIN",
        "createdAt": WHEN,
        "updatedAt": WHEN,
        "failureReasons": [],
    }


def knowledge_base(kind: str = "VECTOR", role: str = ROLE) -> dict[str, Any]:
    return {
        "knowledgeBase": {
            "knowledgeBaseId": KB,
            "name": "team-kb",
            "knowledgeBaseArn": f"arn:aws:bedrock:{REGION}:123456789012:knowledge-base/{KB}",
            "roleArn": role,
            "knowledgeBaseConfiguration": {"type": kind},
            "storageConfiguration": {"type": "OPENSEARCH_SERVERLESS"},
            "status": "ACTIVE",
            "createdAt": WHEN,
            "updatedAt": WHEN,
        }
    }


def update_of(source: dict[str, Any], transformation: dict[str, Any] | None) -> dict[str, Any]:
    """What UpdateDataSource must receive: the data source as read, minus the fields it only reports, with
    ``transformation`` (written out here, not computed by the code under test)."""
    request = {
        k: copy.deepcopy(v)
        for k, v in source.items()
        if k not in {"status", "createdAt", "updatedAt", "failureReasons"}
    }
    ingestion = request["vectorIngestionConfiguration"]
    ingestion.pop("customTransformationConfiguration", None)
    if transformation is not None:
        ingestion["customTransformationConfiguration"] = transformation
    return request


def event(request: str, kind: str = "Custom::DataSourceAttachment", **extra: Any) -> dict[str, Any]:
    properties = {
        "KnowledgeBaseId": KB,
        "DataSourceId": DS,
        "FunctionArn": FUNCTION,
        "IntermediateUri": URI,
        "ReplaceTransformation": "false",
        "RoleArn": ROLE,
    }
    properties.update(extra.pop("properties", {}))
    return {"RequestType": request, "ResourceType": kind, "ResourceProperties": properties, **extra}


@pytest.fixture
def agent() -> Any:
    client = boto3.client("bedrock-agent", region_name=REGION)
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def answer_update(stub: Stubber, request: dict[str, Any]) -> None:
    stub.add_response("update_data_source", {"dataSource": data_source(None)}, request)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_attach_then_detach_round_trips_every_chunking_kind_exactly(agent: Any, chunking: str) -> None:
    client, stub = agent
    before = data_source(CHUNKINGS[chunking])
    stub.add_response("get_data_source", {"dataSource": before}, {"knowledgeBaseId": KB, "dataSourceId": DS})
    answer_update(stub, update_of(before, ours(FUNCTION, URI)))
    created = handle(event("Create"), DataSources(client))
    assert created["PhysicalResourceId"] == f"ckb-attach:{KB}:{DS}:none"

    attached = data_source(CHUNKINGS[chunking], ours(FUNCTION, URI))
    stub.add_response(
        "get_data_source", {"dataSource": attached}, {"knowledgeBaseId": KB, "dataSourceId": DS}
    )
    answer_update(stub, update_of(before, None))  # exactly what was there: no transformation
    handle(event("Delete", PhysicalResourceId=created["PhysicalResourceId"]), DataSources(client))


def test_inspection_tells_the_function_to_chunk_when_the_data_source_chunks_nothing(agent: Any) -> None:
    client, stub = agent
    for chunking, expected in (("none", "structure"), ("fixed_size", "kb"), ("default", "kb")):
        stub.add_response("get_knowledge_base", knowledge_base(), {"knowledgeBaseId": KB})
        stub.add_response(
            "get_data_source",
            {"dataSource": data_source(CHUNKINGS[chunking])},
            {"knowledgeBaseId": KB, "dataSourceId": DS},
        )
        found = handle(event("Create", "Custom::DataSourceInspection"), DataSources(client))
        assert found["Data"]["Chunking"] == expected
        assert found["Data"]["SourceBucketName"] == "team-docs-bucket"
        assert found["Data"]["VectorStoreType"] == "opensearch"


@pytest.mark.parametrize(
    ("kb", "source", "error", "message"),
    [
        (knowledge_base("KENDRA"), None, None, "is of type KENDRA: only a VECTOR knowledge base"),
        (
            knowledge_base(role="arn:aws:iam::123456789012:role/someone-else"),
            None,
            None,
            "service role is arn:aws:iam::123456789012:role/someone-else, not knowledgeBaseRoleArn",
        ),
        (None, None, "kb", f"knowledge base {KB}: not found in us-east-1 \\(ResourceNotFoundException\\)"),
        (knowledge_base(), None, "ds", f"data source {DS} of knowledge base {KB}: not found in us-east-1"),
        (knowledge_base(), {"status": "DELETING"}, None, "is DELETING"),
        (
            knowledge_base(),
            {"dataSourceConfiguration": {"type": "REDSHIFT_METADATA"}},
            None,
            "of type REDSHIFT_METADATA, which runs no custom transformation",
        ),
    ],
)
def test_what_cannot_be_attached_is_refused_in_one_line_before_any_write(
    agent: Any, kb: dict[str, Any] | None, source: dict[str, Any] | None, error: str | None, message: str
) -> None:
    client, stub = agent
    if error == "kb":
        stub.add_client_error(
            "get_knowledge_base", "ResourceNotFoundException", "no such knowledge base", 404
        )
    else:
        stub.add_response("get_knowledge_base", kb)
        if error == "ds":
            stub.add_client_error("get_data_source", "ResourceNotFoundException", "no such data source", 404)
        elif "service role" not in message and "KENDRA" not in message:
            stub.add_response("get_data_source", {"dataSource": {**data_source(None), **(source or {})}})
        else:
            stub.add_response("get_data_source", {"dataSource": data_source(None)})
    with pytest.raises(AttachError, match=message) as caught:
        handle(event("Create", "Custom::DataSourceInspection"), DataSources(client))
    assert "\n" not in str(caught.value)


def test_another_transformation_is_refused_unless_replaced_and_is_put_back_on_detach(agent: Any) -> None:
    client, stub = agent
    theirs = ours(OTHER, "s3://their-intermediate/prefix/")
    before = data_source(CHUNKINGS["fixed_size"], theirs)
    stub.add_response("get_data_source", {"dataSource": before})
    with pytest.raises(
        AttachError, match=r"already runs the transformation .*teams-own-chunker.*replaceTransformation=true"
    ):
        handle(event("Create"), DataSources(client))  # no update_data_source queued: nothing written

    stub.add_response("get_data_source", {"dataSource": before})
    answer_update(stub, update_of(before, ours(FUNCTION, URI)))
    created = handle(event("Create", properties={"ReplaceTransformation": "true"}), DataSources(client))
    assert parse_physical_id(created["PhysicalResourceId"]) == (KB, DS, theirs)
    assert created["Data"]["Replaced"] == OTHER

    stub.add_response(
        "get_data_source", {"dataSource": data_source(CHUNKINGS["fixed_size"], ours(FUNCTION, URI))}
    )
    answer_update(stub, update_of(before, theirs))  # theirs back, as it was
    handle(event("Delete", PhysicalResourceId=created["PhysicalResourceId"]), DataSources(client))


def test_an_update_sets_the_new_function_and_keeps_what_to_put_back(agent: Any) -> None:
    client, stub = agent
    theirs = ours(OTHER, "s3://their-intermediate/")
    identifier = physical_id(KB, DS, theirs)
    attached = data_source(CHUNKINGS["semantic"], ours(FUNCTION, URI))
    stub.add_response("get_data_source", {"dataSource": attached})
    answer_update(stub, update_of(attached, ours(NEW_FUNCTION, URI)))
    updated = handle(
        event(
            "Update",
            properties={"FunctionArn": NEW_FUNCTION},
            PhysicalResourceId=identifier,
            OldResourceProperties={"FunctionArn": FUNCTION, "KnowledgeBaseId": KB, "DataSourceId": DS},
        ),
        DataSources(client),
    )
    assert updated["PhysicalResourceId"] == identifier  # the same data source: not a replacement


def test_a_detach_after_hand_changes_removes_only_our_transformation(agent: Any) -> None:
    client, stub = agent
    changed = data_source(CHUNKINGS["fixed_size"], ours(FUNCTION, URI))
    changed["description"] = "Renamed by hand"
    changed["dataDeletionPolicy"] = "DELETE"
    stub.add_response("get_data_source", {"dataSource": changed})
    answer_update(stub, update_of(changed, None))  # their description and policy stay
    handle(event("Delete", PhysicalResourceId=physical_id(KB, DS, None)), DataSources(client))


def test_a_detach_leaves_a_transformation_someone_else_set_and_logs_it(
    agent: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client, stub = agent
    stub.add_response("get_data_source", {"dataSource": data_source(None, ours(OTHER, URI))})
    with caplog.at_level("WARNING"):
        handle(event("Delete", PhysicalResourceId=physical_id(KB, DS, None)), DataSources(client))
    assert "no longer runs this stack's function" in caplog.text  # and no update_data_source was called


def test_a_detach_of_something_gone_or_never_attached_does_nothing(agent: Any) -> None:
    client, stub = agent
    stub.add_client_error("get_data_source", "ResourceNotFoundException", "gone", 404)
    handle(event("Delete", PhysicalResourceId=physical_id(KB, DS, None)), DataSources(client))
    # An id not ours (a create that did not finish): the data source is read, and left as it is when it
    # does not run our function.
    stub.add_response("get_data_source", {"dataSource": data_source(None)})
    handle(event("Delete", PhysicalResourceId="d5b2c1a0-request-id"), DataSources(client))


def test_the_physical_id_keeps_a_transformation_within_cloudformations_1_kb() -> None:
    theirs = ours(OTHER, "s3://their-intermediate/" + "p/" * 100)
    identifier = physical_id(KB, DS, theirs)
    assert len(identifier) <= 1024 and parse_physical_id(identifier) == (KB, DS, theirs)
    huge = ours(OTHER, "s3://b/" + "".join(f"{n:x}" for n in range(2000)))
    with pytest.raises(AttachError, match="too large to keep"):
        physical_id(KB, DS, huge)


def test_a_delete_after_a_cancelled_create_removes_our_transformation_if_it_landed(agent: Any) -> None:
    """CloudFormation may cancel a create still running and send a delete with an id that is not ours: the
    properties name the data source, which must not keep pointing at a function the rollback deletes."""
    client, stub = agent
    landed = data_source(CHUNKINGS["fixed_size"], ours(FUNCTION, URI))
    stub.add_response("get_data_source", {"dataSource": landed})
    answer_update(stub, update_of(landed, None))
    handle(event("Delete", PhysicalResourceId="2b7d-request-id"), DataSources(client))
    stub.add_response("get_data_source", {"dataSource": data_source(CHUNKINGS["fixed_size"])})
    handle(
        event("Delete", PhysicalResourceId="2b7d-request-id"), DataSources(client)
    )  # never landed: no write


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"status": "UPDATING"}, "is UPDATING: attach to a data source that is AVAILABLE"),
        (
            {"dataSourceConfiguration": {"type": "CUSTOM"}},
            "of type CUSTOM, which runs no custom transformation",
        ),
    ],
)
def test_busy_and_custom_data_sources_are_refused(agent: Any, changes: dict[str, Any], message: str) -> None:
    client, stub = agent
    stub.add_response("get_knowledge_base", knowledge_base())
    stub.add_response("get_data_source", {"dataSource": {**data_source(None), **changes}})
    with pytest.raises(AttachError, match=message):
        handle(event("Create", "Custom::DataSourceInspection"), DataSources(client))


@contextlib.contextmanager
def answering(body: bytes) -> Iterator[Any]:
    """A bedrock-agent client whose every GET is answered with ``body`` by a server on 127.0.0.1 (the raw
    JSON goes through botocore's own parser, as AWS's would)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield boto3.client(
            "bedrock-agent", region_name=REGION, endpoint_url=f"http://127.0.0.1:{server.server_address[1]}"
        )
    finally:
        server.shutdown()
        server.server_close()


def test_fields_the_sdk_does_not_know_stop_the_attach_before_any_write() -> None:
    """botocore leaves out of its reading what its model does not know: writing the data source back whole
    would drop it. The raw answer is compared with the reading; an unknown field stops the attach."""
    answer = data_source(CHUNKINGS["fixed_size"])
    answer["vectorIngestionConfiguration"]["futureSetting"] = {"enabled": True}
    answer["createdAt"] = answer["updatedAt"] = "2026-11-01T00:00:00Z"
    with (
        answering(json.dumps({"dataSource": answer}).encode()) as client,
        pytest.raises(
            AttachError,
            match=r"settings this SDK does not know \(vectorIngestionConfiguration.futureSetting\)",
        ),
    ):
        DataSources(client).data_source(KB, DS)


def test_a_null_in_the_answer_is_taken_as_absent_not_as_an_unknown_field() -> None:
    """GetDataSource may answer ``null`` for a field it has no value for; botocore leaves it out of its
    reading, as it does an unknown field. A null is no setting to drop: the attach goes on (it was refused
    as "settings this SDK does not know")."""
    answer = data_source(CHUNKINGS["fixed_size"])
    answer["createdAt"] = answer["updatedAt"] = "2026-11-01T00:00:00Z"
    answer["description"] = None
    answer["serverSideEncryptionConfiguration"] = None
    answer["vectorIngestionConfiguration"]["contextEnrichmentConfiguration"] = None
    answer["dataSourceConfiguration"]["s3Configuration"]["inclusionPrefixes"] = None
    with answering(json.dumps({"dataSource": answer}).encode()) as client:
        found = DataSources(client).data_source(KB, DS)
    assert "description" not in found and "serverSideEncryptionConfiguration" not in found
    data = inspect(knowledge_base()["knowledgeBase"], found, ROLE)
    assert data["DataSourceKmsKeyArn"] == "arn:aws:kms:::key/none-on-the-data-source"
    assert data["SourceBucketName"] == "team-docs-bucket"


def test_unknown_fields_are_found_at_any_depth() -> None:
    from contextual_kb.resources.attach_data_source import unknown_fields

    raw = {"a": 1, "b": {"c": 2, "d": [{"e": 1, "f": 2}]}, "g": 3}
    parsed = {"a": 1, "b": {"c": 2, "d": [{"e": 1}]}}
    assert unknown_fields(raw, parsed) == ["b.d.f", "g"]
    assert unknown_fields(parsed, parsed) == []
    assert unknown_fields({"a": None, "b": {"c": None, "d": [{"e": None}]}}, {"b": {"d": [{}]}}) == []


def test_an_update_to_another_data_source_is_refused_before_any_call(agent: Any) -> None:
    """Moving the stack to another Knowledge Base or data source would leave the old one running our function
    with its role's grants gone: refused in one line (the update rolls back), nothing read or written."""
    client, _ = agent
    attached = physical_id(KB, DS, None)
    for moved in ({"DataSourceId": "OTHERDS123"}, {"KnowledgeBaseId": "OTHERKB123"}):
        with pytest.raises(AttachError) as refused:
            handle(
                event(
                    "Update",
                    properties=moved,
                    PhysicalResourceId=attached,
                    OldResourceProperties={
                        "FunctionArn": FUNCTION,
                        "KnowledgeBaseId": KB,
                        "DataSourceId": DS,
                    },
                ),
                DataSources(client),
            )
        assert f"attached to data source {DS} of knowledge base {KB}" in str(refused.value)
        assert "-c stackName=" in str(refused.value) and "\n" not in str(refused.value)


def test_the_inspection_gives_the_data_sources_kms_key_or_an_arn_of_no_key(agent: Any) -> None:
    """A data source with serverSideEncryptionConfiguration: its key encrypts the ingestion's transient data
    (encryption-kb.html), so the function is granted it; without one, an ARN that names no key."""
    client, stub = agent
    key = f"arn:aws:kms:{REGION}:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    with_key = data_source(CHUNKINGS["fixed_size"])
    with_key["serverSideEncryptionConfiguration"] = {"kmsKeyArn": key}
    without = data_source(CHUNKINGS["fixed_size"])
    without.pop("serverSideEncryptionConfiguration", None)
    for source, expected in ((with_key, key), (without, "arn:aws:kms:::key/none-on-the-data-source")):
        stub.add_response("get_knowledge_base", knowledge_base(), {"knowledgeBaseId": KB})
        stub.add_response(
            "get_data_source", {"dataSource": source}, {"knowledgeBaseId": KB, "dataSourceId": DS}
        )
        found = handle(event("Create", "Custom::DataSourceInspection"), DataSources(client))
        assert found["Data"]["DataSourceKmsKeyArn"] == expected


def aurora(custom_field: str | None = None) -> dict[str, Any]:
    mapping = {
        "primaryKeyField": "id",
        "vectorField": "embedding",
        "textField": "chunks",
        "metadataField": "meta",
    }
    if custom_field:
        mapping["customMetadataField"] = custom_field
    answer = knowledge_base()
    answer["knowledgeBase"]["storageConfiguration"] = {
        "type": "RDS",
        "rdsConfiguration": {
            "resourceArn": "arn:aws:rds:us-east-1:123456789012:cluster:kb",
            "credentialsSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:kb-abc",
            "databaseName": "kb",
            "tableName": "bedrock_integration.bedrock_kb",
            "fieldMapping": mapping,
        },
    }
    return answer


@pytest.mark.parametrize(
    ("chunking", "key", "columns"),
    [
        ("fixed_size", "ckb_context", "ckb_context (text), ckb_reprocessed (text)"),
        (
            "none",
            "ckb_context",
            "ckb_context (text), ckb_section (text), ckb_start (bigint), ckb_end (bigint), "
            "ckb_reprocessed (text)",
        ),
        ("fixed_size", "", "ckb_reprocessed (text)"),  # CONTEXT_METADATA_MAX_BYTES=0: no copy
        ("fixed_size", "team_context", "team_context (text), ckb_reprocessed (text)"),
    ],
)
def test_an_aurora_table_without_a_custom_metadata_field_is_refused_naming_its_columns(
    agent: Any, chunking: str, key: str, columns: str
) -> None:
    """An Aurora table needs a column for each metadata attribute unless the KB maps a custom metadata field:
    the function's own chunk metadata (the context's copy; span and section when it chunks) and --reprocess's
    stamp would fail every document. It was accepted; now refused in one line naming each column, before any
    write, until the deploy confirms them."""
    client, stub = agent
    stub.add_response("get_knowledge_base", aurora())
    stub.add_response("get_data_source", {"dataSource": data_source(CHUNKINGS[chunking])})
    with pytest.raises(AttachError) as refused:
        handle(
            event("Create", "Custom::DataSourceInspection", properties={"ContextMetadataKey": key}),
            DataSources(client),
        )
    message = str(refused.value)
    assert (
        "stores its vectors in Aurora table bedrock_integration.bedrock_kb with no custom metadata field"
        in message
    )
    assert f"add {columns} to it, then deploy with -c rdsMetadataColumns=true" in message
    assert "\n" not in message


def test_an_aurora_table_with_a_custom_metadata_field_or_its_columns_confirmed_is_attached(
    agent: Any,
) -> None:
    client, stub = agent
    for kb, confirmed, expected in (
        (aurora("custom_metadata"), "false", "none"),
        (aurora(), "true", "ckb_context,ckb_reprocessed"),
        (knowledge_base(), "false", "none"),
    ):
        stub.add_response("get_knowledge_base", kb)
        stub.add_response("get_data_source", {"dataSource": data_source(CHUNKINGS["fixed_size"])})
        found = handle(
            event("Create", "Custom::DataSourceInspection", properties={"RdsMetadataColumns": confirmed}),
            DataSources(client),
        )
        assert found["Data"]["MetadataColumns"] == expected
    assert found["Data"]["VectorStoreType"] == "opensearch"


FUNCTION_ROLE = "arn:aws:iam::123456789012:role/Attach-TransformRole-abc"
ACCOUNT_ROOT = "arn:aws:iam::123456789012:root"


def _policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


ADMIN_ONLY = {  # a key policy written for one admin role: IAM policies of the account cannot grant its use
    "Sid": "KeyAdmins",
    "Effect": "Allow",
    "Principal": {"AWS": "arn:aws:iam::123456789012:role/key-admin"},
    "Action": "kms:*",
    "Resource": "*",
}
ACCOUNT = {"Sid": "Enable IAM", "Effect": "Allow", "Principal": {"AWS": ACCOUNT_ROOT}, "Action": "kms:*"}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (_policy(ADMIN_ONLY, ACCOUNT), "ok: the key policy of "),
        (
            _policy(
                ADMIN_ONLY,
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": [FUNCTION_ROLE]},
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                },
            ),
            "ok: the key policy of ",
        ),
        (
            _policy(ADMIN_ONLY),
            "lets no IAM policy grant kms:Decrypt and kms:GenerateDataKey (no statement for "
            f"{ACCOUNT_ROOT}) and does not name the role; add a statement allowing {FUNCTION_ROLE} "
            "kms:Decrypt and kms:GenerateDataKey",
        ),
        (
            _policy(
                ADMIN_ONLY,
                {"Effect": "Allow", "Principal": {"AWS": "123456789012"}, "Action": "kms:Decrypt"},
            ),
            "add: the key policy of ",
        ),
        (
            _policy(
                ACCOUNT, {"Sid": "NoDecrypt", "Effect": "Deny", "Principal": "*", "Action": "kms:Decrypt"}
            ),
            "statement NoDecrypt denies kms:Decrypt",
        ),
    ],
)
def test_the_inspection_reads_the_data_sources_key_policy_and_says_what_to_add(
    agent: Any, policy: str, expected: str
) -> None:
    """The function reads and writes the intermediate files with the data source's key (inferred, not
    documented: aws-facts.md). Its IAM grant works only where the key policy lets IAM policies grant use, or
    names the role: the inspection reads the key policy (moto's KMS) and says so in one line, never refusing
    the deploy (the need is inferred)."""
    from moto import mock_aws

    client, stub = agent
    with mock_aws():
        kms = boto3.client("kms", region_name=REGION)
        key = kms.create_key(Policy=policy)["KeyMetadata"]["Arn"]
        source = data_source(CHUNKINGS["fixed_size"])
        source["serverSideEncryptionConfiguration"] = {"kmsKeyArn": key}
        stub.add_response("get_knowledge_base", knowledge_base(), {"knowledgeBaseId": KB})
        stub.add_response(
            "get_data_source", {"dataSource": source}, {"knowledgeBaseId": KB, "dataSourceId": DS}
        )
        found = handle(
            event("Create", "Custom::DataSourceInspection", properties={"FunctionRoleArn": FUNCTION_ROLE}),
            DataSources(client, kms),
        )
    line = found["Data"]["DataSourceKeyCheck"]
    assert expected in line and key in line and "\n" not in line
    assert line.startswith("ok: ") == expected.startswith("ok: ")


def test_a_key_in_another_account_or_unreadable_is_said_in_one_line(agent: Any) -> None:
    """A key of another account: its policy is there, not readable from here, and the IAM grant here is not
    enough. A key policy that cannot be read (moto: no such key; in AWS, AccessDenied where the key policy
    lets IAM grant nothing, GetKeyPolicy included) is said with what the policy must hold."""
    from moto import mock_aws

    client, stub = agent
    elsewhere = "arn:aws:kms:us-east-1:999999999999:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    missing = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    with mock_aws():
        kms = boto3.client("kms", region_name=REGION)
        lines = []
        for key in (elsewhere, missing):
            source = data_source(CHUNKINGS["fixed_size"])
            source["serverSideEncryptionConfiguration"] = {"kmsKeyArn": key}
            stub.add_response("get_knowledge_base", knowledge_base(), {"knowledgeBaseId": KB})
            stub.add_response("get_data_source", {"dataSource": source})
            found = handle(
                event(
                    "Create", "Custom::DataSourceInspection", properties={"FunctionRoleArn": FUNCTION_ROLE}
                ),
                DataSources(client, kms),
            )
            lines.append(found["Data"]["DataSourceKeyCheck"])
    assert lines[0] == (
        f"add: the data source's key {elsewhere} is in account 999999999999: an IAM grant in 123456789012 "
        f"is not enough; its key policy there must allow {FUNCTION_ROLE} kms:Decrypt and kms:GenerateDataKey"
    )
    assert lines[1].startswith(
        f"check: the key policy of {missing} could not be read (GetKeyPolicy: NotFound"
    )
    assert f"{ACCOUNT_ROOT}) or allow {FUNCTION_ROLE}" in lines[1]
    assert all("\n" not in line for line in lines)


# --- the Knowledge Base's ingestion logs: one delivery source a resource and log type -----------------------

KB_ARN = f"arn:aws:bedrock:{REGION}:123456789012:knowledge-base/{KB}"
OUR_SOURCE = "ContextualKbAttached-kb-1a2b3c"


def test_a_delivery_source_the_knowledge_base_already_has_fails_the_inspection_naming_it() -> None:
    """AWS's Knowledge Base logging page has users set the logs up in the console, which makes a delivery
    source; CloudWatch Logs refuses a second one for the same resource and log type (ConflictException, once
    everything else of the stack was made; moto accepts it). The inspection, which runs before the stack's
    source is made, finds it (DescribeDeliverySources, moto's) and refuses in one line, naming it and both
    ways out; the stack's own source (an update of the stack) is no conflict."""
    from moto import mock_aws

    with mock_aws():
        logs = boto3.client("logs", region_name=REGION)
        logs.put_delivery_source(name="console-kb-logs", resourceArn=KB_ARN, logType="APPLICATION_LOGS")
        client = boto3.client("bedrock-agent", region_name=REGION)
        with Stubber(client) as stub:
            stub.add_response("get_knowledge_base", knowledge_base(), {"knowledgeBaseId": KB})
            stub.add_response(
                "get_data_source", {"dataSource": _plain()}, {"knowledgeBaseId": KB, "dataSourceId": DS}
            )
            with pytest.raises(AttachError) as refused:
                handle(_logs_event(LOGS_CREATE, OUR_SOURCE), DataSources(client, logs=logs))
            stub.assert_no_pending_responses()
        message = str(refused.value)
        assert message == (
            f"knowledge base {KB} already delivers its ingestion logs through delivery source "
            "console-kb-logs (CloudWatch Logs allows one a resource and log type): deploy with "
            "-c ingestionLogSource=console-kb-logs to deliver them to this stack's log group as well, or "
            "with -c ingestionLogs=false to leave them as they are"
        )
        # The stack's own source, there since its first deploy, and another resource's: no conflict.
        logs.delete_delivery_source(name="console-kb-logs")
        logs.put_delivery_source(name=OUR_SOURCE, resourceArn=KB_ARN, logType="APPLICATION_LOGS")
        other = KB_ARN.replace(KB, "KBOTHER001")
        logs.put_delivery_source(name="other-kb-logs", resourceArn=other, logType="APPLICATION_LOGS")
        found = _inspect(client_logs=logs, mode=LOGS_CREATE, name=OUR_SOURCE)
        assert found["Data"]["IngestionLogsCheck"] == (
            f"create: delivery source {OUR_SOURCE}, new, to the stack's log group"
        )


def test_the_knowledge_bases_own_source_is_used_when_named_and_checked_to_be_its() -> None:
    from moto import mock_aws

    with mock_aws():
        logs = boto3.client("logs", region_name=REGION)
        logs.put_delivery_source(name="console-kb-logs", resourceArn=KB_ARN, logType="APPLICATION_LOGS")
        other = KB_ARN.replace(KB, "KBOTHER001")
        logs.put_delivery_source(name="other-kb-logs", resourceArn=other, logType="APPLICATION_LOGS")
        found = _inspect(client_logs=logs, mode=LOGS_USE, name="console-kb-logs")
        assert found["Data"]["IngestionLogsCheck"].startswith("use: a delivery from console-kb-logs")
        for name, why in (
            ("other-kb-logs", f"ingestionLogSource other-kb-logs is for {other} (APPLICATION_LOGS)"),
            ("typo-kb-logs", "ingestionLogSource typo-kb-logs does not exist in this account and region"),
        ):
            with pytest.raises(AttachError) as refused:
                _inspect(client_logs=logs, mode=LOGS_USE, name=name)
            assert str(refused.value) == (
                f"{why}, not knowledge base {KB}'s APPLICATION_LOGS: deploy with "
                "-c ingestionLogSource=console-kb-logs"
            )


def test_every_page_of_delivery_sources_is_read_and_off_reads_none() -> None:
    """DescribeDeliverySources pages (nextToken; moto answers in one page): the Knowledge Base's source on
    the second page is found (Stubber, the API's own shapes). With ingestionLogs=false nothing is asked."""
    logs = boto3.client("logs", region_name=REGION)
    with Stubber(logs) as stubbed:
        stubbed.add_response(
            "describe_delivery_sources",
            {
                "deliverySources": [{"name": "cdn-logs", "resourceArns": ["arn:aws:cloudfront::1:x"]}],
                "nextToken": "page2",
            },
            {},
        )
        stubbed.add_response(
            "describe_delivery_sources",
            {
                "deliverySources": [
                    {"name": "console-kb-logs", "resourceArns": [KB_ARN], "logType": "APPLICATION_LOGS"}
                ]
            },
            {"nextToken": "page2"},
        )
        with pytest.raises(AttachError, match="through delivery source console-kb-logs "):
            _inspect(client_logs=logs, mode=LOGS_CREATE, name=OUR_SOURCE)
        found = _inspect(client_logs=logs, mode=LOGS_OFF, name="")
        stubbed.assert_no_pending_responses()
    assert found["Data"]["IngestionLogsCheck"].startswith("off: ingestionLogs=false")


def _plain() -> dict[str, Any]:
    """A data source with no KMS key (the key check is another test's)."""
    source = data_source(CHUNKINGS["fixed_size"])
    del source["serverSideEncryptionConfiguration"]
    return source


def _logs_event(mode: str, name: str) -> dict[str, Any]:
    return event(
        "Create",
        "Custom::DataSourceInspection",
        properties={"IngestionLogs": mode, "IngestionLogSource": name},
    )


def _inspect(*, client_logs: Any, mode: str, name: str) -> dict[str, Any]:
    client = boto3.client("bedrock-agent", region_name=REGION)
    with Stubber(client) as stub:
        stub.add_response("get_knowledge_base", knowledge_base(), {"knowledgeBaseId": KB})
        stub.add_response(
            "get_data_source", {"dataSource": _plain()}, {"knowledgeBaseId": KB, "dataSourceId": DS}
        )
        try:
            return handle(_logs_event(mode, name), DataSources(client, logs=client_logs))
        finally:
            stub.assert_no_pending_responses()
