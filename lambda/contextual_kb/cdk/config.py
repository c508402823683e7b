"""Settings of the stack, from CDK context (``cdk.json`` or ``-c name=value``), with documented defaults.

A combination that cannot work fails ``cdk synth`` with a message naming the context key, before anything
is deployed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

VectorStore = Literal["opensearch", "s3vectors"]
# none: the data source hands the function whole documents, which it chunks by their structure.
Chunking = Literal["fixed_size", "hierarchical", "semantic", "default", "none"]

# Titan Text Embeddings V2 output sizes.
TITAN_V2 = "amazon.titan-embed-text-v2:0"
TITAN_V2_DIMENSIONS = (256, 512, 1024)


# An address SNS can deliver to: a local part of RFC 5322's atom characters and dots, one @, a dotted domain
# (no display name, no list, no spaces; SNS confirms it by mail).
_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")
# A topic's ARN: partition, region, account, name (letters, digits, - and _, up to 256; .fifo for FIFO).
_TOPIC_ARN = re.compile(r"arn:aws[a-z-]*:sns:[a-z]{2}(-[a-z]+)+-\d:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?")


# Inference profiles' geographic prefixes (a model without one is called in the stack's region).
PROFILE_PREFIXES = ("global.", "us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.")
# What the function can call: an Anthropic Claude model on Bedrock, by its model id or a system inference
# profile's (its Messages API client and its IAM grant are built for these; an ARN or another vendor's model
# would fail every call at ingestion).
_CLAUDE_MODEL = re.compile(
    r"(" + "|".join(re.escape(p) for p in PROFILE_PREFIXES) + r")?anthropic\.claude-[a-z0-9.-]+(:\d+)?"
)


class ConfigError(ValueError):
    """A context value the stack cannot use."""


# Variables that would send documents elsewhere (endpoints, proxies) or log them (the SDK's debug log);
# compared in upper case, as Python's proxy lookup reads any case.
_REDIRECTING_VARIABLES = frozenset(
    {
        "ANTHROPIC_BEDROCK_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_LOG",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    }
)


class StackConfig(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    stack_name: str = Field(
        default="ContextualKb", alias="stackName", pattern=r"^[A-Za-z][A-Za-z0-9-]{0,127}$"
    )
    vector_store: VectorStore = Field(default="opensearch", alias="vectorStore")
    embedding_model_id: str = Field(default=TITAN_V2, alias="embeddingModelId")
    embedding_dimension: int = Field(default=1024, alias="embeddingDimension", ge=256, le=4096)
    chunking: Chunking = Field(default="fixed_size", alias="chunking")
    # fixed_size, and none (the function's CHUNK_MAX_TOKENS): the largest chunk in tokens.
    chunk_max_tokens: int = Field(default=300, alias="chunkMaxTokens", ge=20, le=8192)
    chunk_overlap_percentage: int = Field(default=20, alias="chunkOverlapPercentage", ge=1, le=99)
    # none (the function's CHUNK_OVERLAP_TOKENS): tokens each chunk repeats from the one before it.
    chunk_overlap_tokens: int = Field(default=0, alias="chunkOverlapTokens", ge=0, le=4096)
    parent_max_tokens: int = Field(default=1500, alias="parentMaxTokens", ge=20, le=8192)
    child_max_tokens: int = Field(default=300, alias="childMaxTokens", ge=20, le=8192)
    overlap_tokens: int = Field(default=60, alias="overlapTokens", ge=1, le=8192)
    semantic_max_tokens: int = Field(default=300, alias="semanticMaxTokens", ge=20, le=8192)
    semantic_buffer_size: int = Field(default=0, alias="semanticBufferSize", ge=0, le=1)
    semantic_breakpoint_percentile: int = Field(
        default=95, alias="semanticBreakpointPercentile", ge=50, le=99
    )
    # Days before the KB's intermediate files and our outputs expire; remembered contexts never do.
    intermediate_expiration_days: int = Field(default=30, alias="intermediateExpirationDays", ge=1)
    # A customer-managed KMS key for the buckets and the intermediate files (SSE-S3 otherwise).
    kms_key: bool = Field(default=False, alias="kmsKey")
    function_memory_mb: int = Field(default=1024, alias="functionMemoryMb", ge=256, le=10240)
    function_timeout_seconds: int = Field(default=900, alias="functionTimeoutSeconds", ge=60, le=900)
    # The function's CONTEXT_DEFER (docs/DEFERRED.md); unset: the function's default (fallbacks).
    context_defer: Literal["never", "fallbacks", "always"] | None = Field(default=None, alias="contextDefer")
    # The function's CONTEXT_MODE (docs/SETTINGS.md); unset: the function's default (per_chunk).
    context_mode: Literal["per_chunk", "grouped", "auto"] | None = Field(default=None, alias="contextMode")
    # Environment of the transformation function (docs/SETTINGS.md): every variable can be set here.
    function_environment: dict[str, str] = Field(default_factory=dict, alias="functionEnvironment")
    # The model quota every invocation shares (docs/OPERATIONS.md, "Many invocations, one quota"): what of
    # the account's quota for the model (Service Quotas) ingestion may use. Either set: a DynamoDB table keeps
    # the turns, and the function's MODEL_QUOTA_TABLE and MODEL_*_PER_MINUTE are set. Unset: each invocation
    # adapts to 429s alone.
    model_requests_per_minute: int | None = Field(default=None, alias="modelRequestsPerMinute", ge=1)
    model_tokens_per_minute: int | None = Field(default=None, alias="modelTokensPerMinute", ge=1)
    # Quota tokens one output token takes in that count (Bedrock's burndown rate); unset: the model table's.
    model_output_burndown: int | None = Field(default=None, alias="modelOutputBurndown", ge=1, le=15)
    # OpenSearch Serverless standby replicas in a second AZ (AWS's default); off halves the idle OCUs.
    opensearch_standby_replicas: bool = Field(default=True, alias="opensearchStandbyReplicas")
    # Where the alarms go (docs/OPERATIONS.md, "Alarms"): an address subscribed to the stack's topic, or the
    # user's own topic instead of one (same account and region as the stack).
    alarm_email: str | None = Field(default=None, alias="alarmEmail")
    alarm_topic_arn: str | None = Field(default=None, alias="alarmTopicArn")
    # The Knowledge Base's own ingestion logs (APPLICATION_LOGS), delivered to a log group of the stack; off
    # for a Knowledge Base whose logs are already delivered elsewhere.
    ingestion_logs: bool = Field(default=True, alias="ingestionLogs")
    # Attach mode: the delivery source the Knowledge Base already has for those logs (CloudWatch Logs allows
    # one a resource and log type: the console's makes one); the stack adds a delivery from it to its group.
    ingestion_log_source: str | None = Field(
        default=None, alias="ingestionLogSource", pattern=r"^[\w-]{1,60}$"
    )
    # The deferred loop as a serverless workflow (docs/DEFERRED.md, "In the cloud"): when to look for pending
    # work; unset: no workflow (ckb contextualize by hand).
    auto_contextualize: Literal["nightly", "after-ingestion", "both"] | None = Field(
        default=None, alias="autoContextualize"
    )
    # The workflow's shards at once in a Map (unset: 5, what a new account's reduced Lambda concurrency runs;
    # or one below workflowReservedConcurrency), and the step's reserved concurrency (unset: none).
    workflow_map_concurrency: int | None = Field(
        default=None, alias="workflowMapConcurrency", ge=1, le=10_000
    )
    workflow_reserved_concurrency: int | None = Field(default=None, alias="workflowReservedConcurrency", ge=2)

    # --- attach mode: contextual retrieval for a Knowledge Base the user already has (docs/ATTACH.md) ---
    knowledge_base_id: str | None = Field(default=None, alias="knowledgeBaseId", pattern=r"^[0-9a-zA-Z]{10}$")
    data_source_id: str | None = Field(default=None, alias="dataSourceId", pattern=r"^[0-9a-zA-Z]{10}$")
    # The KB's service role (synth is offline: it cannot be read), granted the function and the bucket.
    knowledge_base_role_arn: str | None = Field(
        default=None, alias="knowledgeBaseRoleArn", pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$"
    )
    # An intermediate bucket the user has (else the stack makes one), and its KMS key when it has one.
    intermediate_bucket_name: str | None = Field(
        default=None, alias="intermediateBucketName", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
    )
    intermediate_kms_key_arn: str | None = Field(
        default=None, alias="intermediateKmsKeyArn", pattern=r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/.+$"
    )
    # Replace a transformation the data source already runs (it is put back on destroy).
    replace_transformation: bool = Field(default=False, alias="replaceTransformation")
    # An Aurora (RDS) vector table with no custom metadata field has a column for each metadata attribute we
    # add (the deploy's refusal names them): the inspection refuses such a Knowledge Base until this is set.
    rds_metadata_columns: bool = Field(default=False, alias="rdsMetadataColumns")

    @field_validator("alarm_email")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.fullmatch(value):
            raise ValueError(f"{value!r} is not an email address (name@example.com)")
        return value

    @field_validator("alarm_topic_arn")
    @classmethod
    def _a_topic(cls, value: str | None) -> str | None:
        if value is not None and not _TOPIC_ARN.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an SNS topic's ARN (arn:aws:sns:us-east-1:123456789012:alarms)"
            )
        return value

    @property
    def attach(self) -> bool:
        """The stack attaches to an existing Knowledge Base instead of making one."""
        return self.knowledge_base_id is not None

    @model_validator(mode="after")
    def _combinations(self) -> StackConfig:
        self._attach_is_whole()
        if self.attach and self.auto_contextualize:
            raise ValueError(
                "autoContextualize in attach mode: not supported yet (the stack has no source bucket to "
                "grant the re-ingestion's marks on); run ckb contextualize, or deploy the full stack"
            )
        self._workflow_is_sized()
        if self.ingestion_log_source and not self.ingestion_logs:
            raise ValueError(
                "ingestionLogSource with ingestionLogs=false: the source's logs are delivered to the stack's "
                "log group only with ingestionLogs on"
            )
        if self.alarm_email and self.alarm_topic_arn:
            raise ValueError(
                "alarmEmail with alarmTopicArn: the alarms go to your topic; subscribe the address to it"
            )
        if self.embedding_model_id == TITAN_V2 and self.embedding_dimension not in TITAN_V2_DIMENSIONS:
            raise ValueError(
                f"embeddingDimension={self.embedding_dimension}: Titan Text Embeddings V2 gives "
                f"{', '.join(map(str, TITAN_V2_DIMENSIONS))}"
            )
        if self.chunking == "hierarchical" and self.child_max_tokens >= self.parent_max_tokens:
            raise ValueError(
                f"childMaxTokens={self.child_max_tokens} must be smaller than "
                f"parentMaxTokens={self.parent_max_tokens}"
            )
        self._chunking_is_one_choice()
        if self.context_defer and "CONTEXT_DEFER" in self.function_environment:
            raise ValueError("contextDefer and functionEnvironment.CONTEXT_DEFER: set one of them")
        if self.context_mode and "CONTEXT_MODE" in self.function_environment:
            raise ValueError("contextMode and functionEnvironment.CONTEXT_MODE: set one of them")
        quota = {
            "MODEL_QUOTA_TABLE",
            "MODEL_REQUESTS_PER_MINUTE",
            "MODEL_TOKENS_PER_MINUTE",
            "MODEL_OUTPUT_BURNDOWN",
        }
        if given := sorted(quota & set(self.function_environment)):
            raise ValueError(
                f"functionEnvironment.{given[0]}: the shared quota is set with modelRequestsPerMinute, "
                "modelTokensPerMinute and modelOutputBurndown (the stack makes its table)"
            )
        if self.model_output_burndown and not self.shares_quota:
            raise ValueError(
                "modelOutputBurndown counts only in a shared quota: set modelTokensPerMinute (and "
                "modelRequestsPerMinute) too, or leave it out"
            )
        redirecting = sorted(
            name
            for name in self.function_environment
            if name.upper() in _REDIRECTING_VARIABLES or name.upper().startswith("AWS_ENDPOINT_URL")
        )
        if redirecting:
            raise ValueError(
                f"functionEnvironment may not set {', '.join(redirecting)}: it would send documents to "
                "another endpoint or put them in the logs (docs/SECURITY.md)"
            )
        self._settings_are_the_functions()
        if not _CLAUDE_MODEL.fullmatch(self.model_id):
            raise ValueError(
                f"functionEnvironment.MODEL_ID={self.model_id}: the function calls Anthropic Claude models "
                "on Bedrock, by model or inference profile id "
                "(global.anthropic.claude-haiku-4-5-20251001-v1:0)"
            )
        if self.chunking == "hierarchical" and self.vector_store == "s3vectors":
            raise ValueError(
                "chunking=hierarchical with vectorStore=s3vectors: AWS does not recommend it "
                "(kb-chunking.html, S3 Vectors' metadata limits), and each chunk also carries its context in "
                "metadata; use fixed_size or semantic chunking, or vectorStore=opensearch"
            )
        if (
            self.function_environment.get("CONTEXT_STRATEGY", "claude") == "claude"
            and self.function_timeout_seconds < 300
        ):
            raise ValueError(
                "functionTimeoutSeconds below 300 leaves the claude strategy too little time per call of the "
                "Knowledge Base; use 900 (the default)"
            )
        return self

    def _attach_is_whole(self) -> None:
        """Attach mode needs the three ids; what only a new Knowledge Base has is refused there, and what only
        attach mode reads is refused without it."""
        trio = {"knowledgeBaseId": self.knowledge_base_id, "dataSourceId": self.data_source_id,
                "knowledgeBaseRoleArn": self.knowledge_base_role_arn}  # fmt: skip
        given = {name for name, value in trio.items() if value is not None}
        if given and given != set(trio):
            missing = ", ".join(sorted(set(trio) - given))
            raise ValueError(
                f"attaching to an existing Knowledge Base needs {missing} too (docs/ATTACH.md, Use your "
                "existing Knowledge Base)"
            )
        aliases = {name: field.alias for name, field in type(self).model_fields.items()}
        chosen = {aliases[name] for name in self.model_fields_set}
        if self.attach:
            new_only = sorted(chosen & _NEW_KNOWLEDGE_BASE_ONLY)
            if new_only:
                raise ValueError(
                    f"{new_only[0]}: the attached Knowledge Base keeps its own (it applies to a new one only)"
                )
            if self.intermediate_bucket_name and self.kms_key:
                raise ValueError(
                    "kmsKey with intermediateBucketName: give the bucket's key as intermediateKmsKeyArn"
                )
            if self.intermediate_kms_key_arn and not self.intermediate_bucket_name:
                raise ValueError(
                    "intermediateKmsKeyArn without intermediateBucketName: use kmsKey for a new bucket"
                )
        else:
            attach_only = sorted(chosen & _ATTACH_ONLY)
            if attach_only:
                raise ValueError(f"{attach_only[0]} applies only when attaching (with knowledgeBaseId)")

    def _workflow_is_sized(self) -> None:
        """The workflow's concurrency settings need the workflow, and a Map no wider than the step's reserved
        concurrency leaves (map_concurrency_of, below)."""
        sizes = [
            alias
            for alias, value in (
                ("workflowMapConcurrency", self.workflow_map_concurrency),
                ("workflowReservedConcurrency", self.workflow_reserved_concurrency),
            )
            if value is not None
        ]
        if not sizes:
            return
        if not self.auto_contextualize:
            raise ValueError(f"{sizes[0]} applies only with autoContextualize (the deferred workflow)")
        map_concurrency_of(self.workflow_map_concurrency, self.workflow_reserved_concurrency)

    def _chunking_is_one_choice(self) -> None:
        """``chunking=none`` sets the function's chunking (CHUNKING=structure and its sizes): the function
        environment may not say otherwise, or a whole document would be embedded as one chunk (or chunks
        chunked twice)."""
        if "VECTOR_STORE" in self.function_environment:
            raise ValueError(
                "functionEnvironment.VECTOR_STORE: the stack sets it from the Knowledge Base's vector store"
            )
        set_here = sorted(
            n
            for n in ("CHUNKING", "CHUNK_MAX_TOKENS", "CHUNK_OVERLAP_TOKENS")
            if n in self.function_environment
        )
        if self.attach and set_here:
            raise ValueError(
                f"functionEnvironment.{set_here[0]}: when attaching, the stack sets it from the data "
                "source's chunking; use chunkMaxTokens and chunkOverlapTokens for the sizes"
            )
        if self.chunking == "none" and set_here:
            raise ValueError(
                f"functionEnvironment.{set_here[0]}: with chunking=none the stack sets it; use "
                "chunkMaxTokens and chunkOverlapTokens for the sizes"
            )
        if self.chunking != "none" and self.function_environment.get("CHUNKING") == "structure":
            raise ValueError(
                f"functionEnvironment.CHUNKING=structure with chunking={self.chunking}: the function would "
                "chunk the Knowledge Base's chunks again; use chunking=none"
            )
        if (
            self.chunking == "none" or self.attach
        ) and self.chunk_overlap_tokens > self.chunk_max_tokens // 2:
            raise ValueError(
                f"chunkOverlapTokens={self.chunk_overlap_tokens} must be at most half of "
                f"chunkMaxTokens={self.chunk_max_tokens}"
            )

    @property
    def shares_quota(self) -> bool:
        return bool(self.quota_requests_per_minute or self.model_tokens_per_minute)

    @property
    def unlisted_rpm(self) -> str:
        """The warning for synth when modelRequestsPerMinute is given for a model AWS lists no RPM for: it is
        ignored, as the function ignores MODEL_REQUESTS_PER_MINUTE then (shared_quota.unlisted_rpm says
        why); "" otherwise."""
        from contextual_kb.runtime.context.claude.shared_quota import unlisted_rpm

        warning = unlisted_rpm(self.model_id, self.model_requests_per_minute or 0, "modelRequestsPerMinute")
        if warning and not self.model_tokens_per_minute:
            warning += "; without modelTokensPerMinute no quota is shared (no table is made)"
        return warning

    @property
    def quota_requests_per_minute(self) -> int:
        """modelRequestsPerMinute, or 0 where it is ignored (``unlisted_rpm``)."""
        return 0 if self.unlisted_rpm else self.model_requests_per_minute or 0

    @property
    def function_quota(self) -> dict[str, str]:
        """The quota's settings of the function (the table's name is added by the stack)."""
        return {
            "MODEL_REQUESTS_PER_MINUTE": str(self.quota_requests_per_minute),
            "MODEL_TOKENS_PER_MINUTE": str(self.model_tokens_per_minute or 0),
            **(
                {"MODEL_OUTPUT_BURNDOWN": str(self.model_output_burndown)}
                if self.model_output_burndown
                else {}
            ),
        }

    @property
    def function_defer(self) -> dict[str, str]:
        """CONTEXT_DEFER and CONTEXT_MODE when set as their own context keys."""
        return {
            **({"CONTEXT_DEFER": self.context_defer} if self.context_defer else {}),
            **({"CONTEXT_MODE": self.context_mode} if self.context_mode else {}),
        }

    @property
    def function_chunking(self) -> dict[str, str]:
        """The function's chunking settings that ``chunking`` implies (attach mode: the sizes, and CHUNKING
        from the data source at deploy time; ``structure`` here, to check the sizes)."""
        if self.chunking != "none" and not self.attach:
            return {}
        return {
            "CHUNKING": "structure",
            "CHUNK_MAX_TOKENS": str(self.chunk_max_tokens),
            "CHUNK_OVERLAP_TOKENS": str(self.chunk_overlap_tokens),
        }

    @property
    def context_metadata_key(self) -> str:
        """The chunk metadata key the function puts the context's copy under ("" when it puts none)."""
        environment = self.function_environment
        if environment.get("CONTEXT_METADATA_MAX_BYTES", "").strip() == "0":
            return ""
        return environment.get("CONTEXT_METADATA_KEY", "ckb_context")

    def _settings_are_the_functions(self) -> None:
        """``functionEnvironment`` read by the function's own settings model (one source of truth): a
        variable it does not know, or a value it refuses, fails synth naming the key, instead of deploying a
        function that fails every invocation."""
        import difflib

        from contextual_kb.runtime.settings import ConfigurationError, Settings

        known = {f.alias for f in Settings.model_fields.values() if f.alias}
        for name in self.function_environment:
            if name not in known and not name.startswith("POWERTOOLS_"):
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f" (did you mean {close[0]}?)" if close else " (docs/SETTINGS.md lists them)"
                raise ValueError(f"functionEnvironment.{name}: not a setting of the function{hint}")
        try:
            Settings.from_env({**self.function_environment, **self.function_chunking, **self.function_defer})
        except ConfigurationError as exc:
            raise ValueError(f"functionEnvironment: {exc}") from None

    @property
    def calls_model(self) -> bool:
        """The function calls the model (CONTEXT_STRATEGY claude, the default)."""
        return self.function_environment.get("CONTEXT_STRATEGY", "claude") == "claude"

    @property
    def model_id(self) -> str:
        from contextual_kb.runtime.settings import DEFAULT_MODEL_ID

        return self.function_environment.get("MODEL_ID", DEFAULT_MODEL_ID)


# Context keys of a new Knowledge Base only: an attached one has its own vector store, model and chunking.
_NEW_KNOWLEDGE_BASE_ONLY = frozenset(
    {
        "vectorStore",
        "embeddingModelId",
        "embeddingDimension",
        "chunking",
        "chunkOverlapPercentage",
        "parentMaxTokens",
        "childMaxTokens",
        "overlapTokens",
        "semanticMaxTokens",
        "semanticBufferSize",
        "semanticBreakpointPercentile",
        "opensearchStandbyReplicas",
    }
)
_ATTACH_ONLY = frozenset(
    {
        "intermediateBucketName",
        "intermediateKmsKeyArn",
        "replaceTransformation",
        "rdsMetadataColumns",
        "ingestionLogSource",
    }
)


ATTACH_STACK_NAME = "ContextualKbAttached"


def setting_names() -> list[str]:
    return sorted(f.alias for f in StackConfig.model_fields.values() if f.alias)


def check_context_keys(keys: Iterable[str]) -> None:
    """A context key that is neither a setting nor the CDK's own (``@aws-cdk/...`` flags, ``aws:cdk:...``
    from the CLI, cached lookups, which all hold ``:`` or start with ``@``) is a typo: ``-c
    vectorstore=s3vectors`` would deploy OpenSearch Serverless. Fails in one line, naming the closest
    setting."""
    names = setting_names()
    for key in sorted(keys):
        if key.startswith("@") or ":" in key or key in names:
            continue
        raise ConfigError(f"CDK context {key}: not a setting of this stack ({_closest(key, names)})")


def check_setting_keys(keys: Iterable[Any]) -> None:
    """A construct's ``settings=`` take the settings only (no CDK flag is one): a typo fails in one line,
    naming the closest, instead of deploying the default."""
    names = setting_names()
    for key in sorted(keys, key=repr):
        if key not in names:
            raise ConfigError(f"settings {key!r}: not a setting ({_closest(str(key), names)})")


def _closest(key: str, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6) or [
        n for n in names if n.lower() == key.lower().replace("_", "")
    ]
    return f"did you mean {close[0]}?" if close else "docs/SETTINGS.md lists them"


def load(context: dict[str, Any]) -> StackConfig:
    """The config from context values; JSON strings are accepted for structured values (``-c``)."""
    values: dict[str, Any] = {}
    names = {f.alias for f in StackConfig.model_fields.values() if f.alias}
    for name in names:
        if name in context and context[name] is not None:
            value = context[name]
            if isinstance(value, str) and name in {"functionEnvironment"}:
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise ConfigError(f"CDK context {name}: not JSON ({exc})") from None
            values[name] = value
    if values.get("knowledgeBaseId") and "stackName" not in values:
        # Its own default name: a deploy in attach mode must never update a full stack into an attach one
        # (that would delete the Knowledge Base the full stack made).
        values["stackName"] = ATTACH_STACK_NAME
    try:
        return StackConfig.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        where = ".".join(str(p) for p in first.get("loc", ()))
        # A rule between keys names them in its message; a key's own error is prefixed with it.
        raise ConfigError(f"CDK context {where}: {message}" if where else f"CDK context: {message}") from None


# Shards run at once in a Distributed Map by default: each is one invocation of the step (16 S3 connections).
# Lambda's quotas page: 1,000 concurrent executions a Region by default, but "new AWS accounts have reduced
# concurrency and memory quotas" (no figure given; 10 is what users of new accounts report), shared with the
# transformation function and every other function. Five children leave room for them in such an account;
# more throttle, each child retries ~10 times over minutes, and the Map fails (ContextualizeDeadEnd).
# Raise it where the account has the concurrency (workflowMapConcurrency; docs/SETTINGS.md).
MAP_CONCURRENCY = 5
# Step Functions' Distributed Map runs at most this many child executions at once.
MAP_CONCURRENCY_MAX = 10_000


def map_concurrency_of(configured: int | None, reserved: int | None) -> int:
    """The Distributed Maps' MaxConcurrency: ``configured``, or by default ``MAP_CONCURRENCY``; with the
    step's reserved concurrency ``reserved`` (its own pool, which its looks share with the Maps' children),
    one below it by default, and a ``configured`` value above that refused in one line. Pure."""
    if reserved is not None and reserved < 2:
        raise ValueError(
            f"workflowReservedConcurrency={reserved}: at least 2 (a Map's child and a look at once)"
        )
    if configured is not None and not 1 <= configured <= MAP_CONCURRENCY_MAX:
        raise ValueError(f"workflowMapConcurrency={configured}: 1 to {MAP_CONCURRENCY_MAX:,}")
    if reserved is None:
        return configured or MAP_CONCURRENCY
    if configured is None:
        return reserved - 1
    if configured > reserved - 1:
        raise ValueError(
            f"workflowMapConcurrency={configured} with workflowReservedConcurrency={reserved}: the children "
            f"would throttle on the step's own reserved concurrency; use at most {reserved - 1} (one left "
            "for a look), or reserve more"
        )
    return configured
