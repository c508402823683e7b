"""The transformation function: Python 3.13 on arm64, our handler, every setting as environment.

It may invoke only the configured model (through its inference profile, and the foundation-model ARNs the
profile routes to), read and write only the intermediate bucket, and, with a shared model quota, read and
update the one table that keeps its turns.
"""

from __future__ import annotations

from aws_cdk import Annotations, Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from contextual_kb.cdk import nag
from contextual_kb.cdk.bundling import function_code
from contextual_kb.cdk.config import PROFILE_PREFIXES, StackConfig
from contextual_kb.cdk.logs import logs_statement, month_of_logs

HANDLER = "contextual_kb.runtime.handler.lambda_handler"
# The function's metrics namespace and service (Powertools' variables), which the alarms watch.
NAMESPACE = "ContextualKB"
SERVICE = "contextual-kb"
ARCHITECTURE = "arm64"
_PROFILE_PREFIXES = PROFILE_PREFIXES


def model_statements(model_id: str) -> list[iam.PolicyStatement]:
    """InvokeModel on the model: the profile ARN, and the foundation model only through that profile
    (facts file: a ``global.`` profile also needs the region-less foundation-model ARN)."""
    prefix = next((p for p in _PROFILE_PREFIXES if model_id.startswith(p)), "")
    if not prefix:  # a foundation model called directly, in this region
        return [
            iam.PolicyStatement(
                actions=["bedrock:InvokeModel"],
                resources=[f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}::foundation-model/{model_id}"],
            )
        ]
    foundation = model_id[len(prefix) :]
    profile_arn = f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:inference-profile/{model_id}"
    statements = [
        iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=[profile_arn]),
        iam.PolicyStatement(
            actions=["bedrock:InvokeModel"],
            # The destination regions of a cross-region profile are AWS's to choose: any region, but only
            # when the call comes through this profile.
            resources=[f"arn:{Aws.PARTITION}:bedrock:*::foundation-model/{foundation}"],
            conditions={"StringEquals": {"bedrock:InferenceProfileArn": profile_arn}},
        ),
    ]
    if prefix == "global.":
        statements.append(
            iam.PolicyStatement(
                actions=["bedrock:InvokeModel"],
                resources=[f"arn:{Aws.PARTITION}:bedrock:::foundation-model/{foundation}"],
                conditions={
                    "StringEquals": {
                        "aws:RequestedRegion": "unspecified",
                        "bedrock:InferenceProfileArn": profile_arn,
                    }
                },
            )
        )
    return statements


class TransformFunction(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        intermediate: s3.IBucket,
        code: lambda_.Code | None = None,
        chunking: dict[str, str] | None = None,
        vector_store: str | None = None,
        handler: str = HANDLER,
    ) -> None:
        """``handler``: the Lambda handler (a user's own module in the asset: docs/SDK.md). ``chunking``: the
        function's chunking settings when the config's are not the final word (attach
        mode: CHUNKING comes from the data source, at deploy time); ``vector_store`` likewise (attach mode:
        the Knowledge Base's store, which sets the chunk metadata's limit)."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.log_group = log_group = month_of_logs(self, "Logs")
        # Our own role, not AWSLambdaBasicExecutionRole: logs to this log group only.
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.role.add_to_policy(logs_statement(self.role, log_group))
        environment = {
            "POWERTOOLS_SERVICE_NAME": SERVICE,
            "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
            "CONTEXT_STRATEGY": "claude",
            **config.function_environment,
            **(config.function_chunking if chunking is None else chunking),
            **config.function_defer,
            "VECTOR_STORE": config.vector_store if vector_store is None else vector_store,
        }
        # What the function's metrics are emitted under (a user's functionEnvironment may set them).
        self.metrics_namespace = environment["POWERTOOLS_METRICS_NAMESPACE"]
        self.service = environment["POWERTOOLS_SERVICE_NAME"]
        self.quota_table: dynamodb.Table | None = None
        if config.unlisted_rpm:
            Annotations.of(self).add_warning_v2("contextual-kb:unlisted-rpm", config.unlisted_rpm)
        if config.shares_quota:
            # One item a model: the end of the quota's timeline (runtime/context/claude/shared_quota.py). A
            # number nobody needs back: no backups, gone with the stack.
            self.quota_table = dynamodb.Table(
                self,
                "QuotaTable",
                partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                removal_policy=RemovalPolicy.DESTROY,
            )
            environment.update({**config.function_quota, "MODEL_QUOTA_TABLE": self.quota_table.table_name})
        self.function = lambda_.Function(
            self,
            "Function",
            description=f"{stack.stack_name}: Knowledge Base POST_CHUNKING contextual transformation",
            runtime=lambda_.Runtime.PYTHON_3_13,
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=code or function_code(ARCHITECTURE),
            memory_size=config.function_memory_mb,
            timeout=Duration.seconds(config.function_timeout_seconds),
            environment=environment,
            log_group=log_group,
            role=self.role,
            tracing=lambda_.Tracing.ACTIVE,
        )
        # Batch objects in, outputs and remembered contexts out.
        objects = intermediate.arn_for_objects("*")
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[objects])
        )
        nag.ack_resources(
            self.role,
            "The function reads the batch objects the KB writes and writes its outputs and remembered "
            "contexts; their keys are chosen per ingestion job, so the grant is on objects of the "
            "intermediate bucket.",
            [objects],
        )
        # No delete: a failed call leaves its outputs (a concurrent call of the same event may own the same
        # keys: runtime/outputs.py); they expire with the intermediate files.
        # Without ListBucket, S3 answers a missing key with 403, not 404: every document not yet remembered
        # would look like a permission failure (docs/SECURITY.md). It lists only this bucket.
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[intermediate.bucket_arn])
        )
        if intermediate.encryption_key is not None:
            intermediate.encryption_key.grant(self.role, "kms:Decrypt", "kms:GenerateDataKey")
        if self.quota_table is not None:
            actions = ["dynamodb:GetItem", "dynamodb:UpdateItem"]
            self.role.add_to_policy(
                iam.PolicyStatement(actions=actions, resources=[self.quota_table.table_arn])
            )
        for statement in model_statements(config.model_id):
            self.function.add_to_role_policy(statement)
        acknowledge_model_statements(self.role, config.model_id)
        nag.ack(
            self.function,
            "L1",
            "Python 3.13 is pinned: the bundled wheels (pydantic-core, and the rest) are built for it and "
            "the tests run the code for it; move with a tested upgrade, not with the newest runtime.",
        )
        nag.ack(
            self.role,
            "IAM5[Resource::*]",
            "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions: AWS "
            "requires *.",
        )
        if self.quota_table is not None:
            nag.ack(
                self.quota_table,
                "DDB3",
                "The table holds one number a model, the end of the shared quota's timeline, rewritten with "
                "every model call: nothing to restore to a point in time; a lost item starts a new one.",
            )


def acknowledge_model_statements(role: iam.IRole, model_id: str) -> None:
    """The foundation model in every region, which ``model_statements`` allows only through the profile."""
    nag.ack_resources(
        role,
        "A cross-region inference profile routes to regions AWS chooses; the statement allows the model "
        "only when called through the configured profile (condition bedrock:InferenceProfileArn).",
        [resource for statement in model_statements(model_id) for resource in statement.resources],
    )
