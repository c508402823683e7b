"""The service role Bedrock batch inference jobs run as (``ckb contextualize`` passes it to
``CreateModelInvocationJob``).

Assumable by Bedrock only, for this account's model invocation jobs (``aws:SourceAccount``, and
``aws:SourceArn`` on ``model-invocation-job/*``), as AWS's batch inference service-role page sets it. It may
read the jobs' inputs and write their outputs under the batch prefix of the intermediate bucket (nothing
else there: not the Knowledge Base's files, not the remembered contexts), use the bucket's key, and invoke
the configured model through its inference profile (the function's own model statements: no model ``*``).
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from contextual_kb.cdk import nag
from contextual_kb.cdk.function import acknowledge_model_statements, model_statements
from contextual_kb.cdk.storage import BATCH_PREFIX


class BatchRole(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, intermediate: s3.IBucket, model_id: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            description="Bedrock batch inference jobs of ckb contextualize",
            assumed_by=iam.ServicePrincipal(
                "bedrock.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {
                        "aws:SourceArn": (
                            f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:model-invocation-job/*"
                        )
                    },
                },
            ),
        )
        objects = intermediate.arn_for_objects(f"{BATCH_PREFIX}*")
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[objects])
        )
        nag.ack_resources(
            self.role,
            "Batch inference jobs read their inputs and write their outputs under the batch prefix, one "
            "folder a run and a job: the grant is on that prefix, nothing else of the bucket.",
            [objects],
        )
        # As AWS's batch service-role page grants it: which listings the job makes is not documented, so no
        # prefix condition that one of them could fail in validation.
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[intermediate.bucket_arn])
        )
        if intermediate.encryption_key is not None:
            intermediate.encryption_key.grant(self.role, "kms:Decrypt", "kms:GenerateDataKey")
        for statement in model_statements(model_id):
            self.role.add_to_policy(statement)
        acknowledge_model_statements(self.role, model_id)
