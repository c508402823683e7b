"""cdk-nag (AwsSolutions) acknowledgments: each names the exact finding it covers, with its reason.

Anything not listed here fails ``cdk synth``. Each construct acknowledges its own findings when it is made
(``ContextualTransformation``, ``ContextualKnowledgeBase``), so a user's app that runs cdk-nag sees none of
ours; the attach stack acknowledges its own (stacks/attach.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk
from constructs import IConstruct

from contextual_kb.cdk.storage import BATCH_PREFIX
from contextual_kb.cdk.vector_store import OpenSearchVectorStore

if TYPE_CHECKING:
    from contextual_kb.cdk.alarm_topic import AlarmTopic
    from contextual_kb.cdk.batch import BatchRole
    from contextual_kb.cdk.contextual_knowledge_base import ContextualKnowledgeBase
    from contextual_kb.cdk.function import TransformFunction
    from contextual_kb.cdk.transformation import ContextualTransformation

RULE = "AwsSolutions::AwsSolutions-"


def ack(scope: IConstruct, finding: str, reason: str) -> None:
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=RULE + finding, reason=reason))


def logical(scope: IConstruct) -> str:
    return cdk.Stack.of(scope).get_logical_id(scope.node.default_child)  # type: ignore[arg-type]


def bucket_in_findings(bucket: IConstruct) -> str:
    """How cdk-nag writes a bucket's ARN in a finding: the bucket's logical ID, or an imported one's ARN."""
    if bucket.node.default_child is not None:
        return f"<{logical(bucket)}.Arn>"
    return f"arn:<AWS::Partition>:s3:::{bucket.bucket_name}"  # type: ignore[attr-defined]


def acknowledge_transformation(transformation: ContextualTransformation) -> None:
    intermediate = bucket_in_findings(transformation.intermediate)
    acknowledge_function(transformation.transform, intermediate, transformation.config.model_id)


def acknowledge_knowledge_base_grant(role: IConstruct, transformation: ContextualTransformation) -> None:
    """What ``ContextualTransformation.grant`` gives a Knowledge Base's role (the same two as the full
    stack's role)."""
    ack(
        role,
        f"IAM5[Resource::{bucket_in_findings(transformation.intermediate)}/*]",
        "The KB writes and reads its intermediate files (batch objects) under keys it chooses per job.",
    )
    ack(
        role,
        f"IAM5[Resource::<{logical(transformation.function)}.Arn>:*]",
        "The KB service may invoke a version or alias of the function (documented requirement).",
    )


def acknowledge_batch(batch: BatchRole, intermediate: IConstruct, model_id: str) -> None:
    _batch(batch, bucket_in_findings(intermediate), model_id)


def acknowledge_alarm_topic(alarms: AlarmTopic) -> None:
    topic = alarms.created
    if topic is not None and topic.master_key is None:
        ack(
            topic,
            "SNS2",
            "Without kmsKey the stack has no key of its own, and SNS's AWS-managed key (alias/aws/sns) would "
            "silence every alarm: its key policy cannot be changed to let CloudWatch publish. The topic "
            "carries alarm names and states, no document; kmsKey=true encrypts it with the stack's key.",
        )


def _batch(batch: BatchRole, intermediate: str, model_id: str) -> None:
    ack(
        batch.role,
        f"IAM5[Resource::{intermediate}/{BATCH_PREFIX}*]",
        "Batch inference jobs read their inputs and write their outputs under the batch prefix, one folder a "
        "run and a job: the grant is on that prefix, nothing else of the bucket.",
    )
    model = model_id.split(".", 1)[-1]
    ack(
        batch.role,
        f"IAM5[Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/{model}]",
        "A cross-region inference profile routes to regions AWS chooses; the statement allows the model "
        "only when called through the configured profile (condition bedrock:InferenceProfileArn).",
    )


def acknowledge_function(transform: TransformFunction, intermediate: str, model_id: str) -> None:
    function_role = transform.role
    if transform.quota_table is not None:
        ack(
            transform.quota_table,
            "DDB3",
            "The table holds one number a model, the end of the shared quota's timeline, rewritten with "
            "every model call: there is nothing to restore to a point in time; a lost item starts a new one.",
        )
    ack(
        transform.function,
        "L1",
        "Python 3.13 is pinned: the bundled wheels (pydantic-core, and the rest) are built for it and the "
        "tests run the code for it; move with a tested upgrade, not with the newest runtime.",
    )
    ack(
        function_role,
        "IAM5[Resource::*]",
        "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions: AWS "
        "requires *.",
    )
    ack(
        function_role,
        f"IAM5[Resource::{intermediate}/*]",
        "The function reads the batch objects the KB writes and writes its outputs and remembered contexts; "
        "their keys are chosen per ingestion job, so the grant is on objects of the intermediate bucket.",
    )
    ack(
        function_role,
        f"IAM5[Resource::<{logical(transform.log_group)}.Arn>:log-stream:*]",
        "Lambda creates one log stream per execution environment in the function's own log group.",
    )
    model = model_id.split(".", 1)[-1]
    ack(
        function_role,
        f"IAM5[Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/{model}]",
        "A cross-region inference profile routes to regions AWS chooses; the statement allows the model "
        "only when called through the configured profile (condition bedrock:InferenceProfileArn).",
    )


def acknowledge_knowledge_base(stack: ContextualKnowledgeBase) -> None:
    intermediate = bucket_in_findings(stack.storage.intermediate)
    transform = stack.transform
    kb_role = stack.knowledge_base.role
    ack(
        kb_role,
        f"IAM5[Resource::<{logical(stack.storage.source)}.Arn>/*]",
        "The KB reads every document of its source bucket: that is what a data source is.",
    )
    ack(
        kb_role,
        f"IAM5[Resource::{intermediate}/*]",
        "The KB writes and reads its intermediate files (batch objects) under keys it chooses per job.",
    )
    ack(
        kb_role,
        f"IAM5[Resource::<{logical(transform.function)}.Arn>:*]",
        "The KB service may invoke a version or alias of the function (documented requirement).",
    )
    store = stack.vector_store
    if isinstance(store, OpenSearchVectorStore):
        ack(
            store.index_function,
            "L1",
            "Python 3.13, like the transformation function: the index's custom resource is tested on it.",
        )
        ack(
            store.index_role,
            f"IAM5[Resource::<{logical(store.index_log_group)}.Arn>:log-stream:*]",
            "Lambda creates one log stream per execution environment in the function's own log group.",
        )
        ack(
            store.provider,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's custom-resource Provider framework gives its function this managed policy (logs only).",
        )
        ack(
            store.provider,
            f"IAM5[Resource::<{logical(store.index_function)}.Arn>:*]",
            "The Provider framework may invoke any version of the index's function (CDK's own grant).",
        )
