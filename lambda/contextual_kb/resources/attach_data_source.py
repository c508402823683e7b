"""The custom resources that attach this stack's function to a data source the user already has, and detach
it (the attach mode of the stack: ``-c knowledgeBaseId=... -c dataSourceId=...``).

``Custom::DataSourceInspection`` reads, never writes (GetKnowledgeBase, GetDataSource). It refuses, in one
line and before anything is changed, a knowledge base or data source that does not exist here, a knowledge
base that is not a vector one, a data source of a type that takes no transformation, one being deleted,
a knowledge base whose service role is not the ``knowledgeBaseRoleArn`` the stack grants, and one whose
vectors are in an Aurora (RDS) table with no custom metadata field, until the deploy confirms the table has
a column for each metadata attribute the function and ``ckb sync --reprocess`` add
(``RdsMetadataColumns``). A ``null`` in GetDataSource's answer is taken as absent. It answers
the function's chunking (``structure`` when the data source's chunking is NONE: the function must chunk
whole documents), the source bucket (S3 data sources) and the vector store's type. With a KMS key on the
data source it reads the key's policy (``kms:GetKeyPolicy``) and answers, in one line, whether the function's
role can use the key through the IAM grant the stack gives it, and if not what to add to the key policy
(``DataSourceKeyCheck``, a stack output and a ``ckb doctor`` line; never a refusal: that the Knowledge Base
encrypts the intermediate files with the data source's key is inferred, not documented, see below).

``Custom::DataSourceAttachment`` writes:

- **Create**: GetDataSource, then UpdateDataSource with the data source's whole configuration as read,
  only ``vectorIngestionConfiguration.customTransformationConfiguration`` set to ours. The request is made
  of every member of UpdateDataSource's input that GetDataSource returned, read from the SDK's own model,
  so nothing the user had (name, description, data source configuration, parsing, chunking, context
  enrichment, deletion policy, encryption) is dropped or changed. AWS: "retrieve the complete existing
  configuration using GetDataSource and pass the full vectorIngestionConfiguration with only the specific
  values modified" (kb-data-source-customize-ingestion). A data source that already runs another
  transformation is refused unless ``ReplaceTransformation`` is true; the transformation replaced (or
  none) is kept in the physical resource ID, which CloudFormation hands back on update and delete.
- **Update**: ours set again (a new function ARN or intermediate location), the same physical ID; another
  data source: a new physical ID, and CloudFormation's delete of the old one detaches that one.
- **Delete**: GetDataSource; if its transformation is still ours, the kept one is put back (or none is
  left), everything else as it is now: a user's later changes stay. If the transformation was changed by
  hand, it is left alone and the log says so. A data source or knowledge base already gone: nothing to do.
  A delete with an id that is not ours follows a create CloudFormation cancelled while it ran (another
  resource failed): the data source its properties name loses our transformation if it runs it.

Run by CDK's Provider framework (``on_event`` returns the result or raises; the framework answers
CloudFormation). boto3 is the Lambda runtime's.
"""

from __future__ import annotations

import base64
import copy
import fnmatch
import json
import logging
import zlib
from typing import Any

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

ID_PREFIX = "ckb-attach"
NO_TRANSFORMATION = "none"
MAX_PHYSICAL_ID_BYTES = 1024  # CloudFormation: a custom resource's physical ID is up to 1 KB
VECTOR = "VECTOR"
# Data source types that hand documents to a vector ingestion (AWS documents custom transformations for S3
# and, with Markdown, for web connectors; none for these two).
# CUSTOM data sources take documents by direct ingestion only, which is not documented to run the data
# source's transformation: attaching one would change nothing.
UNSUPPORTED_TYPES = {"REDSHIFT_METADATA", "MANAGED_KNOWLEDGE_BASE_CONNECTOR", "CUSTOM"}
GONE = {"ResourceNotFoundException"}
STORES = {"OPENSEARCH_SERVERLESS": "opensearch", "S3_VECTORS": "s3vectors"}
NO_KEY = "none-on-the-data-source"
# The chunk metadata the function adds, by name and the column type an Aurora table needs for it: the
# context's copy (CONTEXT_METADATA_KEY, unless CONTEXT_METADATA_MAX_BYTES is 0), a chunk's span and section
# when it chunks (runtime/transform.py), and ckb sync --reprocess's stamp in the metadata files
# (query/reprocess.py).
# The runtime and the query side are not imported here: this package runs alone in its own Lambda.
STRUCTURE_COLUMNS = (("ckb_section", "text"), ("ckb_start", "bigint"), ("ckb_end", "bigint"))
REPROCESS_COLUMN = ("ckb_reprocessed", "text")
NO_COLUMNS = "none"
# What the function does with the intermediate files' key (the stack's IAM grant on its role).
KEY_USE = ("kms:Decrypt", "kms:GenerateDataKey")


class AttachError(Exception):
    """The data source cannot be attached (or detached) as asked: the message says what and what to do."""


# --- pure ---------------------------------------------------------------------------------------------------


def update_request(
    data_source: dict[str, Any], members: set[str], transformation: dict[str, Any] | None
) -> dict[str, Any]:
    """The UpdateDataSource request that leaves ``data_source`` (GetDataSource's ``dataSource``) as it is but
    for its custom transformation: ``transformation``, or none. ``members``: UpdateDataSource's input members.
    Pure."""
    request = {name: copy.deepcopy(value) for name, value in data_source.items() if name in members}
    ingestion = dict(request.get("vectorIngestionConfiguration") or {})
    if transformation is None:
        ingestion.pop("customTransformationConfiguration", None)
    else:
        ingestion["customTransformationConfiguration"] = copy.deepcopy(transformation)
    if ingestion:
        request["vectorIngestionConfiguration"] = ingestion
    else:
        request.pop("vectorIngestionConfiguration", None)
    return request


def ours(function_arn: str, intermediate_uri: str) -> dict[str, Any]:
    return {
        "intermediateStorage": {"s3Location": {"uri": intermediate_uri}},
        "transformations": [
            {
                "stepToApply": "POST_CHUNKING",
                "transformationFunction": {"transformationLambdaConfiguration": {"lambdaArn": function_arn}},
            }
        ],
    }


def transformation_of(data_source: dict[str, Any]) -> dict[str, Any] | None:
    return (data_source.get("vectorIngestionConfiguration") or {}).get("customTransformationConfiguration")


def functions_of(transformation: dict[str, Any] | None) -> list[str]:
    """The Lambda ARNs a transformation runs."""
    if not transformation:
        return []
    return [
        str(
            step.get("transformationFunction", {})
            .get("transformationLambdaConfiguration", {})
            .get("lambdaArn", "")
        )
        for step in transformation.get("transformations") or []
    ]


def is_ours(transformation: dict[str, Any] | None, function_arns: set[str]) -> bool:
    """The transformation runs one of ``function_arns`` (a version or alias of it counts)."""
    return any(
        _unqualified(arn) in {_unqualified(a) for a in function_arns} for arn in functions_of(transformation)
    )


def _unqualified(arn: str) -> str:
    parts = arn.split(":")
    return (
        ":".join(parts[:7]) if len(parts) > 7 else arn
    )  # arn:aws:lambda:region:account:function:name[:qual]


def physical_id(knowledge_base_id: str, data_source_id: str, kept: dict[str, Any] | None) -> str:
    """The ID that carries the transformation to put back on delete (compressed JSON), within 1 KB."""
    state = NO_TRANSFORMATION
    if kept is not None:
        packed = zlib.compress(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode("utf-8"), 9)
        state = "z" + base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")
    found = f"{ID_PREFIX}:{knowledge_base_id}:{data_source_id}:{state}"
    if len(found.encode("utf-8")) > MAX_PHYSICAL_ID_BYTES:
        raise AttachError(
            f"data source {data_source_id}: its current transformation is too large to keep for the detach "
            f"({len(found)} bytes past CloudFormation's 1 KB physical ID); remove it by hand, then deploy"
        )
    return found


def parse_physical_id(value: str) -> tuple[str, str, dict[str, Any] | None] | None:
    """(knowledge base, data source, the kept transformation) from a physical ID; None for an ID that is
    not ours (a create that failed leaves the framework's request ID: nothing to detach)."""
    parts = value.split(":", 3)
    if len(parts) != 4 or parts[0] != ID_PREFIX:
        return None
    _, knowledge_base_id, data_source_id, state = parts
    if state == NO_TRANSFORMATION:
        return knowledge_base_id, data_source_id, None
    if not state.startswith("z"):
        return None
    packed = base64.urlsafe_b64decode(state[1:] + "=" * (-len(state[1:]) % 4))
    return knowledge_base_id, data_source_id, json.loads(zlib.decompress(packed))


def unknown_fields(answered: Any, parsed: Any, path: str = "") -> list[str]:
    """Paths of the fields in ``answered`` (the raw JSON) that ``parsed`` (the SDK's reading) lacks; a null
    is taken as absent. Pure."""
    if isinstance(answered, dict) and isinstance(parsed, dict):
        out = []
        for key, value in answered.items():
            if value is None:  # a null is no setting: botocore leaves it out of its reading, as AWS means
                continue
            where = f"{path}.{key}" if path else key
            out += unknown_fields(value, parsed[key], where) if key in parsed else [where]
        return out
    if isinstance(answered, list) and isinstance(parsed, list):
        return [p for a, b in zip(answered, parsed, strict=False) for p in unknown_fields(a, b, path)]
    return []


def role_name(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def inspect(
    knowledge_base: dict[str, Any],
    data_source: dict[str, Any],
    expected_role_arn: str,
    *,
    context_key: str = "ckb_context",
    rds_confirmed: bool = False,
) -> dict[str, str]:
    """What the stack needs to know of an existing knowledge base and data source, or AttachError.
    ``context_key``: the chunk metadata key of the context's copy ("" when the function writes none);
    ``rds_confirmed``: the deploy says an Aurora table has the columns for our metadata. Pure."""
    kb_id, ds_id = knowledge_base.get("knowledgeBaseId", "?"), data_source.get("dataSourceId", "?")
    kind = (knowledge_base.get("knowledgeBaseConfiguration") or {}).get("type", "")
    if kind != VECTOR:
        raise AttachError(
            f"knowledge base {kb_id} is of type {kind or 'unknown'}: only a VECTOR knowledge base runs a "
            "custom transformation"
        )
    role = str(knowledge_base.get("roleArn", ""))
    if expected_role_arn and role_name(role) != role_name(expected_role_arn):
        raise AttachError(
            f"knowledge base {kb_id}'s service role is {role}, not knowledgeBaseRoleArn {expected_role_arn}: "
            f"deploy with -c knowledgeBaseRoleArn={role}"
        )
    status = data_source.get("status", "")
    if status and status != "AVAILABLE":  # creating, updating, being deleted, failed: not ours to change now
        raise AttachError(f"data source {ds_id} is {status}: attach to a data source that is AVAILABLE")
    configuration = data_source.get("dataSourceConfiguration") or {}
    source_type = str(configuration.get("type", ""))
    if source_type in UNSUPPORTED_TYPES:
        raise AttachError(
            f"data source {ds_id} is of type {source_type}, which runs no custom transformation"
        )
    chunking = (
        (data_source.get("vectorIngestionConfiguration") or {}).get("chunkingConfiguration") or {}
    ).get("chunkingStrategy", "FIXED_SIZE")
    bucket_arn = str((configuration.get("s3Configuration") or {}).get("bucketArn", ""))
    storage = str((knowledge_base.get("storageConfiguration") or {}).get("type", ""))
    # The data source's own key encrypts its ingestion's transient data (encryption-kb.html); that the
    # intermediate files the function reads and writes are among them is inferred, not documented
    # (aws-facts.md): the function is granted it, on the safe side. None: an ARN of no key, so that the
    # grant is valid and grants nothing.
    key = str((data_source.get("serverSideEncryptionConfiguration") or {}).get("kmsKeyArn") or "")
    partition = role.split(":")[1] if role.count(":") >= 5 else "aws"
    columns = rds_columns(knowledge_base, chunking, context_key, confirmed=rds_confirmed)
    return {
        "Chunking": "structure" if chunking == "NONE" else "kb",
        "ChunkingStrategy": chunking,
        "SourceType": source_type,
        "SourceBucketName": bucket_arn.rsplit(":", 1)[-1] if bucket_arn else "",
        "VectorStoreType": STORES.get(storage, storage.lower() or "unknown"),
        "RoleArn": role,
        "DataSourceKmsKeyArn": key or f"arn:{partition}:kms:::key/{NO_KEY}",
        "MetadataColumns": ",".join(name for name, _ in columns) or NO_COLUMNS,
    }


def rds_columns(
    knowledge_base: dict[str, Any], chunking: str, context_key: str, *, confirmed: bool
) -> list[tuple[str, str]]:
    """The metadata columns an Aurora (RDS) table with no custom metadata field must have for the function's
    chunk metadata and ckb sync --reprocess ([] for another store, or with a custom metadata field, where all
    metadata goes into that one column); AttachError naming them until ``confirmed``. AWS: the table needs a
    column for each metadata attribute unless the KB maps a custom metadata field (aws-facts.md). Pure."""
    storage = knowledge_base.get("storageConfiguration") or {}
    if storage.get("type") != "RDS":
        return []
    rds = storage.get("rdsConfiguration") or {}
    if (rds.get("fieldMapping") or {}).get("customMetadataField"):
        return []
    needed = [(context_key, "text")] if context_key else []
    if chunking == "NONE":
        needed += STRUCTURE_COLUMNS
    needed.append(REPROCESS_COLUMN)
    if not confirmed:
        columns = ", ".join(f"{name} ({kind})" for name, kind in needed)
        raise AttachError(
            f"knowledge base {knowledge_base.get('knowledgeBaseId', '?')} stores its vectors in Aurora table "
            f"{rds.get('tableName', '?')} with no custom metadata field, where every metadata attribute "
            f"needs a column: add {columns} to it, then deploy with -c rdsMetadataColumns=true"
        )
    return needed


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _names(statement: dict[str, Any], principals: set[str]) -> bool:
    """The statement's Principal names one of ``principals`` (or everyone)."""
    principal = statement.get("Principal")
    if principal == "*":
        return True
    if not isinstance(principal, dict):
        return False
    return any(str(p) == "*" or str(p) in principals for p in _as_list(principal.get("AWS", [])))


def _covers(statement: dict[str, Any], action: str) -> bool:
    return any(
        fnmatch.fnmatchcase(action.lower(), str(a).lower()) for a in _as_list(statement.get("Action", []))
    )


def key_policy_gap(policy: dict[str, Any], *, account: str, partition: str, role_arn: str) -> str | None:
    """Why ``role_arn`` (a role of ``account``) cannot use the key for ``KEY_USE`` through an IAM grant under
    this key policy, or None when it can. An IAM policy grants a key's use only when the key policy lets
    IAM policies do so: a statement allowing the account (its root, or its ID) the actions (AWS's default
    key policy: ``kms:*``); a statement naming the role itself does too. Conditions are not evaluated; an
    unconditional Deny of the actions to the role, the account or everyone is a gap. Pure."""
    root = f"arn:{partition}:iam::{account}:root"
    principals = {root, account, role_arn}
    statements = [s for s in _as_list(policy.get("Statement", [])) if isinstance(s, dict)]
    for statement in statements:
        if (
            statement.get("Effect") == "Deny"
            and "Condition" not in statement
            and _names(statement, principals)
        ):
            denied = [a for a in KEY_USE if _covers(statement, a)]
            if denied:
                return f"statement {statement.get('Sid', '(no Sid)')} denies {', '.join(denied)}"
    allowed = [s for s in statements if s.get("Effect") == "Allow" and _names(s, principals)]
    if all(any(_covers(s, action) for s in allowed) for action in KEY_USE):
        return None
    use = " and ".join(KEY_USE)
    return f"it lets no IAM policy grant {use} (no statement for {root}) and does not name the role"


def key_check(key_arn: str, role_arn: str, policy: dict[str, Any] | None, error: str = "") -> str:
    """One line on the data source's key for the function's role: ``ok: ...``, ``none: ...``, or what to add.
    ``policy``: the key policy as read, or None with the ``error`` that stopped the read. Pure."""
    if not key_arn:
        return "none: the data source has no KMS key"
    role = role_arn.rsplit("/", 1)[-1] or role_arn
    use = " and ".join(KEY_USE)
    parts = key_arn.split(":")
    partition, key_account = (parts[1], parts[4]) if len(parts) > 5 else ("aws", "")
    account = role_arn.split(":")[4] if role_arn.count(":") >= 5 else ""
    if key_account and account and key_account != account:
        return (
            f"add: the data source's key {key_arn} is in account {key_account}: an IAM grant in {account} "
            f"is not enough; its key policy there must allow {role_arn} {use}"
        )
    if policy is None:
        return (
            f"check: the key policy of {key_arn} could not be read ({error}); it must let IAM policies "
            f"grant its use (a statement for arn:{partition}:iam::{account}:root) or allow {role_arn} {use}"
        )
    gap = key_policy_gap(policy, account=account, partition=partition, role_arn=role_arn)
    if gap is None:
        return f"ok: the key policy of {key_arn} lets the function's role {role} use it"
    return (
        f"add: the key policy of {key_arn}: {gap}; add a statement allowing {role_arn} {use} (or "
        f"arn:{partition}:iam::{account}:root kms:*, AWS's default key policy)"
    )


LOG_TYPE = "APPLICATION_LOGS"  # the Knowledge Base's ingestion logs (query/ingestion_logs.py)
# What the stack does with those logs (the inspection's IngestionLogs property): make a delivery source,
# use the one the Knowledge Base has (ingestionLogSource), or nothing (ingestionLogs=false).
LOGS_CREATE, LOGS_USE, LOGS_OFF = "create", "use", "off"


def log_sources_of(sources: list[dict[str, Any]], knowledge_base_arn: str) -> list[str]:
    """The names of the delivery sources (DescribeDeliverySources' ``deliverySources``) of the Knowledge
    Base's ingestion logs. Pure."""
    return sorted(
        str(s.get("name", ""))
        for s in sources
        if knowledge_base_arn in (s.get("resourceArns") or []) and s.get("logType") == LOG_TYPE
    )


def ingestion_logs_check(sources: list[dict[str, Any]], knowledge_base_arn: str, mode: str, name: str) -> str:
    """One line on the Knowledge Base's ingestion-log delivery before the stack adds its own, or AttachError.
    CloudWatch Logs allows one delivery source a resource and log type (a second one fails the deploy with
    ConflictException, after everything else was made): ``create`` with another source there is refused,
    naming it and what to deploy with; ``use`` needs that source to be this Knowledge Base's; ``off`` looks
    at nothing (``ckb doctor`` says where the logs go). ``name``: the source the stack makes (create) or
    uses (use). Pure."""
    if mode == LOGS_OFF:
        return "off: ingestionLogs=false: the stack delivers none of the Knowledge Base's ingestion logs"
    kb_id = knowledge_base_arn.rsplit("/", 1)[-1]
    found = log_sources_of(sources, knowledge_base_arn)
    if mode == LOGS_USE:
        if name in found:
            return f"use: a delivery from {name}, the Knowledge Base's own source, to the stack's log group"
        theirs = [s for s in sources if s.get("name") == name]
        what = (
            f"is for {', '.join(theirs[0].get('resourceArns') or ['?'])} ({theirs[0].get('logType', '?')})"
            if theirs
            else "does not exist in this account and region"
        )
        hint = f"-c ingestionLogSource={found[0]}" if found else "no ingestionLogSource (the stack makes one)"
        raise AttachError(
            f"ingestionLogSource {name} {what}, not knowledge base {kb_id}'s {LOG_TYPE}: deploy with {hint}"
        )
    others = [s for s in found if s != name]
    if others:
        raise AttachError(
            f"knowledge base {kb_id} already delivers its ingestion logs through delivery source {others[0]} "
            "(CloudWatch Logs allows one a resource and log type): deploy with "
            f"-c ingestionLogSource={others[0]} to deliver them to this stack's log group as well, or with "
            "-c ingestionLogs=false to leave them as they are"
        )
    return f"create: delivery source {name}, new, to the stack's log group"


# --- with AWS -----------------------------------------------------------------------------------------------


class DataSources:
    """The few bedrock-agent calls, with errors turned into one line."""

    def __init__(self, client: Any, kms: Any = None, logs: Any = None) -> None:
        self.client = client
        self._kms = kms
        self._logs = logs

    def delivery_sources(self) -> list[dict[str, Any]]:
        """Every CloudWatch Logs delivery source of the account in this region (DescribeDeliverySources)."""
        from botocore.exceptions import BotoCoreError, ClientError

        if self._logs is None:
            import boto3

            self._logs = boto3.client("logs", region_name=self.client.meta.region_name)
        found: list[dict[str, Any]] = []
        request: dict[str, Any] = {}
        try:
            for _ in range(1000):  # bounded: 50 a page
                page = self._logs.describe_delivery_sources(**request)
                found += page.get("deliverySources") or []
                if not page.get("nextToken"):
                    return found
                request = {"nextToken": page["nextToken"]}
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise AttachError(
                f"DescribeDeliverySources failed: {error.get('Code', 'Unknown')}: {error.get('Message', '')}"
            ) from None
        except BotoCoreError as exc:
            raise AttachError(f"DescribeDeliverySources failed: {exc}") from None
        raise AttachError("DescribeDeliverySources: more than 1,000 pages of delivery sources")

    def key_policy(self, key_arn: str) -> tuple[dict[str, Any] | None, str]:
        """The key's default policy, or None and why it could not be read (one line)."""
        from botocore.exceptions import BotoCoreError, ClientError

        if self._kms is None:
            import boto3

            self._kms = boto3.client("kms", region_name=self.client.meta.region_name)
        try:
            text = self._kms.get_key_policy(KeyId=key_arn, PolicyName="default")["Policy"]
            return json.loads(text), ""
        except ClientError as exc:
            error = exc.response.get("Error", {})
            return None, f"GetKeyPolicy: {error.get('Code', 'Unknown')}"
        except (BotoCoreError, ValueError, KeyError, TypeError) as exc:  # an answer without a policy in it
            return None, f"GetKeyPolicy: {exc}"

    @property
    def update_members(self) -> set[str]:
        return set(self.client.meta.service_model.operation_model("UpdateDataSource").input_shape.members)

    def knowledge_base(self, knowledge_base_id: str) -> dict[str, Any]:
        return self._call(
            "GetKnowledgeBase", f"knowledge base {knowledge_base_id}", knowledgeBaseId=knowledge_base_id
        )["knowledgeBase"]

    def data_source(self, knowledge_base_id: str, data_source_id: str) -> dict[str, Any]:
        """The data source as GetDataSource answers; refused when the answer holds fields this SDK's model
        does not know (botocore leaves them out of what it parses, so writing the data source back whole
        would drop them: a runtime SDK older than the API)."""
        raw: list[bytes] = []

        def keep(http_response: Any = None, **_: Any) -> None:
            try:
                raw.append(http_response.content)
            except Exception:  # no raw answer (a stubbed client): nothing to compare
                return

        events = self.client.meta.events
        events.register("after-call.bedrock-agent.GetDataSource", keep, unique_id="ckb-raw-data-source")
        try:
            found = self._call(
                "GetDataSource",
                f"data source {data_source_id} of knowledge base {knowledge_base_id}",
                knowledgeBaseId=knowledge_base_id,
                dataSourceId=data_source_id,
            )["dataSource"]
        finally:
            events.unregister("after-call.bedrock-agent.GetDataSource", unique_id="ckb-raw-data-source")
        if raw and raw[0]:
            try:
                answered = json.loads(raw[0]).get("dataSource", {})
            except ValueError:
                answered = {}
            unknown = unknown_fields(answered, found)
            if unknown:
                raise AttachError(
                    f"data source {data_source_id} has settings this SDK does not know "
                    f"({', '.join(unknown[:5])}): writing it back would drop them; deploy again when the "
                    "Lambda runtime's boto3 knows them, or attach by hand"
                )
        return found

    def update(self, request: dict[str, Any]) -> None:
        self._call("UpdateDataSource", f"data source {request.get('dataSourceId')}", **request)

    def _call(self, operation: str, what: str, **kwargs: Any) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        method = getattr(self.client, _snake(operation))
        try:
            return method(**kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", "Unknown"))
            region = self.client.meta.region_name
            if code in GONE:
                raise GoneError(f"{what}: not found in {region} ({code})") from None
            raise AttachError(
                f"{what}: {operation} failed in {region}: {code}: {error.get('Message', '')}"
            ) from None


class GoneError(AttachError):
    """The knowledge base or data source does not exist (in this region)."""


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


def handle(event: dict[str, Any], sources: DataSources) -> dict[str, Any]:
    kind = event.get("ResourceType", "")
    if kind == "Custom::DataSourceInspection":
        return _inspection(event, sources)
    if kind == "Custom::DataSourceAttachment":
        return _attachment(event, sources)
    raise AttachError(f"unknown resource type {kind}")


def _inspection(event: dict[str, Any], sources: DataSources) -> dict[str, Any]:
    properties = event["ResourceProperties"]
    kb_id, ds_id = str(properties["KnowledgeBaseId"]), str(properties["DataSourceId"])
    physical = f"ckb-inspect:{kb_id}:{ds_id}"
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", physical)}
    knowledge_base = sources.knowledge_base(kb_id)
    data_source = sources.data_source(kb_id, ds_id)
    data = inspect(
        knowledge_base,
        data_source,
        str(properties.get("RoleArn", "")),
        context_key=str(properties.get("ContextMetadataKey", "ckb_context")),
        rds_confirmed=str(properties.get("RdsMetadataColumns", "false")).lower() == "true",
    )
    key = str((data_source.get("serverSideEncryptionConfiguration") or {}).get("kmsKeyArn") or "")
    function_role = str(properties.get("FunctionRoleArn", ""))
    if key and not function_role:
        data["DataSourceKeyCheck"] = "check: not checked (the inspection was given no function role)"
    else:
        policy, error = sources.key_policy(key) if key else (None, "")
        data["DataSourceKeyCheck"] = key_check(key, function_role, policy, error)
    if not data["DataSourceKeyCheck"].startswith(("ok:", "none:")):
        logger.warning("data source key: %s", data["DataSourceKeyCheck"])
    mode = str(properties.get("IngestionLogs", LOGS_OFF))
    kb_arn = str(knowledge_base.get("knowledgeBaseArn", ""))
    # Before the stack's delivery source is made: a second one for the Knowledge Base fails the deploy.
    data["IngestionLogsCheck"] = ingestion_logs_check(
        sources.delivery_sources() if kb_arn and mode != LOGS_OFF else [],
        kb_arn,
        mode,
        str(properties.get("IngestionLogSource", "")),
    )
    logger.info("inspected %s", json.dumps({"knowledgeBaseId": kb_id, "dataSourceId": ds_id, **data}))
    return {"PhysicalResourceId": physical, "Data": data}


def _attachment(event: dict[str, Any], sources: DataSources) -> dict[str, Any]:
    properties = event["ResourceProperties"]
    request = event["RequestType"]
    if request == "Delete":
        return _detach(event, sources)
    kb_id, ds_id = str(properties["KnowledgeBaseId"]), str(properties["DataSourceId"])
    function_arn = str(properties["FunctionArn"])
    ours_now = ours(function_arn, str(properties["IntermediateUri"]))
    replace = str(properties.get("ReplaceTransformation", "false")).lower() == "true"
    previous = parse_physical_id(event.get("PhysicalResourceId", "")) if request == "Update" else None
    if previous is not None and previous[:2] != (kb_id, ds_id):
        # Moving the stack would detach the old data source after this stack's policies were rewritten for
        # the new one (the detach denied, the old Knowledge Base's role without its grants): refused, and the
        # update rolls back with the stack still attached where it was.
        raise AttachError(
            f"this stack is attached to data source {previous[1]} of knowledge base {previous[0]}: attach "
            f"another with a stack of its own (-c stackName=...), or destroy this one first"
        )
    known = {function_arn}
    if request == "Update":
        known.add(str(event.get("OldResourceProperties", {}).get("FunctionArn", function_arn)))
    data_source = sources.data_source(kb_id, ds_id)
    current = transformation_of(data_source)
    if previous is not None:  # an update of this stack's own attachment
        kept = previous[2]  # what was there before the first attach, not our own earlier setting
    else:
        if current is not None and not is_ours(current, known) and not replace:
            raise AttachError(
                f"data source {ds_id} already runs the transformation {', '.join(functions_of(current))}: "
                "deploy with -c replaceTransformation=true to replace it (it is put back on destroy)"
            )
        kept = None if is_ours(current, known) else current
    identifier = physical_id(kb_id, ds_id, kept)  # refuses a state too large to keep, before writing
    sources.update(update_request(data_source, sources.update_members, ours_now))
    logger.info(
        "attached %s",
        json.dumps(
            {
                "knowledgeBaseId": kb_id,
                "dataSourceId": ds_id,
                "function": function_arn,
                "replaced": functions_of(kept),
            }
        ),
    )
    return {"PhysicalResourceId": identifier, "Data": {"Replaced": ",".join(functions_of(kept))}}


def _detach(event: dict[str, Any], sources: DataSources) -> dict[str, Any]:
    identifier = str(event.get("PhysicalResourceId", ""))
    properties = event.get("ResourceProperties", {})
    parsed = parse_physical_id(identifier)
    if parsed is None:
        # Not an id of ours: CloudFormation cancelled a create still running (another resource failed), and
        # the update may have landed. Its properties name the data source: if it runs our function, it is
        # left with none (what it ran before was never recorded; the log says so).
        kb_id, ds_id = str(properties.get("KnowledgeBaseId", "")), str(properties.get("DataSourceId", ""))
        if not kb_id or not ds_id:
            return {"PhysicalResourceId": identifier}
        kept, unknown_before = None, True
    else:
        kb_id, ds_id, kept = parsed
        unknown_before = False
    try:
        data_source = sources.data_source(kb_id, ds_id)
    except GoneError as exc:
        logger.info("nothing to detach: %s", exc)
        return {"PhysicalResourceId": identifier}
    current = transformation_of(data_source)
    if not is_ours(current, {str(properties.get("FunctionArn", ""))}):
        if not unknown_before:
            logger.warning(
                "data source %s no longer runs this stack's function (it runs %s): left as it is",
                ds_id,
                ", ".join(functions_of(current)) or "no transformation",
            )
        return {"PhysicalResourceId": identifier}
    sources.update(update_request(data_source, sources.update_members, kept))
    if unknown_before:
        logger.warning(
            "data source %s was attached by a create that was cancelled: its transformation removed; what it "
            "ran before, if anything, was not recorded",
            ds_id,
        )
    logger.info(
        "detached %s",
        json.dumps({"knowledgeBaseId": kb_id, "dataSourceId": ds_id, "restored": functions_of(kept) or None}),
    )
    return {"PhysicalResourceId": identifier}


def on_event(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    import boto3

    return handle(
        event, DataSources(boto3.client("bedrock-agent"), boto3.client("kms"), boto3.client("logs"))
    )
