"""Where the alarms go: an SNS topic of the stack (encrypted with the stack's key when there is one; TLS
only), ``alarmEmail`` subscribed to it, or the user's own topic (``alarmTopicArn``) instead."""

from __future__ import annotations

from aws_cdk import Annotations, Aws
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from contextual_kb.cdk import nag
from contextual_kb.cdk.config import StackConfig


class AlarmTopic(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: StackConfig, key: kms.IKey | None
    ) -> None:
        super().__init__(scope, construct_id)
        self.created: sns.Topic | None = None
        if config.alarm_topic_arn:
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "Topic", config.alarm_topic_arn)
            return
        # Without the stack's key, SSE with AWS's key for SNS would silence every alarm: its policy cannot let
        # CloudWatch use it. With the stack's key, CloudWatch is given what publishing needs of it. An
        # imported key's policy is not the app's to change: CloudWatch may not be able to use it, so the
        # topic does not use it either (and says so), rather than lose every alarm's notification silently.
        if key is not None and not isinstance(key, kms.Key):
            Annotations.of(self).add_warning_v2(
                "contextual-kb:alarm-topic-key",
                "the intermediate bucket's KMS key is imported: its key policy cannot be given to "
                "CloudWatch, so the alarm topic is not encrypted with it (SSE off); give alarmTopicArn to "
                "use a topic of yours",
            )
            key = None
        self.created = sns.Topic(self, "Topic", master_key=key, enforce_ssl=True)
        if key is None:
            nag.ack(
                self.created,
                "SNS2",
                "Without kmsKey the stack has no key of its own, and SNS's AWS-managed key (alias/aws/sns) "
                "would silence every alarm: its key policy cannot be changed to let CloudWatch publish. The "
                "topic carries alarm names and states, no document; kmsKey=true encrypts it with the stack's "
                "key.",
            )
        self.topic = self.created
        # The topic's policy replaces SNS's default one: CloudWatch is let publish, for this account's alarms
        # (AWS knowledge center, "cloudwatch-receive-sns-for-alarm-trigger").
        alarms = f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}"
        self.created.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowPublishAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.created.topic_arn],
                conditions={
                    "ArnLike": {"aws:SourceArn": f"{alarms}:alarm:*"},
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                },
            )
        )
        if isinstance(key, kms.Key):
            key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="CloudWatchAlarmsPublishToTheEncryptedTopic",
                    principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],  # in a key policy, "*" is this key
                )
            )
        if config.alarm_email:
            self.created.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
