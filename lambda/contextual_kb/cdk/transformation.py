"""Contextual retrieval as a construct for your own CDK app (docs/CONSTRUCTS.md).

``ContextualTransformation`` is the POST_CHUNKING transformation function (the same asset and settings as the
repository's stack: ``settings`` takes the ``-c`` context keys and validates them with the same model), its
role, an intermediate bucket (or yours), the alarm topic, the alarms and the dashboard. It joins your data
source in three CDK idioms:

- ``vector_ingestion_configuration(existing)``: the value for ``CfnDataSource``'s property, your chunking
  and parsing kept as given;
- ``mixin()``: a CDK Mixin for ``CfnDataSource.with_()``, which adds the transformation to what the data
  source already has;
- ``grant(knowledge_base)``: what the Knowledge Base's role needs (an ``iam.IRole``, or anything with a
  ``grant_principal``: the alpha ``KnowledgeBase``).

Only ``customTransformationConfiguration`` is ever set: CloudFormation updates it in place, while a change to
``chunkingConfiguration`` or ``parsingConfiguration`` replaces the data source (and re-ingests everything).
What cannot work fails at synth, one line each: a data source whose type takes no transformation, a
Knowledge Base that is not VECTOR, a data source that already runs another transformation.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from contextual_kb.cdk import nag
from contextual_kb.cdk.alarm_topic import AlarmTopic
from contextual_kb.cdk.bundling import function_code
from contextual_kb.cdk.config import ConfigError, StackConfig, check_setting_keys, load
from contextual_kb.cdk.function import ARCHITECTURE, HANDLER, TransformFunction
from contextual_kb.cdk.ingestion_logs import IngestionLogs
from contextual_kb.cdk.monitoring import Monitoring
from contextual_kb.cdk.storage import Storage

CUSTOM_TRANSFORMATION = "customTransformationConfiguration"
# Data source types whose ingestion takes no custom transformation (CloudFormation's DataSourceConfiguration:
# a CUSTOM source's documents are ingested directly; the managed connector and Redshift metadata sources are
# Bedrock's own pipelines).
NO_TRANSFORMATION = frozenset({"CUSTOM", "MANAGED_KNOWLEDGE_BASE_CONNECTOR", "REDSHIFT_METADATA"})


def settings_of(settings: StackConfig | Mapping[str, Any] | None) -> StackConfig:
    """A ``StackConfig`` as given, or one from context-style keys (``{"modelTokensPerMinute": 2000}``),
    validated exactly as ``-c`` values are (ConfigError, one line)."""
    if isinstance(settings, StackConfig):
        return settings
    check_setting_keys(settings or {})
    return load(dict(settings or {}))


class ContextualTransformation(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: StackConfig | Mapping[str, Any] | None = None,
        intermediate_bucket: s3.IBucket | None = None,
        code: lambda_.Code | None = None,
        monitoring: bool = True,
        chunking: dict[str, str] | None = None,
        vector_store: str | None = None,
        handler_file: str | Path | None = None,
    ) -> None:
        """``settings``: the stack's context keys (docs/SETTINGS.md), or a ``StackConfig``.
        ``intermediate_bucket``: yours (its key, if any, is granted); else one is made with its access-log
        bucket (``kmsKey``, ``intermediateExpirationDays``). ``monitoring``: alarms and dashboard now; the
        higher-level construct passes False and calls ``add_monitoring`` once its ingestion logs exist.
        ``chunking``, ``vector_store``: the function's settings when the config's are not the final word.
        ``handler_file``: your own handler module (docs/SDK.md: ``handler`` made with ``@transformation`` or
        ``Pipeline``), put beside ``contextual_kb`` in the asset; the function runs ``<module>.handler``."""
        super().__init__(scope, construct_id)
        self.config = config = settings_of(settings)
        if config.attach:
            raise ConfigError(
                "knowledgeBaseId: a ContextualTransformation joins your data source in your app (grant, "
                "mixin, vector_ingestion_configuration); attaching by ids is the repository's stack "
                "(docs/ATTACH.md)"
            )
        if (
            config.kms_key
            and intermediate_bucket is not None
            and not isinstance(intermediate_bucket.node.scope, Storage)
        ):
            raise ConfigError(
                "kmsKey with intermediate_bucket: your bucket keeps its own encryption (its key, if any, is "
                "granted); leave kmsKey out, or leave intermediate_bucket out for a bucket with a key of ours"
            )
        self.storage: Storage | None = None
        if intermediate_bucket is None:
            self.storage = Storage(
                self,
                "Storage",
                kms_key=config.kms_key,
                expiration_days=config.intermediate_expiration_days,
                source=False,
            )
            intermediate_bucket = self.storage.intermediate
        self.intermediate = intermediate_bucket
        self.key = intermediate_bucket.encryption_key
        handler = HANDLER
        if handler_file is not None:
            module = Path(handler_file)
            if module.suffix != ".py" or not module.is_file():
                raise ConfigError(f"handler_file {module}: not a Python module")
            code = code or function_code(ARCHITECTURE, ((module.name, module.read_bytes()),))
            handler = f"{module.stem}.handler"
        self.transform = TransformFunction(
            self,
            "Transform",
            config=config,
            intermediate=intermediate_bucket,
            code=code,
            chunking=chunking,
            vector_store=vector_store,
            handler=handler,
        )
        self.function = self.transform.function
        self.alarm_topic: AlarmTopic | None = None
        self.monitoring: Monitoring | None = None
        # The policies grant() made for roles it does not own (the data sources running the function depend
        # on them: ingestion needs them in place).
        self.grants: list[iam.Policy] = []
        if monitoring:
            self.add_monitoring()
        # Checked when the app is synthesized (an aspect: the data source may be joined after this line);
        # each problem an error annotation on its construct, which `cdk synth` prints as one line.
        cdk.Aspects.of(cdk.Stack.of(self)).add(_Checks(self))

    def add_monitoring(self, ingestion: IngestionLogs | None = None) -> Monitoring:
        """The alarm topic (``alarmEmail``, ``alarmTopicArn``), the alarms and the dashboard; with the
        Knowledge Base's ingestion logs, its failed documents too."""
        if self.monitoring is not None:
            raise ConfigError("the transformation's monitoring is already added")
        self.alarm_topic = AlarmTopic(self, "Alarms", config=self.config, key=self.key)
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            function=self.function,
            timeout_seconds=self.config.function_timeout_seconds,
            topic=self.alarm_topic.topic,
            shares_quota=self.config.shares_quota,
            ingestion=ingestion,
            namespace=self.transform.metrics_namespace,
            service=self.transform.service,
            model_id=self.config.model_id if self.config.calls_model else None,
            tokens_per_minute=self.config.model_tokens_per_minute,
        )
        return self.monitoring

    @property
    def custom_transformation_configuration(self) -> dict[str, Any]:
        """CloudFormation's ``CustomTransformationConfiguration``: our function at POST_CHUNKING."""
        return {
            "intermediateStorage": {"s3Location": {"uri": f"s3://{self.intermediate.bucket_name}/"}},
            "transformations": [
                {
                    "stepToApply": "POST_CHUNKING",
                    "transformationFunction": {
                        "transformationLambdaConfiguration": {"lambdaArn": self.function.function_arn}
                    },
                }
            ],
        }

    def vector_ingestion_configuration(self, existing: Any = None) -> dict[str, Any]:
        """The value for ``CfnDataSource(vector_ingestion_configuration=...)``: ``existing`` (a dict in
        CloudFormation's camelCase, or ``CfnDataSource.VectorIngestionConfigurationProperty``) kept as it
        is, chunking and parsing included, with our transformation added. ConfigError when it already has
        another transformation."""
        kept = _fields(existing)
        if kept.get(CUSTOM_TRANSFORMATION) is not None:
            raise ConfigError(
                "the data source already has a custom transformation (a data source runs one): remove it, "
                "or compose it with ours in one function (docs/SDK.md)"
            )
        return {**kept, CUSTOM_TRANSFORMATION: self.custom_transformation_configuration}

    def mixin(self) -> TransformationMixin:
        """For ``CfnDataSource(...).with_(transformation.mixin())``."""
        return TransformationMixin(self)

    def grant(self, knowledge_base: iam.IGrantable) -> None:
        """What the Knowledge Base's role needs to run the transformation: invoke the function (and its
        versions), read and write the intermediate bucket (and use its key). ``knowledge_base``: its role
        (``iam.IRole``), or the alpha ``KnowledgeBase`` (its ``grant_principal``).

        A role of this stack gets the statements in its own policy; any other role (imported, or of
        another stack) gets a policy of this construct's stack attached to it, so that a Knowledge Base
        stack and a stack of its data sources depend one way only. Either way the grant's cdk-nag
        findings are acknowledged where the statements are."""
        cfn = getattr(knowledge_base, "node", None) and knowledge_base.node.default_child  # type: ignore[attr-defined]
        if isinstance(cfn, bedrock.CfnKnowledgeBase):
            for problem in _knowledge_base_problems(cfn):
                cdk.Annotations.of(cfn).add_error(problem)
        principal = knowledge_base.grant_principal
        if isinstance(principal, iam.Role) and cdk.Stack.of(principal) is cdk.Stack.of(self):
            for statement in transformation_statements(
                self.function, self.intermediate, self.key, holder=principal
            ):
                principal.add_to_principal_policy(statement)
            return
        if not hasattr(principal, "attach_inline_policy"):  # a Knowledge Base runs as a role, nothing else
            raise ConfigError(
                "grant: the Knowledge Base's principal is not an IAM role (give its role: "
                "iam.Role.from_role_arn)"
            )
        policy = iam.Policy(self, f"KnowledgeBaseAccess{len(self.grants) or ''}")
        policy.add_statements(
            *transformation_statements(self.function, self.intermediate, self.key, holder=policy)
        )
        policy.attach_to_role(principal)  # type: ignore[arg-type]
        self.grants.append(policy)

    def _data_source_problems(self, source: bedrock.CfnDataSource) -> list[str]:
        resolve = cdk.Stack.of(source).resolve
        configuration = resolve(source.data_source_configuration) or {}
        kind = configuration.get("type") if isinstance(configuration, dict) else None
        problems = []
        if kind in NO_TRANSFORMATION:
            problems.append(f"a data source of type {kind} takes no custom transformation")
        knowledge_base_id = resolve(source.knowledge_base_id)
        for found in cdk.Stage.of(self).node.find_all():  # type: ignore[union-attr]
            if isinstance(found, bedrock.CfnKnowledgeBase) and (
                cdk.Stack.of(found) is cdk.Stack.of(source)
                and resolve(found.attr_knowledge_base_id) == knowledge_base_id
            ):
                problems += _knowledge_base_problems(found)
        return problems

    def _applied_to(self, source: bedrock.CfnDataSource) -> bool:
        """Whether the data source runs this function (through any of the three idioms)."""
        if cdk.Stack.of(source) is not cdk.Stack.of(self):
            return False
        resolve = cdk.Stack.of(source).resolve
        configuration = resolve(source.vector_ingestion_configuration) or {}
        ours = resolve(self.function.function_arn)
        custom = configuration.get(CUSTOM_TRANSFORMATION) if isinstance(configuration, dict) else None
        return any(
            step.get("transformationFunction", {})
            .get("transformationLambdaConfiguration", {})
            .get("lambdaArn")
            == ours
            for step in (custom or {}).get("transformations", [])
        )


def transformation_statements(
    function: lambda_.IFunction, intermediate: s3.IBucket, key: kms.IKey | None, *, holder: IConstruct
) -> list[iam.PolicyStatement]:
    """What a Knowledge Base's role needs for a custom transformation: the batch objects in the intermediate
    bucket (and its key), and invoking the function and its versions. Their wildcards are acknowledged on
    ``holder``, the role or policy that will carry them."""
    objects = intermediate.arn_for_objects("*")
    versions = f"{function.function_arn}:*"
    nag.ack_resources(
        holder,
        "The KB writes and reads its intermediate files (batch objects) under keys it chooses per job.",
        [objects],
    )
    nag.ack_resources(
        holder,
        "The KB service may invoke a version or alias of the function (documented requirement).",
        [versions],
    )
    statements = [
        iam.PolicyStatement(actions=["s3:ListBucket"], resources=[intermediate.bucket_arn]),
        iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], resources=[objects]),
        iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[function.function_arn, versions]),
    ]
    if key is not None:
        statements.append(
            iam.PolicyStatement(actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[key.key_arn])
        )
    return statements


@jsii.implements(cdk.IAspect)
class _Checks:
    """At synth: every data source of the stack that runs this transformation, whichever way it was joined."""

    def __init__(self, transformation: ContextualTransformation) -> None:
        self.transformation = transformation

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, bedrock.CfnDataSource) and self.transformation._applied_to(node):
            for problem in self.transformation._data_source_problems(node):
                cdk.Annotations.of(node).add_error(problem)
            for policy in self.transformation.grants:
                node.node.add_dependency(policy)


class TransformationMixin(cdk.Mixin):
    """Adds the transformation to a ``CfnDataSource``: ``customTransformationConfiguration`` only, whatever
    else the data source has kept as it is (its chunking and parsing: changing those replaces it)."""

    def __init__(self, transformation: ContextualTransformation) -> None:
        super().__init__()
        self.transformation = transformation

    def supports(self, construct: IConstruct) -> bool:
        return bedrock.CfnDataSource.is_cfn_data_source(construct)

    def apply_to(self, construct: IConstruct) -> None:
        assert isinstance(construct, bedrock.CfnDataSource)
        try:
            value = self.transformation.vector_ingestion_configuration(
                construct.vector_ingestion_configuration
            )
        except ConfigError as exc:  # reported at synth, with the data source's path
            cdk.Annotations.of(construct).add_error(str(exc))
            return
        construct.vector_ingestion_configuration = value


def _knowledge_base_problems(knowledge_base: bedrock.CfnKnowledgeBase) -> list[str]:
    configuration = cdk.Stack.of(knowledge_base).resolve(knowledge_base.knowledge_base_configuration) or {}
    kind = configuration.get("type") if isinstance(configuration, dict) else None
    if kind is not None and kind != "VECTOR":
        return [f"a {kind} Knowledge Base runs no custom transformation (VECTOR only)"]
    return []


_FIELDS = {
    "chunkingConfiguration": "chunking_configuration",
    "parsingConfiguration": "parsing_configuration",
    "contextEnrichmentConfiguration": "context_enrichment_configuration",
    CUSTOM_TRANSFORMATION: "custom_transformation_configuration",
}


def _fields(existing: Any) -> dict[str, Any]:
    """A vector ingestion configuration's fields, camelCase, values as given (never rewritten)."""
    if existing is None:
        return {}
    if isinstance(existing, Mapping):
        return dict(existing)
    if cdk.Token.is_unresolved(existing):
        raise ConfigError("the data source's vector ingestion configuration is a token: give it as a value")
    found = {camel: getattr(existing, snake, None) for camel, snake in _FIELDS.items()}
    return {camel: value for camel, value in found.items() if value is not None}
