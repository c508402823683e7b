"""The Knowledge Base's own ingestion logs (APPLICATION_LOGS: an event for each document's every status
change in an ingestion job), delivered by CloudWatch Logs vended-log delivery to a log group of the stack
(a month of logs, deleted with it), and a metric of the documents that failed.

Delivery: a source on the Knowledge Base's ARN, a destination on the log group, a delivery between them
(AWS's "Monitor knowledge bases using CloudWatch Logs"). Creating the delivery, CloudWatch Logs gives its
delivery service the right to write to the log group (a resource policy it writes itself, as the deploying
role may: ``logs:PutResourcePolicy``), and Bedrock must allow the delivery for the Knowledge Base (the
deploying role's ``bedrock:AllowVendedLogDeliveryForResource``: docs/OPERATIONS.md lists the whole set); the
group's name starts with ``/aws/vendedlogs/``, as AWS advises for such groups. In attach mode the three are
added to the user's Knowledge Base, and destroy removes those three and the group, nothing else of it; a
Knowledge Base that already has a delivery source for these logs keeps it (``ingestionLogSource``): the
stack adds a destination and a delivery from that source.
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, Stack, Token
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_logs as logs
from constructs import Construct

from contextual_kb.cdk import naming
from contextual_kb.cdk.function import NAMESPACE
from contextual_kb.cdk.logs import month_of_logs
from contextual_kb.query.ingestion_logs import DOCUMENT_EVENT, FINAL_FAILURE, LOG_TYPE

FAILED_DOCUMENTS = "IngestionDocumentsFailed"
# A document's final status FAILED: one event a failed document (the failing stage's own event comes first).
FAILED_PATTERN = logs.FilterPattern.all(
    logs.FilterPattern.string_value("$.event_type", "=", DOCUMENT_EVENT),
    logs.FilterPattern.string_value("$.event.status", "=", FINAL_FAILURE),
)


def delivery_source_name(stack_name: str, knowledge_base: str) -> str:
    """The delivery source the stack makes for the Knowledge Base (its name at synth, or its id when
    attached). Pure."""
    return naming.delivery_name(stack_name, f"-kb-{naming.short_hash(knowledge_base)}")


class IngestionLogs(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        knowledge_base_arn: str,
        knowledge_base: str,
        existing_source: str | None = None,
    ) -> None:
        """``knowledge_base``: what names the Knowledge Base at synth (its name, or its id when attached): the
        delivery source's name changes with it, so a replaced Knowledge Base gets a new source beside the
        old one, not a clash of names. A token there (an attribute known at deploy only) names the source by
        this construct's path instead: its placeholder string is numbered in the order tokens are made, and
        a name hashed from it changed whenever anything unrelated was added to the app (the source's
        ResourceArn is updated in place when the Knowledge Base is replaced: only its name is create-only).
        ``existing_source``: the delivery source the Knowledge Base already has for these logs (CloudWatch
        Logs allows one a resource and log type; the console makes one): no source is made, a delivery from
        that one is added (a source may have several), and destroy leaves it as it was."""
        super().__init__(scope, construct_id)
        stack_name = naming.stack_name_of(Stack.of(self))
        name = f"/aws/vendedlogs/bedrock/knowledge-bases/{stack_name}"
        self.log_group = month_of_logs(self, "Logs", name=name)
        self.log_group_name = name
        named_by = self.node.path if Token.is_unresolved(knowledge_base) else knowledge_base
        source_name = existing_source or delivery_source_name(stack_name, named_by)
        self.source_name = source_name
        self.source = (
            None
            if existing_source
            else logs.CfnDeliverySource(
                self,
                "Source",
                name=source_name,
                log_type=LOG_TYPE,
                resource_arn=knowledge_base_arn,
            )
        )
        # The log group's ARN without the ":*" that its GetAtt ends with.
        group_arn = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:{name}"
        self.destination = logs.CfnDeliveryDestination(
            self,
            "Destination",
            name=naming.delivery_name(stack_name, "-kb-logs"),
            destination_resource_arn=group_arn,
            output_format="json",
        )
        self.destination.node.add_dependency(self.log_group)
        self.delivery = logs.CfnDelivery(
            self,
            "Delivery",
            delivery_source_name=source_name,
            delivery_destination_arn=self.destination.attr_arn,
        )
        if self.source is not None:
            self.delivery.node.add_dependency(self.source)
        # Counted by the Knowledge Base's ARN, so that two stacks in one account count apart.
        logs.MetricFilter(
            self,
            "FailedDocuments",
            log_group=self.log_group,
            filter_pattern=FAILED_PATTERN,
            metric_namespace=NAMESPACE,
            metric_name=FAILED_DOCUMENTS,
            metric_value="1",
            dimensions={"KnowledgeBaseArn": "$.event.knowledge_base_arn"},
        )
        self.failed_documents = cw.Metric(
            namespace=NAMESPACE,
            metric_name=FAILED_DOCUMENTS,
            dimensions_map={"KnowledgeBaseArn": knowledge_base_arn},
            statistic="Sum",
            period=Duration.minutes(5),
        )
