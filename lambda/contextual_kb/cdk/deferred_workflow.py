"""The deferred loop as a serverless workflow (``-c autoContextualize=...``):
an AWS Step Functions state machine whose Lambda step runs ``ckb contextualize``'s own code
(``contextual_kb.deferred.workflow``): a look, and, when the look asks for them, two Distributed Maps that
run the same step on each shard of the run (plan, store: ``contextual_kb.deferred.shards``), started by
EventBridge Scheduler (looks for pending work, and a
check of the jobs under way, since Bedrock's job events are best effort) and by an EventBridge rule on
Bedrock's "Batch Inference Job State Change" events.

Self-contained: given the buckets, the batch role, the model and the Knowledge Base as props, it makes its
function (its own asset: runtime, query and deferred), the state machine, the schedules, the rule, its log
groups (a month, deleted with the stack), its alarms (a dead end, a run stuck past a job's 24 hours and a
margin, failed records, a run costing more than its floor) and a dashboard.

Least privilege: the step may pass only the batch role (to Bedrock only), create and read model invocation
jobs of the configured model only, invoke only that model (records too few for a job), read and write the
intermediate bucket's pending records, remembered contexts and batch folder, read the source bucket's
documents and write their metadata files (the re-ingestion's mark), and start and list the data source's
ingestion jobs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aws_cdk import (
    ArnFormat,
    Aws,
    CfnDeletionPolicy,
    CfnResource,
    Duration,
    Fn,
    Size,
    Stack,
)
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from contextual_kb.cdk import nag, naming
from contextual_kb.cdk.bundling import WORKFLOW_PARTS, function_code
from contextual_kb.cdk.config import map_concurrency_of
from contextual_kb.cdk.function import _PROFILE_PREFIXES, acknowledge_model_statements, model_statements
from contextual_kb.cdk.logs import month_of_logs
from contextual_kb.cdk.storage import BATCH_PREFIX, CONTEXTS_PREFIX, PENDING_PREFIX

PLAN, STORE = "plan", "store"  # the look's outcomes that ask for a Map (contextual_kb/deferred/shards.py)
# The runs' manifests of shards (Shards.manifest_key), all the state machine reads of the bucket.
MANIFESTS = f"{BATCH_PREFIX}*/plan/manifest.json"

HANDLER = "contextual_kb.deferred.workflow.lambda_handler"
PROFILE_GEOGRAPHIES = {prefix.rstrip(".") for prefix in _PROFILE_PREFIXES}
NAMESPACE = "ContextualKB"
# Where Step Functions' logs go (bp-cwl.html: the prefix keeps CloudWatch Logs' resource policy small).
VENDED_STATES = "/aws/vendedlogs/states/"
SERVICE = "contextual-kb-deferred"
# When to look for pending work (planned only when no ingestion job runs: the next look plans then).
# Knowledge Bases send no event when an ingestion job ends (aws-facts.md), so "after ingestion" is a look
# every hour: a run starts within the hour after an ingestion that left pending documents.
SCHEDULES = ("nightly", "after-ingestion", "both")
NIGHTLY = "cron(0 3 * * ? *)"  # 03:00 UTC
AFTER_INGESTION = "rate(1 hour)"
# Jobs under way are looked at this often even if no job-end event comes (they are best effort).
CHECK_JOBS = "rate(30 minutes)"
# A batch job may take up to 24 hours (timeoutDurationInHours); past this, a run is stuck.
STUCK_SECONDS = (24 + 6) * 3600
# The alarms' ids: each has its runbook entry in docs/OPERATIONS.md ("### Alarm: <id>").
ALARM_IDS = (
    "ContextualizeDeadEnd",
    "ContextualizeTimedOut",
    "ContextualizeRunStuck",
    "ContextualizeFailedRecords",
    "ContextualizeAboveFloor",
)
# The names of the batch jobs ckb contextualize submits ("ckb-<run>-<n>": contextual_kb/deferred) and the
# statuses a job ends in (GetModelInvocationJob's; the deferred package's ENDED, pinned by a test).
JOB_NAME_PREFIX = "ckb-"
JOB_ENDED = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
# Errors the Lambda service raises for a throttled or briefly failing invoke: retried with backoff.
LAMBDA_TRANSIENT = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]


def job_end_pattern() -> events.EventPattern:
    """Bedrock's "Batch Inference Job State Change" events (source ``aws.bedrock``) of a job ckb contextualize
    submitted (its name starts with ``JOB_NAME_PREFIX``) that ended (``JOB_ENDED``). The fields are the
    sample event's ("How EventBridge for Amazon Bedrock works"): ``detail.batchJobName``,
    ``detail.status``. The job's ARN (``detail.batchJobArn``, ``resources``) ends in an id Bedrock makes, so
    only the name can tell our jobs. The sample shows one status, ``Completed``; the others are
    GetModelInvocationJob's values, their casing in the event inferred, so they match ignoring case. A field
    named otherwise would never match: the CheckJobs schedule still finds the ended jobs
    (docs/DEFERRED.md)."""
    return events.EventPattern(
        source=["aws.bedrock"],
        detail_type=["Batch Inference Job State Change"],
        detail={
            "batchJobName": events.Match.prefix(JOB_NAME_PREFIX),
            "status": events.Match.any_of(*(events.Match.equals_ignore_case(s) for s in JOB_ENDED)),
        },
    )


def model_id_of(model_id: str) -> str:
    """The foundation model a model ID or inference profile ID names (its geography prefix left off)."""
    return model_id.split(".", 1)[-1] if model_id.split(".", 1)[0] in PROFILE_GEOGRAPHIES else model_id


def _ours(name: str, statistic: str = "Maximum") -> cw.Metric:
    return cw.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE},
        statistic=statistic,
        period=Duration.minutes(30),
    )


class DeferredWorkflow(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        schedule: str,
        intermediate: s3.IBucket,
        source: s3.IBucket,
        batch_role: iam.IRole,
        model_id: str,
        knowledge_base_id: str,
        data_source_id: str,
        topic: sns.ITopic,
        code: lambda_.Code | None = None,
        environment: dict[str, str] | None = None,
        map_concurrency: int | None = None,
        reserved_concurrency: int | None = None,
    ) -> None:
        """``schedule``: one of ``SCHEDULES``; ``environment``: the step's settings (batch limits, prices,
        GROUP_SIZE, ON_DEMAND_RETRY: contextual_kb/deferred/workflow.py reads them); ``map_concurrency``: the
        shards a Map runs at once (default ``MAP_CONCURRENCY``, or one below ``reserved_concurrency``, the
        step's reserved concurrency, when given)."""
        super().__init__(scope, construct_id)
        self.model_id = model_id
        if schedule not in SCHEDULES:
            raise ValueError(f"autoContextualize {schedule!r}: one of {', '.join(SCHEDULES)}")
        self.map_concurrency = map_concurrency_of(map_concurrency, reserved_concurrency)
        self.log_group = month_of_logs(self, "StepLogs")
        self.role = iam.Role(self, "StepRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn, f"{self.log_group.log_group_arn}:log-stream:*"],
            )
        )
        self.function = lambda_.Function(
            self,
            "Step",
            description="ckb contextualize's deferred loop, one look at a time (Step Functions' step)",
            runtime=lambda_.Runtime.PYTHON_3_13,
            architecture=lambda_.Architecture.ARM_64,
            handler=HANDLER,
            code=code or function_code("arm64", parts=WORKFLOW_PARTS),
            # Planning spools the records to /tmp, and a job's input is copied out of it: up to a job's
            # input size (Limits.max_file_bytes, 1 GB by default) twice.
            memory_size=2048,
            ephemeral_storage_size=Size.gibibytes(4),
            timeout=Duration.minutes(15),
            environment={
                "INTERMEDIATE_BUCKET": intermediate.bucket_name,
                "BATCH_ROLE_ARN": batch_role.role_arn,
                "KNOWLEDGE_BASE_ID": knowledge_base_id,
                "DATA_SOURCE_ID": data_source_id,
                **(environment or {}),
            },
            log_group=self.log_group,
            role=self.role,
            reserved_concurrent_executions=reserved_concurrency,
        )
        self._grant(intermediate, source, batch_role, model_id, knowledge_base_id)

        look = tasks.LambdaInvoke(
            self,
            "Look",
            lambda_function=self.function,
            payload=sfn.TaskInput.from_object(
                {
                    "mode": sfn.JsonPath.string_at("$.mode"),
                    "execution": sfn.JsonPath.string_at("$$.Execution.Name"),
                }
            ),
            payload_response_only=True,
            retry_on_service_exceptions=False,  # our own policy, below
            task_timeout=sfn.Timeout.duration(Duration.minutes(16)),
        )
        look.add_retry(errors=LAMBDA_TRANSIENT, interval=Duration.seconds(2), max_attempts=6, backoff_rate=2)
        # Timed out (the Lambda's 15 minutes): retried; the execution owns the claim, so the retry resumes
        # at once, and every phase is idempotent.
        look.add_retry(
            errors=["States.Timeout", "Sandbox.Timedout"], max_attempts=2, interval=Duration.seconds(30)
        )
        # Anything else (an S3 or Bedrock error after the SDK's retries): twice more, minutes apart.
        look.add_retry(errors=["States.ALL"], max_attempts=2, interval=Duration.minutes(2), backoff_rate=3)
        dead_end = sfn.Fail(
            self,
            "DeadEnd",
            error="ContextualizeFailed",
            cause="a look failed after its retries: the run stays resumable (ckb contextualize --status)",
        )
        look.add_catch(dead_end, errors=["States.ALL"], result_path="$.error")
        # A look that asks for its shards (outcome plan or store) is followed by a Distributed Map over them,
        # then by a look again: the run goes on in the same execution.
        resume = sfn.Pass(self, "Resume", parameters={"mode": "resume"})
        resume.next(look)
        fan_out = sfn.Choice(self, "FanOut")
        for outcome, action in ((PLAN, "plan-shard"), (STORE, "store-shard")):
            mapped = self._shards(outcome, action, intermediate)
            mapped.add_catch(dead_end, errors=["States.ALL"], result_path="$.error")
            fan_out.when(sfn.Condition.string_equals("$.outcome", outcome), mapped.next(resume))
        fan_out.otherwise(sfn.Succeed(self, "Looked"))
        self.workflow_logs = self._workflow_logs()
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(look.next(fan_out)),
            state_machine_type=sfn.StateMachineType.STANDARD,
            # A Map at 100 children (10 million documents: 5,000 shards, about a minute each) takes under an
            # hour; at the default 5, about 1,800 shards (3.6 million documents) fit. An execution that times
            # out leaves the run resumable: a next look goes on from the shards done (ContextualizeTimedOut).
            timeout=Duration.hours(6),
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.workflow_logs,
                level=sfn.LogLevel.ALL,
                include_execution_data=False,
            ),
        )

        # The Maps' item reader: the manifests, in the batch folder only.
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[intermediate.arn_for_objects(MANIFESTS)])
        )
        if intermediate.encryption_key is not None:
            intermediate.encryption_key.grant(self.state_machine, "kms:Decrypt")

        # When to look: for new pending work (mode start) and at the jobs under way (mode resume).
        # Confused deputy: Scheduler assumes the role only for schedules of this account (aws:SourceAccount,
        # Scheduler's cross-service-confused-deputy-prevention page). Its aws:SourceArn may only name a
        # schedule group, never a schedule, and ours are in the account's shared default group.
        target_role = iam.Role(
            self,
            "ScheduleRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}
            ),
        )
        expressions: list[tuple[str, str, str]] = [("CheckJobs", CHECK_JOBS, "resume")]
        if schedule in ("nightly", "both"):
            expressions.append(("Nightly", NIGHTLY, "start"))
        if schedule in ("after-ingestion", "both"):
            expressions.append(("AfterIngestion", AFTER_INGESTION, "start"))
        self.schedules = [
            scheduler.Schedule(
                self,
                name,
                schedule=scheduler.ScheduleExpression.expression(expression),
                target=scheduler_targets.StepFunctionsStartExecution(
                    self.state_machine,
                    role=target_role,
                    input=scheduler.ScheduleTargetInput.from_object({"mode": mode}),
                    retry_attempts=3,
                ),
                description=f"ckb contextualize workflow: {mode} look",
            )
            for name, expression, mode in expressions
        ]
        # A job of ours ended: look at once (best effort: the CheckJobs schedule also looks). Only its end: an
        # execution for every state change of every batch job in the account would compete with the Maps'
        # children for Lambda concurrency.
        self.job_end_rule = events.Rule(
            self,
            "JobEnded",
            description="A Bedrock batch inference job of ckb contextualize ended",
            event_pattern=job_end_pattern(),
            targets=[
                events_targets.SfnStateMachine(
                    self.state_machine, input=events.RuleTargetInput.from_object({"mode": "resume"})
                )
            ],
        )
        self._monitor(topic)

    def _workflow_logs(self) -> logs.LogGroup:
        """The state machine's log group, under ``/aws/vendedlogs/states/`` (Step Functions' logging best
        practices, bp-cwl.html): enabling logging adds the group to CloudWatch Logs' resource policy, capped
        at 5,120 characters, unless the name has that prefix; near the cap CreateStateMachine fails with
        InvalidLoggingConfiguration and the stack rolls back. Named by the stack and this construct (two
        workflows in one stack get two groups). A stack deployed before the prefix had a group named by
        CloudFormation: the new name replaces it, and the old group is kept (UpdateReplacePolicy Retain), its
        logs expiring under its month; ``docs/OPERATIONS.md`` says how to delete it."""
        stack = Stack.of(self)
        tag = re.sub(r"[^A-Za-z0-9_-]", "", self.node.id)[:64] or "Deferred"
        name = f"{VENDED_STATES}{stack.stack_name}-{tag}-{naming.short_hash(self.node.path)}"
        group = month_of_logs(self, "WorkflowLogs", name=name)
        resource = group.node.default_child
        assert isinstance(resource, CfnResource)
        resource.cfn_options.update_replace_policy = CfnDeletionPolicy.RETAIN
        return group

    def _shards(self, outcome: str, action: str, intermediate: s3.IBucket) -> sfn.DistributedMap:
        """The Distributed Map over a run's shards: the manifest the look wrote (``<run>/plan/manifest.json``,
        ``{"run", "shard"}`` items) read by Step Functions from S3, each shard a child execution invoking the
        step once (a shard is sized to one invocation: no ItemBatcher), its results written to S3 (thousands
        of children would pass the 256 KB payload limit) and left out of the state's output."""
        name = outcome.capitalize()
        child = tasks.LambdaInvoke(
            self,
            f"{name}Shard",
            lambda_function=self.function,  # its input (the item selector's) is the step's event
            payload_response_only=True,
            retry_on_service_exceptions=False,
            task_timeout=sfn.Timeout.duration(Duration.minutes(16)),
        )
        # The children share the account's Lambda concurrency: throttles can last. Only the first matching
        # retrier applies (States.ALL does not take over), so this one waits longer, with full jitter so
        # the children throttled together do not come back together.
        child.add_retry(
            errors=LAMBDA_TRANSIENT,
            interval=Duration.seconds(2),
            max_attempts=10,
            backoff_rate=2,
            max_delay=Duration.seconds(60),
            jitter_strategy=sfn.JitterType.FULL,
        )
        child.add_retry(
            errors=["States.Timeout", "Sandbox.Timedout"], max_attempts=2, interval=Duration.seconds(30)
        )
        child.add_retry(errors=["States.ALL"], max_attempts=2, interval=Duration.minutes(2), backoff_rate=3)
        mapped = sfn.DistributedMap(
            self,
            f"{name}Shards",
            # The bucket by path: CDK's grant for a bucket given is the whole bucket; the state machine is
            # granted the batch folder alone, below.
            item_reader=sfn.S3JsonItemReader(
                bucket_name_path=sfn.JsonPath.string_at("$.bucket"), key=sfn.JsonPath.string_at("$.manifest")
            ),
            item_selector={
                "action": action,
                "run": sfn.JsonPath.string_at("$$.Map.Item.Value.run"),
                "shard": sfn.JsonPath.number_at("$$.Map.Item.Value.shard"),
                # The owner of the run's claim the shard joins: the look's execution, in the look's result.
                "execution": sfn.JsonPath.string_at("$.execution"),
            },
            max_concurrency=self.map_concurrency,
            result_path=sfn.JsonPath.DISCARD,
            map_execution_type=sfn.StateMachineType.STANDARD,
        )
        # Each child's output is {}: thousands of them stay far inside the 256 KB a state's result may
        # weigh (each shard's figures are in its own S3 objects), so no ResultWriter (and no S3 write grant).
        mapped.item_processor(
            child.next(sfn.Pass(self, f"{name}ShardDone", result=sfn.Result.from_object({})))
        )
        return mapped

    def _grant(
        self, intermediate: s3.IBucket, source: s3.IBucket, batch_role: iam.IRole, model_id: str, kb_id: str
    ) -> None:
        role = self.role
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                resources=[
                    intermediate.arn_for_objects(f"{PENDING_PREFIX}*"),
                    intermediate.arn_for_objects(f"{BATCH_PREFIX}*"),
                    intermediate.arn_for_objects(f"{CONTEXTS_PREFIX}*"),
                ],
            )
        )
        # A missing key answers 404 (not 403) only with ListBucket: a claim or state not there is "none".
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[intermediate.bucket_arn])
        )
        # The re-ingestion: a document's source looked at (HeadObject is GetObject's permission) and its
        # metadata file marked, with its tags kept (query/reprocess.py).
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[source.arn_for_objects("*")])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:GetObjectTagging", "s3:PutObjectTagging"],
                resources=[source.arn_for_objects("*.metadata.json")],
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[source.bucket_arn]))
        for bucket in (intermediate, source):
            if bucket.encryption_key is not None:
                bucket.encryption_key.grant(role, "kms:Decrypt", "kms:GenerateDataKey")
        # Only the batch role, and only to Bedrock.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[batch_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}},
            )
        )
        model_resources = [r for s in model_statements(model_id) for r in s.resources]
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["bedrock:CreateModelInvocationJob"],
                resources=[
                    *model_resources,
                    f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:model-invocation-job/*",
                ],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["bedrock:GetModelInvocationJob"],
                resources=[
                    f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:model-invocation-job/*"
                ],
            )
        )
        for statement in model_statements(model_id):  # records too few for a job: asked on demand
            role.add_to_policy(statement)
        kb_arn = f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:knowledge-base/{kb_id}"
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "bedrock:StartIngestionJob",
                    "bedrock:ListIngestionJobs",
                    "bedrock:GetIngestionJob",
                    "bedrock:ListDataSources",
                ],
                resources=[kb_arn],
            )
        )

    def _monitor(self, topic: sns.ITopic) -> None:
        failed = self.state_machine.metric_failed(period=Duration.minutes(5), statistic="Sum")
        timed_out = self.state_machine.metric_timed_out(period=Duration.minutes(5), statistic="Sum")
        run_age = _ours("RunAgeSeconds")
        failed_records = _ours("FailedRecords", "Sum")
        cost, floor = _ours("CostUsd", "Sum"), _ours("FloorUsd", "Sum")
        # Written by the step (a plain metric: no metric math, which some CloudFormation engines refuse).
        above_floor = _ours("CostAboveFloorUsd", "Maximum")

        def alarm(alarm_id: str, metric: cw.IMetric, threshold: float, description: str) -> cw.Alarm:
            from contextual_kb.cdk.monitoring import runbook

            made = cw.Alarm(
                self,
                alarm_id,
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{description} Runbook: {runbook(alarm_id)}",
            )
            made.add_alarm_action(actions.SnsAction(topic))
            made.add_ok_action(actions.SnsAction(topic))
            return made

        self.alarms: Sequence[cw.Alarm] = [
            alarm("ContextualizeDeadEnd", failed, 1,
                  "A look of the deferred workflow failed after its retries (its dead end)."),
            alarm("ContextualizeTimedOut", timed_out, 1, "A look of the deferred workflow timed out."),
            alarm("ContextualizeRunStuck", run_age, STUCK_SECONDS,
                  "A ckb contextualize run has waited on its jobs past their 24 hours and a margin."),
            alarm("ContextualizeFailedRecords", failed_records, 1,
                  "A run ended with records that failed: their chunks stay pending."),
            alarm("ContextualizeAboveFloor", above_floor, 0.01,
                  "A run cost more than its floor (each document read once on demand): batch did not pay."),
        ]  # fmt: skip
        self.dashboard = cw.Dashboard(self, "Dashboard")
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Deferred workflow: executions",
                left=[
                    self.state_machine.metric_succeeded(period=Duration.minutes(30), statistic="Sum"),
                    failed,
                    timed_out,
                ],
                right=[run_age],
            ),
            cw.GraphWidget(
                title="Deferred runs",
                left=[_ours("ContextsStored", "Sum"), failed_records],
                right=[cost, floor],
            ),
            cw.AlarmStatusWidget(title="Deferred workflow alarms", alarms=list(self.alarms)),
        )

    def acknowledge(self, intermediate: s3.IBucket, source: s3.IBucket) -> None:
        """The cdk-nag (AwsSolutions) findings this construct answers for, each with its reason, named from
        the resources' own tokens (nag.ack_resources)."""
        nag.ack(
            self.function,
            "L1",
            "Python 3.13, like the transformation function: the step runs the same package, tested on it.",
        )
        for prefix, what in (
            (PENDING_PREFIX, "pending records, one a document, keyed by a hash: read, rewritten, deleted"),
            (BATCH_PREFIX, "the run's claim, state, job inputs and outputs, one folder a run"),
            (CONTEXTS_PREFIX, "remembered contexts, one a document, keyed by a hash: merged"),
        ):
            nag.ack_resources(
                self.role, f"The step's own prefix: {what}.", [intermediate.arn_for_objects(f"{prefix}*")]
            )
        nag.ack_resources(
            self.role,
            "Re-ingestion looks at each document that got contexts (HeadObject: deleted, changed, archived?) "
            "before marking it; documents are any object of the source bucket.",
            [source.arn_for_objects("*")],
        )
        nag.ack_resources(
            self.role,
            "Re-ingestion marks a document by its metadata file (ckb sync --reprocess's mechanism): metadata "
            "files only, their tags kept.",
            [source.arn_for_objects("*.metadata.json")],
        )
        nag.ack_resources(
            self.role,
            "Job ARNs are made by Bedrock at creation: the step creates and reads this account's jobs; which "
            "model they run is limited by the model resources of the same statement.",
            [f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:model-invocation-job/*"],
        )
        nag.ack_resources(
            self.role,
            "Lambda creates one log stream per execution environment in the function's own log group.",
            [f"{self.log_group.log_group_arn}:log-stream:*"],
        )
        acknowledge_model_statements(self.role, self.model_id)
        nag.ack(
            self.state_machine.role,
            "IAM5[Resource::*]",
            "Step Functions' log delivery (logs:CreateLogDelivery and the rest) and X-Ray's PutTraceSegments "
            "support no resource-level permissions: AWS requires *.",
        )
        # CDK's DistributedMapPolicy, a policy of its own beside the role's: its executions' ARNs as CDK
        # writes them (Stack.formatArn: literal in a stack with an explicit environment).
        executions = Stack.of(self).format_arn(
            service="states",
            resource="execution",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
            resource_name=Fn.select(6, Fn.split(":", self.state_machine.state_machine_arn)),
        )
        nag.ack_resources(
            self.state_machine,
            "A Distributed Map runs its children as executions of this state machine, named by Step "
            "Functions: describing and stopping them needs its own executions' ARNs (CDK's own grant).",
            [f"{executions}:*", f"{executions}/*:*"],
        )
        nag.ack_resources(
            self.state_machine.role,
            "The Distributed Maps read the run's manifest of shards (and nothing else of the bucket), "
            "written by the look under the run's folder, whose name is only known then.",
            [intermediate.arn_for_objects(MANIFESTS)],
        )
        nag.ack_resources(
            self.state_machine.role,
            "Step Functions' LambdaInvoke grant covers the function's versions (CDK's own grant).",
            [f"{self.function.function_arn}:*"],
        )
