"""cdk-nag (AwsSolutions) acknowledgments: each names the exact finding it covers, with its reason.

Anything not listed here fails ``cdk synth``.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct

from stacks.alarm_topic import AlarmTopic
from stacks.attach import AttachStack
from stacks.batch import BatchRole
from stacks.function import TransformFunction
from stacks.stack import ContextualKbStack
from stacks.storage import BATCH_PREFIX
from stacks.vector_store import OpenSearchVectorStore

RULE = "AwsSolutions::AwsSolutions-"


def _ack(scope: IConstruct, finding: str, reason: str) -> None:
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=RULE + finding, reason=reason))


def _logical(scope: IConstruct) -> str:
    return cdk.Stack.of(scope).get_logical_id(scope.node.default_child)  # type: ignore[arg-type]


def _bucket(bucket: IConstruct) -> str:
    """How cdk-nag writes a bucket's ARN in a finding: the bucket's logical ID, or an imported one's ARN."""
    if bucket.node.default_child is not None:
        return f"<{_logical(bucket)}.Arn>"
    return f"arn:<AWS::Partition>:s3:::{bucket.bucket_name}"  # type: ignore[attr-defined]


def acknowledge(stack: ContextualKbStack | AttachStack) -> None:
    if isinstance(stack, AttachStack):
        intermediate = _bucket(stack.intermediate)
        _function(stack.transform, intermediate, stack.config.model_id)
        _attach(stack)
    else:
        intermediate = _bucket(stack.storage.intermediate)
        _function(stack.transform, intermediate, stack.config.model_id)
        _full_stack(stack)
        if stack.deferred is not None:
            stack.deferred.acknowledge(stack.storage.intermediate, stack.storage.source)
    _batch(stack.batch, intermediate, stack.config.model_id)
    _alarm_topic(stack.alarm_topic)


def _alarm_topic(alarms: AlarmTopic) -> None:
    topic = alarms.created
    if topic is not None and topic.master_key is None:
        _ack(
            topic,
            "SNS2",
            "Without kmsKey the stack has no key of its own, and SNS's AWS-managed key (alias/aws/sns) would "
            "silence every alarm: its key policy cannot be changed to let CloudWatch publish. The topic "
            "carries alarm names and states, no document; kmsKey=true encrypts it with the stack's key.",
        )


def _batch(batch: BatchRole, intermediate: str, model_id: str) -> None:
    _ack(
        batch.role,
        f"IAM5[Resource::{intermediate}/{BATCH_PREFIX}*]",
        "Batch inference jobs read their inputs and write their outputs under the batch prefix, one folder a "
        "run and a job: the grant is on that prefix, nothing else of the bucket.",
    )
    model = model_id.split(".", 1)[-1]
    _ack(
        batch.role,
        f"IAM5[Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/{model}]",
        "A cross-region inference profile routes to regions AWS chooses; the statement allows the model "
        "only when called through the configured profile (condition bedrock:InferenceProfileArn).",
    )


def _function(transform: TransformFunction, intermediate: str, model_id: str) -> None:
    function_role = transform.role
    if transform.quota_table is not None:
        _ack(
            transform.quota_table,
            "DDB3",
            "The table holds one number a model, the end of the shared quota's timeline, rewritten with "
            "every model call: there is nothing to restore to a point in time; a lost item starts a new one.",
        )
    _ack(
        transform.function,
        "L1",
        "Python 3.13 is pinned: the bundled wheels (pydantic-core, and the rest) are built for it and the "
        "tests run the code for it; move with a tested upgrade, not with the newest runtime.",
    )
    _ack(
        function_role,
        "IAM5[Resource::*]",
        "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions: AWS "
        "requires *.",
    )
    _ack(
        function_role,
        f"IAM5[Resource::{intermediate}/*]",
        "The function reads the batch objects the KB writes and writes its outputs and remembered contexts; "
        "their keys are chosen per ingestion job, so the grant is on objects of the intermediate bucket.",
    )
    _ack(
        function_role,
        f"IAM5[Resource::<{_logical(transform.log_group)}.Arn>:log-stream:*]",
        "Lambda creates one log stream per execution environment in the function's own log group.",
    )
    model = model_id.split(".", 1)[-1]
    _ack(
        function_role,
        f"IAM5[Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/{model}]",
        "A cross-region inference profile routes to regions AWS chooses; the statement allows the model "
        "only when called through the configured profile (condition bedrock:InferenceProfileArn).",
    )


def _full_stack(stack: ContextualKbStack) -> None:
    intermediate = _bucket(stack.storage.intermediate)
    transform = stack.transform
    kb_role = stack.knowledge_base.role
    _ack(
        kb_role,
        f"IAM5[Resource::<{_logical(stack.storage.source)}.Arn>/*]",
        "The KB reads every document of its source bucket: that is what a data source is.",
    )
    _ack(
        kb_role,
        f"IAM5[Resource::{intermediate}/*]",
        "The KB writes and reads its intermediate files (batch objects) under keys it chooses per job.",
    )
    _ack(
        kb_role,
        f"IAM5[Resource::<{_logical(transform.function)}.Arn>:*]",
        "The KB service may invoke a version or alias of the function (documented requirement).",
    )
    store = stack.vector_store
    if isinstance(store, OpenSearchVectorStore):
        _ack(
            store.index_function,
            "L1",
            "Python 3.13, like the transformation function: the index's custom resource is tested on it.",
        )
        _ack(
            store.index_role,
            f"IAM5[Resource::<{_logical(store.index_log_group)}.Arn>:log-stream:*]",
            "Lambda creates one log stream per execution environment in the function's own log group.",
        )
        _ack(
            store.provider,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's custom-resource Provider framework gives its function this managed policy (logs only).",
        )
        _ack(
            store.provider,
            f"IAM5[Resource::<{_logical(store.index_function)}.Arn>:*]",
            "The Provider framework may invoke any version of the index's function (CDK's own grant).",
        )


def _attach(stack: AttachStack) -> None:
    _ack(
        stack.attach_function,
        "L1",
        "Python 3.13, like the transformation function: the attach resource is tested on it.",
    )
    _ack(
        stack.attach_role,
        f"IAM5[Resource::<{_logical(stack.attach_log_group)}.Arn>:log-stream:*]",
        "Lambda creates one log stream per execution environment in the function's own log group.",
    )
    _ack(
        stack.attach_role,
        "IAM5[Resource::arn:<AWS::Partition>:kms:<AWS::Region>:<AWS::AccountId>:key/*]",
        "The inspection reads the data source's key policy (kms:GetKeyPolicy only); which key is known only "
        "when it reads the data source, so the grant is on this account's keys in this region.",
    )
    _ack(
        stack.provider,
        "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "CDK's custom-resource Provider framework gives its function this managed policy (logs only).",
    )
    _ack(
        stack.provider,
        f"IAM5[Resource::<{_logical(stack.attach_function)}.Arn>:*]",
        "The Provider framework may invoke any version of the attach function (CDK's own grant).",
    )
    _ack(
        stack.kb_policy,
        f"IAM5[Resource::{_bucket(stack.intermediate)}/*]",
        "The KB writes and reads its intermediate files (batch objects) under keys it chooses per job.",
    )
    _ack(
        stack.kb_policy,
        f"IAM5[Resource::<{_logical(stack.transform.function)}.Arn>:*]",
        "The KB service may invoke a version or alias of the function (documented requirement).",
    )
