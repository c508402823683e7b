"""The deployed stack's resources, found from its CloudFormation outputs by stack name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError

from contextual_kb.query.retrieval import CLIENT_CONFIG

DEFAULT_STACK = "ContextualKb"


class DeploymentError(Exception):
    """The stack or one of its outputs cannot be found."""


@dataclass(frozen=True, slots=True)
class Deployment:
    stack: str
    region: str
    knowledge_base_id: str
    data_source_id: str
    source_bucket: str
    vector_store: str  # opensearch | s3vectors
    intermediate_bucket: str = ""
    function_name: str = ""
    function_arn: str = ""
    mode: str = "stack"  # stack: its own Knowledge Base; attach: one the user already had
    knowledge_base_role_arn: str = ""  # attach: the KB's own role, given the stack's policy
    knowledge_base_policy: str = ""  # attach: that policy's name
    batch_role_arn: str = ""  # the role batch inference jobs run as (ckb contextualize)
    # attach on Aurora with no custom metadata field: the metadata columns the deploy confirmed its table has
    metadata_columns: tuple[str, ...] = ()
    ingestion_log_group: str = ""  # the Knowledge Base's own ingestion logs (none: not delivered)
    alarm_topic_arn: str = ""  # the topic every alarm notifies (none: a stack from before it had one)
    data_source_key_check: str = ""  # attach: the inspection's line on the data source's KMS key
    state_machine_arn: str = ""  # the deferred workflow (autoContextualize; none: not deployed)
    # attach: the inspection's line on the Knowledge Base's ingestion-log delivery (create, use or off)
    ingestion_logs_check: str = ""

    @property
    def attached(self) -> bool:
        return self.mode == "attach"

    @classmethod
    def from_stack(cls, stack: str, region: str, client: Any = None) -> Deployment:
        client = client or boto3.client("cloudformation", region_name=region, config=CLIENT_CONFIG)
        try:
            described = client.describe_stacks(StackName=stack)["Stacks"]
        except ClientError as exc:
            message = exc.response.get("Error", {}).get("Message", str(exc))
            raise DeploymentError(
                f"stack {stack} in {region}: {message} "
                "(deploy it with `make deploy`, or pass --stack / --region; attached to your own Knowledge "
                "Base: --stack ContextualKbAttached)"
            ) from None
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described[0].get("Outputs", [])}
        needed = ("KnowledgeBaseId", "DataSourceId", "SourceBucketName")
        missing = [name for name in needed if name not in outputs]
        if missing:
            raise DeploymentError(
                f"stack {stack} has no output {', '.join(missing)}: is it this project's stack?"
            )
        return cls(
            stack=stack,
            region=region,
            knowledge_base_id=outputs["KnowledgeBaseId"],
            data_source_id=outputs["DataSourceId"],
            source_bucket=outputs["SourceBucketName"],
            vector_store=outputs.get("VectorStoreType", "opensearch"),
            intermediate_bucket=outputs.get("IntermediateBucketName", ""),
            function_name=outputs.get("TransformFunctionName", ""),
            function_arn=outputs.get("TransformFunctionArn", ""),
            mode=outputs.get("StackMode", "stack"),
            knowledge_base_role_arn=outputs.get("KnowledgeBaseRoleArn", ""),
            knowledge_base_policy=outputs.get("KnowledgeBasePolicyName", ""),
            batch_role_arn=outputs.get("BatchRoleArn", ""),
            metadata_columns=tuple(
                c for c in outputs.get("RdsMetadataColumns", "").split(",") if c and c != "none"
            ),
            ingestion_log_group=outputs.get("IngestionLogGroupName", ""),
            alarm_topic_arn=outputs.get("AlarmTopicArn", ""),
            data_source_key_check=outputs.get("DataSourceKeyCheck", ""),
            state_machine_arn=outputs.get("ContextualizeStateMachineArn", ""),
            ingestion_logs_check=outputs.get("IngestionLogsCheck", ""),
        )
