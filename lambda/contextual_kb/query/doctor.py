"""``ckb doctor``: a preflight of a deployed stack, run with the user's own credentials after ``make deploy``
and before the first sync. Each check is one line: passed, failed (with what to do), or a warning.

What it checks: the stack and its outputs; that the data source runs our function as its POST_CHUNKING
transformation; the function's settings (valid, and time enough for the claude strategy); that the
transformation model answers a 1-token call (AccessDenied explained: Anthropic's use-case form, the
Marketplace permissions, SCPs that block ``global.`` profiles); the embedding model and the reranker; the
account's Bedrock quotas for the model against the function's ``MAX_CONCURRENCY``; the intermediate bucket's
lifecycle and the remembered contexts' prefix; that someone hears the alarms (a confirmed subscription to
their topic); which delivery source carries the Knowledge Base's ingestion logs (the stack's, the
Knowledge Base's own, or none); the deferred workflow's Map width against the account's Lambda concurrency;
and, from the stack's latest batch job, the two assumptions of the deferred path (docs/DEFERRED.md).
Attach mode also: the Knowledge Base's own role (IAM's policy simulator), and the deploy's one line on the
data source's KMS key (the stack output DataSourceKeyCheck).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from contextual_kb.query.deployment import Deployment
from contextual_kb.query.retrieval import DEFAULT_RERANKER, RERANKERS
from contextual_kb.runtime.context.claude.pricing import (
    DAILY_TOKENS_DEFAULT,
    ProfileScope,
    default_tpm,
    known_model,
    listed_rpm,
    max_output_tokens,
    model_facts,
    model_label,
    output_burndown,
    profile_scope,
    unknown_model_defaults,
)
from contextual_kb.runtime.context.claude.prompts import BEDROCK_ANTHROPIC_VERSION
from contextual_kb.runtime.context.claude.shared_quota import unlisted_rpm
from contextual_kb.runtime.settings import ConfigurationError, Settings

Status = Literal["ok", "fail", "warn"]
METRICS_NAMESPACE = "ContextualKB"  # the function's (POWERTOOLS_METRICS_NAMESPACE, cdk/function.py)
METRICS_SERVICE = "contextual-kb"
# What a busy sync asks of the model at MAX_CONCURRENCY calls in flight: about 2 s a call, 3,000 tokens a call
# (a chunk, an uncached document or a share of one, a context): rough, and said so.
SECONDS_PER_CALL = 2.0
TOKENS_PER_CALL = 3000
MODEL_ACCESS_TODO = (
    "The first use of a model needs the caller (and the function's role) allowed aws-marketplace:Subscribe "
    "and aws-marketplace:ViewSubscriptions"
)
ACCESS_TODO = (
    "The first use of an Anthropic model needs Anthropic's use-case form, submitted once per account "
    "(Bedrock console, Model catalog), and the caller (and the function's role) allowed "
    "aws-marketplace:Subscribe and aws-marketplace:ViewSubscriptions; a global. profile also needs SCPs "
    "that allow aws:RequestedRegion = unspecified"
)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    todo: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


Clients = Callable[[str], Any]  # service name -> a boto3 client in the stack's region


def run(deployment: Deployment, clients: Clients) -> Iterator[Check]:
    """Every check, in order; each catches its own AWS errors (one failing check does not hide the rest)."""
    yield Check(
        "stack",
        "ok",
        f"{deployment.stack} in {deployment.region}: Knowledge Base {deployment.knowledge_base_id}",
    )
    clients = functools.cache(clients)  # one client per service
    # Read once for the two checks that need it (a failed read is not kept: the second check tries again).
    data_source: Callable[[], dict[str, Any]] = functools.cache(
        lambda: clients("bedrock-agent").get_data_source(
            knowledgeBaseId=deployment.knowledge_base_id, dataSourceId=deployment.data_source_id
        )["dataSource"]
    )
    environment: dict[str, str] = {}
    yield _guarded(_transformation, deployment, clients, data_source)
    read: list[bool] = []  # the function's configuration came back
    function = _guarded(_function, deployment, clients, environment, read)
    yield function
    # The checks below judge the function's settings: unread (no permission, no output naming the function)
    # or invalid, they are not judged on defaults the function may not run with.
    unread = _unread(function, environment, bool(read))
    settings = None if unread else _settings(environment)
    if deployment.attached:  # a Knowledge Base the user had: its own role must have been given ours
        yield _guarded(_knowledge_base_role, deployment, clients, environment, settings, unread)
        yield _data_source_key(deployment)
    yield _guarded(_chunking, deployment, clients, data_source, settings, unread)
    for check in (_model, _embedding, _reranker):
        yield _guarded(check, deployment, clients, environment, settings, unread)
    yield from _quotas(deployment, clients, environment, settings, unread)  # reads fall back, said so
    yield _guarded(_lifecycle, deployment, clients, environment, settings, unread)
    if deployment.alarm_topic_arn:  # stacks from before alarms had a topic have none to check
        yield _guarded(_alarms, deployment, clients)
    if deployment.ingestion_log_group or deployment.ingestion_logs_check:
        yield _guarded(_ingestion_logs, deployment, clients)
    if deployment.state_machine_arn:
        yield _guarded(_workflow_concurrency, deployment, clients)
    if deployment.batch_role_arn and deployment.state_machine_arn:
        yield _guarded(_batch_jobs, deployment, clients)


def _unread(function: Check, environment: dict[str, str], read: bool) -> str:
    """Why the function's settings are not known, or "" when they were read and are valid."""
    if not read:  # the failure's API and code (its message is on the function settings line)
        return f"the function's settings were not read ({': '.join(function.detail.split(': ')[:2])})"
    if _settings(environment) is None:
        return "the function's settings are invalid (function settings, above)"
    return ""


def _not_checked(name: str, unread: str) -> Check:
    return Check(name, "warn", f"not checked: {unread}", "fix the function settings check first")


# A failed check is named as its passing line is (a denied GetFunctionConfiguration was "function").
_NAMES = {
    "_function": "function settings",
    "_embedding": "embedding model",
    "_lifecycle": "intermediate bucket",
}


def _guarded(check: Callable[..., Check], deployment: Deployment, clients: Clients, *args: Any) -> Check:
    name = _NAMES.get(check.__name__, check.__name__.strip("_").replace("_", " "))
    try:
        return check(deployment, clients, *args)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "Unknown")
        todo = "check the caller's IAM permissions" if "AccessDenied" in code else ""
        return Check(name, "fail", f"{exc.operation_name}: {code}: {error.get('Message', '')}".strip(), todo)
    except BotoCoreError as exc:
        return Check(name, "fail", str(exc))


def _settings(environment: dict[str, str]) -> Settings | None:
    try:
        return Settings.from_env(environment)
    except ConfigurationError:
        return None


def _transformation(
    deployment: Deployment, clients: Clients, data_source: Callable[[], dict[str, Any]]
) -> Check:
    source = data_source()
    custom = (source.get("vectorIngestionConfiguration") or {}).get("customTransformationConfiguration") or {}
    steps = custom.get("transformations") or []
    arns = [
        s.get("transformationFunction", {}).get("transformationLambdaConfiguration", {}).get("lambdaArn", "")
        for s in steps
        if s.get("stepToApply") == "POST_CHUNKING"
    ]
    if not arns:
        return Check(
            "transformation",
            "fail",
            f"data source {deployment.data_source_id} runs no POST_CHUNKING transformation",
            "deploy the stack again (make deploy): it sets the function on the data source",
        )
    expected = deployment.function_arn or deployment.function_name
    if expected and not any(arn == expected or arn.split(":")[-1] == expected for arn in arns):
        return Check(
            "transformation",
            "fail",
            f"the data source runs {arns[0]}, not this stack's function {expected}",
            "deploy the stack again, or set replaceTransformation if another transformation is meant to go",
        )
    return Check(
        "transformation", "ok", f"data source {deployment.data_source_id} runs {arns[0].split(':')[-1]}"
    )


# What the Knowledge Base's role must be allowed for the transformation, as IAM's simulator judges it.
_KB_ROLE_NEEDS = (
    ("lambda:InvokeFunction", "function"),
    ("s3:PutObject", "object"),
    ("s3:GetObject", "object"),
    ("s3:ListBucket", "bucket"),
)


def _knowledge_base_role(
    deployment: Deployment,
    clients: Clients,
    environment: dict[str, str],
    settings: Settings | None,
    unread: str,
) -> Check:
    """Attach mode: the existing Knowledge Base's role may invoke the function and use the intermediate
    bucket (IAM's policy simulator, on the role's policies as they are now)."""
    role = deployment.knowledge_base_role_arn
    if not role or not deployment.function_arn or not deployment.intermediate_bucket:
        return Check("knowledge base role", "warn", "the stack's outputs do not name the role: not checked")
    partition = role.split(":")[1]
    resources = {
        "function": deployment.function_arn,
        "object": f"arn:{partition}:s3:::{deployment.intermediate_bucket}/aws/bedrock/knowledge_bases/probe",
        "bucket": f"arn:{partition}:s3:::{deployment.intermediate_bucket}",
    }
    iam = clients("iam")
    denied = []
    for action, kind in _KB_ROLE_NEEDS:
        results = iam.simulate_principal_policy(
            PolicySourceArn=role, ActionNames=[action], ResourceArns=[resources[kind]]
        )["EvaluationResults"]
        if not results or results[0].get("EvalDecision") != "allowed":
            denied.append(f"{action} on {resources[kind]}")
    if denied:
        return Check(
            "knowledge base role",
            "fail",
            f"{role} may not {'; '.join(denied)}",
            f"deploy the stack again: its policy {deployment.knowledge_base_policy} grants them"
            if deployment.knowledge_base_policy
            else "deploy the stack again: its policy grants them",
        )
    return Check(
        "knowledge base role", "ok", f"{role.rsplit('/', 1)[-1]} may invoke the function and use the bucket"
    )


def _data_source_key(deployment: Deployment) -> Check:
    """Attach mode: what the deploy's inspection found in the data source's key policy (its one line). That
    the Knowledge Base encrypts the intermediate files with the data source's key is inferred, not
    documented: a gap is a warning, with what to add."""
    line = deployment.data_source_key_check
    if not line:
        return Check(
            "data source key", "warn", "not checked: the stack predates the check", "deploy the stack again"
        )
    status, _, detail = line.partition(": ")
    if status in {"ok", "none"}:
        return Check("data source key", "ok", detail)
    if status == "add":  # "<what is missing>; <what to add>"
        missing, _, todo = detail.partition("; ")
        return Check("data source key", "warn", missing, todo)
    return Check("data source key", "warn", detail)


def _chunking(
    deployment: Deployment,
    clients: Clients,
    data_source: Callable[[], dict[str, Any]],
    settings: Settings | None,
    unread: str,
) -> Check:
    """The data source's chunking and the function's agree: with NONE the function must chunk (else each
    document is embedded whole, one chunk); with the KB's own chunking it must not chunk again."""
    source = data_source()
    ingestion = source.get("vectorIngestionConfiguration") or {}
    strategy = (ingestion.get("chunkingConfiguration") or {}).get("chunkingStrategy", "DEFAULT (FIXED_SIZE)")
    if settings is None:
        return Check(
            "chunking",
            "warn",
            f"data source chunking {strategy}; whether the function agrees is not checked: {unread}",
            "fix the function settings check first",
        )
    if strategy == "NONE" and settings.chunking != "structure":
        return Check(
            "chunking",
            "fail",
            "the data source's chunking is NONE but the function keeps the chunks it is given (CHUNKING=kb): "
            "each document is embedded whole, as one chunk",
            "deploy with -c chunking=none (it sets CHUNKING=structure), or set CHUNKING=structure",
        )
    if strategy != "NONE" and settings.chunking == "structure":
        return Check(
            "chunking",
            "warn",
            f"the data source chunks ({strategy}) and the function chunks those chunks again "
            "(CHUNKING=structure)",
            "use -c chunking=none to let the function chunk whole documents",
        )
    if settings.chunking == "structure":
        return Check(
            "chunking",
            "ok",
            f"whole documents, chunked by the function by structure (at most {settings.chunk_max_tokens} "
            f"tokens, {settings.chunk_overlap_tokens} overlap)",
        )
    return Check("chunking", "ok", f"the data source chunks ({strategy}); the function keeps its chunks")


def _function(
    deployment: Deployment, clients: Clients, environment: dict[str, str], read: list[bool]
) -> Check:
    if not deployment.function_name:
        return Check(
            "function settings", "warn", "the stack has no TransformFunctionName output: not checked"
        )
    configuration = clients("lambda").get_function_configuration(FunctionName=deployment.function_name)
    read.append(True)
    environment.update((configuration.get("Environment") or {}).get("Variables") or {})
    try:
        settings = Settings.from_env(environment)
    except ConfigurationError as exc:
        return Check("function settings", "fail", str(exc), "fix functionEnvironment in cdk.json and deploy")
    timeout = int(configuration.get("Timeout", 0))
    if settings.context_strategy == "claude" and timeout < 300:
        return Check(
            "function settings",
            "fail",
            f"timeout {timeout} s: the claude strategy needs at least 300 s per call of the Knowledge Base",
            "set functionTimeoutSeconds to 900 (the default) and deploy",
        )
    return Check(
        "function settings",
        "ok",
        f"strategy {settings.context_strategy}, model {settings.model_id}, timeout {timeout} s, "
        f"MAX_CONCURRENCY {settings.max_concurrency}",
    )


def _model(
    deployment: Deployment,
    clients: Clients,
    environment: dict[str, str],
    settings: Settings | None,
    unread: str,
) -> Check:
    if settings is None:  # which model the function calls is not known: calling the default proves nothing
        return _not_checked("model", unread)
    if settings.context_strategy != "claude":
        return Check("model", "ok", "no model: the strategy is not claude")
    body = {
        "anthropic_version": BEDROCK_ANTHROPIC_VERSION,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say OK."}]}],
    }
    try:
        clients("bedrock-runtime").invoke_model(modelId=settings.model_id, body=json.dumps(body))
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        if code == "AccessDeniedException":
            return Check(
                "model", "fail", f"{settings.model_id}: AccessDenied: {message}".strip(), ACCESS_TODO
            )
        if code in {"ValidationException", "ResourceNotFoundException"}:
            return Check(
                "model",
                "fail",
                f"{settings.model_id}: {code}: {message}".strip(),
                f"check MODEL_ID: is {settings.model_id} offered in {deployment.region} (or its profile's)?",
            )
        raise
    if not known_model(settings.model_id):
        return Check(
            "model",
            "warn",
            f"{settings.model_id} answers (a 1-token call), but it is not in the model table: "
            + unknown_model_defaults(settings.model_prices, settings.min_cache_tokens),
            "set MODEL_PRICES (its prices, every field) and MIN_CACHE_TOKENS (its cache minimum) in "
            "functionEnvironment, or use a model from the table (docs/SETTINGS.md, Models and prices)",
        )
    return Check("model", "ok", f"{settings.model_id} answers (a 1-token call)")


def _availability(clients: Clients, model_id: str) -> str:
    """Why ``model_id`` cannot be used here, or "" (GetFoundationModelAvailability)."""
    found = clients("bedrock").get_foundation_model_availability(modelId=model_id)
    problems = []
    if found.get("regionAvailability") != "AVAILABLE":
        problems.append("not offered in this region")
    if found.get("authorizationStatus") != "AUTHORIZED":
        problems.append("not authorized for this account")
    if found.get("entitlementAvailability") != "AVAILABLE":
        problems.append("no entitlement (the Marketplace subscription)")
    agreement = found.get("agreementAvailability") or {}
    if agreement.get("status") not in {None, "AVAILABLE"}:
        problems.append(f"agreement {agreement.get('status')} {agreement.get('errorMessage', '')}".strip())
    return "; ".join(problems)


def _embedding(deployment: Deployment, clients: Clients, *_: Any) -> Check:
    kb = clients("bedrock-agent").get_knowledge_base(knowledgeBaseId=deployment.knowledge_base_id)[
        "knowledgeBase"
    ]
    arn = kb["knowledgeBaseConfiguration"]["vectorKnowledgeBaseConfiguration"]["embeddingModelArn"]
    model_id = arn.split("/")[-1]
    problem = _availability(clients, model_id)
    if problem:
        return Check(
            "embedding model",
            "fail",
            f"{model_id}: {problem}",
            f"the Knowledge Base cannot embed chunks. {MODEL_ACCESS_TODO}",
        )
    return Check("embedding model", "ok", f"{model_id} is available")


def _reranker(deployment: Deployment, clients: Clients, *_: Any) -> Check:
    regions = RERANKERS[DEFAULT_RERANKER]
    if deployment.region not in regions:
        return Check(
            "reranker",
            "warn",
            f"{DEFAULT_RERANKER} is not offered in {deployment.region} (it is in {', '.join(regions)})",
            "query with --no-rerank here, or --reranker amazon.rerank-v1:0 where it is offered",
        )
    problem = _availability(clients, DEFAULT_RERANKER)
    if problem:
        return Check(
            "reranker",
            "fail",
            f"{DEFAULT_RERANKER}: {problem}",
            "subscribe to Cohere Rerank 3.5 (AWS Marketplace, through the Bedrock console), or query with "
            "--no-rerank",
        )
    return Check("reranker", "ok", f"{DEFAULT_RERANKER} is available")


# How Service Quotas names a model's on-demand quotas at each profile scope (General Reference, Amazon
# Bedrock quotas; its tables and older pages say "InvokeModel" where Service Quotas says "model inference":
# both are read). https://docs.aws.amazon.com/general/latest/gr/bedrock.html
QUOTA_PREFIXES: dict[ProfileScope, str] = {
    "in-region": "On-demand model inference",
    "geo": "Cross-region model inference",
    "global": "Global cross-region model inference",
}
# Per account and Region, across every model, charged what a call settles (quotas-runtime.html, 2026).
DAILY_QUOTA = "Cross-Model Max Tokens Per Day"
QUOTA_PAGES = 50  # ListServiceQuotas pages read at most (Bedrock lists some hundreds of quotas)
READ_TODO = "allow the caller servicequotas:ListServiceQuotas to read the account's values"
_VERSION_SUFFIX = re.compile(r" v\d+$")  # "Anthropic Claude Sonnet 4.5 V1" is Sonnet 4.5's row


def quota_family(model_id: str) -> str:
    """The Service Quotas family a model id draws on: global cross-region, cross-region or on-demand."""
    return QUOTA_PREFIXES[profile_scope(model_id)].lower()


def quota_need(concurrency: int) -> tuple[int, int]:
    """(requests, tokens) per minute a sync asks at ``concurrency`` calls in flight. Pure."""
    requests = int(concurrency * 60 / SECONDS_PER_CALL)
    return requests, requests * TOKENS_PER_CALL


@dataclass(frozen=True)
class Quota:
    """One of the model's quotas: its Service Quotas name, the value that applies (None: none listed), and
    why the account's own value was not read ("" when it was)."""

    name: str
    value: float | None
    unread: str = ""

    def said(self, unit: str) -> str:
        if self.value is None:
            how = f"; not read: {self.unread}" if self.unread else ""
            return f"{self.name}: none listed{how}"
        how = f"default, not read: {self.unread}" if self.unread else "applied"
        return f"{self.name}: {self.value:,.0f} {unit} ({how})"


@dataclass(frozen=True)
class ModelQuotas:
    scope: ProfileScope
    tokens: Quota  # tokens per minute at the scope
    requests: Quota  # requests per minute at the scope (none listed for many models since May 2026)
    daily: Quota  # the cross-model tokens per day
    model_daily: float | None = None  # an older per-model daily quota, when the account still lists one


def _normal(name: str) -> str:
    words = " ".join(name.lower().replace("invokemodel", "model inference").split())
    return _VERSION_SUFFIX.sub("", words)


def _listed(listing: list[dict[str, Any]], name: str) -> float | None:
    want = _normal(name)
    for quota in listing:
        if _normal(str(quota.get("QuotaName", ""))) == want:
            return float(quota.get("Value", 0))
    return None


def model_quotas(model_id: str, listing: list[dict[str, Any]] | None, unread: str = "") -> ModelQuotas:
    """The quotas that apply to ``model_id`` at its profile scope: the account's values from ``listing``
    (ListServiceQuotas, ServiceCode bedrock), else the model table's defaults, each saying why it was not
    read (``unread``: the listing failed). Pure."""
    scope = profile_scope(model_id)
    facts = model_facts(model_id)
    model = f"Anthropic {facts.label}" if facts else model_id
    prefix = QUOTA_PREFIXES[scope]

    def one(name: str, default: float | None) -> Quota:
        if listing is None:
            return Quota(name, default, unread)
        found = _listed(listing, name)
        if found is None:
            return Quota(name, default, "no such quota in Service Quotas" if default is not None else "")
        return Quota(name, found)

    return ModelQuotas(
        scope=scope,
        tokens=one(f"{prefix} tokens per minute for {model}", default_tpm(model_id)),
        requests=one(f"{prefix} requests per minute for {model}", listed_rpm(model_id)),
        daily=one(DAILY_QUOTA, DAILY_TOKENS_DEFAULT),
        model_daily=_listed(listing or [], f"Model invocation max tokens per day for {model}"),
    )


def _service_quotas(clients: Clients) -> tuple[list[dict[str, Any]] | None, str]:
    """Every Bedrock quota of the account (ListServiceQuotas, paginated), or None and why not."""
    listing: list[dict[str, Any]] = []
    try:
        pages = clients("service-quotas").get_paginator("list_service_quotas").paginate(ServiceCode="bedrock")
        for number, page in enumerate(pages):
            listing += page.get("Quotas") or []
            if number + 1 >= QUOTA_PAGES:
                break
    except ClientError as exc:
        error = exc.response.get("Error", {})
        return None, f"{exc.operation_name}: {error.get('Code', 'Unknown')}"
    except BotoCoreError as exc:
        return None, str(exc)
    return listing, ""


def _quotas(
    deployment: Deployment,
    clients: Clients,
    environment: dict[str, str],
    settings: Settings | None,
    unread: str,
) -> Iterator[Check]:
    """Which of Bedrock's quotas the model counts against at its profile scope, and their values (the
    account's through Service Quotas, else the listed defaults, said so), what one call reserves and
    settles; then whether they hold the function's MAX_CONCURRENCY or the shared quota."""
    if settings is None:
        yield _not_checked("quotas", unread)
        return
    if settings.context_strategy != "claude":
        yield Check("quotas", "ok", "no model: nothing to check")
        return
    listing, why = _service_quotas(clients)
    found = model_quotas(settings.model_id, listing, why)
    todo = READ_TODO if listing is None else ""
    label = model_label(settings.model_id).removeprefix("Claude ").lower()
    scope = f"{label}, {found.scope} scope"
    tokens, requests, daily = found.tokens, found.requests, found.daily
    yield Check(
        "tokens per minute",
        "ok" if tokens.value is not None and not tokens.unread else "warn",
        f"{scope}: {tokens.said('tokens')}" if tokens.value is not None or tokens.unread
        else f"{scope}: {tokens.name}: not in Service Quotas, and no default listed here",
        todo or ("" if tokens.value is not None and not tokens.unread
                 else "look it up in the Service Quotas console (Amazon Bedrock)"),
    )  # fmt: skip
    if requests.value is not None:
        rpm = requests.said("requests")
    elif requests.unread:  # the account not read, and the model table lists none: not known
        rpm = f"{requests.name}: none in the model table (not read: {requests.unread})"
    else:
        rpm = (
            f"{requests.name}: none listed (Bedrock enforces requests per minute only for some models since "
            "May 2026)"
        )
    # the read's todo said once, on the tokens' line; the lines below give its reason
    yield Check("requests per minute", "warn" if requests.unread else "ok", f"{scope}: {rpm}")
    if daily.value == 0 or found.model_daily == 0:
        yield Check(
            "tokens per day",
            "fail",
            f"the daily token quota for {label} is 0 in this account (new accounts may start so)",
            "ask AWS for a quota increase (AWS Support: the daily quota is raised by a support case) before "
            "syncing",
        )
        return
    yield Check(
        "tokens per day",
        "warn" if daily.unread else "ok",
        f"{daily.said('tokens')}, every model in the account and Region, charged what each call settles",
    )
    yield _per_call(settings)
    yield _verdict(settings, f"{QUOTA_PREFIXES[found.scope].lower()} for {label}", found)


def _per_call(settings: Settings) -> Check:
    burndown = output_burndown(settings.model_id, settings.model_output_burndown)
    given = " (MODEL_OUTPUT_BURNDOWN)" if settings.model_output_burndown else ""
    max_tokens = f"max_tokens {settings.context_max_tokens:,} for a chunk's context"
    if settings.context_mode != "per_chunk":
        grouped = (settings.context_max_tokens + 16) * settings.group_size
        max_tokens += f", {grouped:,} for a group of {settings.group_size}"
    return Check(
        "one call",
        "ok",
        f"reserves its input + cache write + {max_tokens} (a call without max_tokens would reserve "
        f"{max_output_tokens(settings.model_id):,}); settles input + cache write + output x {burndown}"
        f"{given}; cache reads are not settled",
    )


def _verdict(settings: Settings, family: str, found: ModelQuotas) -> Check:
    if found.tokens.value is None:
        return Check(
            "quotas",
            "warn",
            f"no {family} tokens-per-minute quota known: MAX_CONCURRENCY {settings.max_concurrency} not "
            "judged",
            "check it in the Service Quotas console",
        )
    requests = found.requests.value if found.requests.value is not None else float("inf")
    tokens = found.tokens.value
    defaults = found.tokens.unread or found.requests.unread
    if settings.model_quota_table:
        check = _shared_quota(settings, family, requests, tokens)
    else:
        check = _concurrency(settings, family, requests, tokens)
    if defaults and check.status == "ok":  # judged on listed defaults: said, not passed
        return Check(
            "quotas",
            "warn",
            f"{check.detail} (listed defaults: the account's may be lower)",
            "run ckb doctor with servicequotas:ListServiceQuotas allowed",
        )
    return check


def _concurrency(settings: Settings, family: str, requests: float, tokens: float) -> Check:
    need_requests, need_tokens = quota_need(settings.max_concurrency)
    rpm = f"{requests:,.0f} requests and " if requests != float("inf") else ""
    if requests < need_requests or tokens < need_tokens:
        fits = min(requests * SECONDS_PER_CALL / 60, tokens * SECONDS_PER_CALL / 60 / TOKENS_PER_CALL)
        return Check(
            "quotas",
            "warn",
            f"{family}: {rpm}{tokens:,.0f} tokens a minute; MAX_CONCURRENCY {settings.max_concurrency} asks "
            f"about {need_requests:,} requests and {need_tokens:,} tokens: a sync will be throttled",
            f"set MAX_CONCURRENCY to {max(1, int(fits))} in functionEnvironment, or ask for a quota increase",
        )
    return Check(
        "quotas",
        "ok",
        f"{family}: {rpm}{tokens:,.0f} tokens a minute, enough for MAX_CONCURRENCY "
        f"{settings.max_concurrency}",
    )


def _shared_quota(settings: Settings, quota: str, requests: float, tokens: float) -> Check:
    """The quota the invocations share (modelRequestsPerMinute, modelTokensPerMinute) against the account's:
    above it, the turns let through more than Bedrock does."""
    # The function ignores an RPM given for a model AWS lists none for (shared_quota.unlisted_rpm): so does
    # this check, and it says so.
    ignored = unlisted_rpm(settings.model_id, settings.model_requests_per_minute, "modelRequestsPerMinute")
    shared_requests = 0 if ignored else settings.model_requests_per_minute
    shared = {"requests": shared_requests, "tokens": settings.model_tokens_per_minute}
    account = {"requests": requests, "tokens": tokens}
    over = [kind for kind in shared if shared[kind] > account[kind]]
    if over:
        kind = over[0]
        return Check(
            "quotas",
            "warn",
            f"{quota}: {account[kind]:,.0f} {kind} a minute; the shared quota gives {shared[kind]:,}: calls "
            "will be throttled",
            f"set model{kind.title()}PerMinute to {int(0.9 * account[kind]):,} or less (90%), and deploy",
        )
    burndown = output_burndown(settings.model_id, settings.model_output_burndown)
    if ignored:
        return Check(
            "quotas",
            "warn",
            f"{quota}: {tokens:,.0f} tokens a minute; the invocations share "
            f"{settings.model_tokens_per_minute:,} of them, an output token counted as {burndown}; {ignored}",
            "remove modelRequestsPerMinute from the stack's settings, and deploy",
        )
    if requests == float("inf") or not shared_requests:  # only the tokens are shared against a quota
        return Check(
            "quotas",
            "ok",
            f"{quota}: {tokens:,.0f} tokens a minute; the invocations share "
            f"{settings.model_tokens_per_minute:,} of them, an output token counted as {burndown}",
        )
    return Check(
        "quotas",
        "ok",
        f"{quota}: {requests:,.0f} requests and {tokens:,.0f} tokens a minute; the invocations share "
        f"{settings.model_requests_per_minute:,} and {settings.model_tokens_per_minute:,} of them, an output "
        f"token counted as {burndown}",
    )


def _lifecycle(
    deployment: Deployment,
    clients: Clients,
    environment: dict[str, str],
    settings: Settings | None,
    unread: str,
) -> Check:
    if not deployment.intermediate_bucket:
        return Check(
            "intermediate bucket", "warn", "the stack has no IntermediateBucketName output: not checked"
        )
    # Unread settings: the default prefix is checked, and the check says it is only the default.
    default = str(Settings.model_fields["context_memory_prefix"].default)
    prefix = settings.context_memory_prefix if settings is not None else default
    try:
        rules = clients("s3").get_bucket_lifecycle_configuration(Bucket=deployment.intermediate_bucket)[
            "Rules"
        ]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchLifecycleConfiguration":
            raise
        rules = []
    expiring = [
        str((r.get("Filter") or {}).get("Prefix", r.get("Prefix", "")))
        for r in rules
        if r.get("Status") == "Enabled" and (r.get("Expiration") or {}).get("Days")
    ]
    if prefix and any(prefix.startswith(p) for p in expiring):
        return Check(
            "intermediate bucket",
            "fail",
            f"a lifecycle rule expires the remembered contexts ({prefix}): a re-sync calls the model again",
            "remove that rule; keep expiring aws/bedrock/knowledge_bases/ and the outputs",
        )
    if not any(p.startswith("aws/bedrock/knowledge_bases") for p in expiring):
        return Check(
            "intermediate bucket",
            "warn",
            f"nothing expires the Knowledge Base's intermediate files in {deployment.intermediate_bucket}",
            "add a lifecycle rule on aws/bedrock/knowledge_bases/ (the stack's sets 30 days)",
        )
    if settings is None:
        return Check(
            "intermediate bucket",
            "warn",
            f"intermediate files expire; the remembered contexts' prefix not checked: {unread}; nothing "
            f"expires the default ({prefix})",
            "fix the function settings check first",
        )
    kept = f"; remembered contexts kept under {prefix}" if prefix else "; remembering is off"
    return Check("intermediate bucket", "ok", f"intermediate files expire{kept}")


LOG_TYPE = "APPLICATION_LOGS"  # the Knowledge Base's ingestion logs (query/ingestion_logs.py)


def _pages(call: Callable[..., dict[str, Any]], key: str, **request: Any) -> list[dict[str, Any]]:
    """Every item of a CloudWatch Logs Describe* listing (``nextToken``), at most 100 pages."""
    found: list[dict[str, Any]] = []
    for _ in range(100):
        page = call(**request)
        found += page.get(key) or []
        if not page.get("nextToken"):
            break
        request = {**request, "nextToken": page["nextToken"]}
    return found


def _ingestion_logs(deployment: Deployment, clients: Clients) -> Check:
    """Which delivery source carries the Knowledge Base's ingestion logs (CloudWatch Logs allows one a
    resource and log type): the stack's, the Knowledge Base's own used by the stack (attach,
    ``ingestionLogSource``), or one the stack leaves alone (``ingestionLogs=false``), or none."""
    kb = clients("bedrock-agent").get_knowledge_base(knowledgeBaseId=deployment.knowledge_base_id)
    kb_arn = kb["knowledgeBase"]["knowledgeBaseArn"]
    logs = clients("logs")
    sources = [
        str(s.get("name", ""))
        for s in _pages(logs.describe_delivery_sources, "deliverySources")
        if kb_arn in (s.get("resourceArns") or []) and s.get("logType") == LOG_TYPE
    ]
    group = deployment.ingestion_log_group
    deploy_line = deployment.ingestion_logs_check.partition(": ")[0]
    if not group:  # ingestionLogs=false
        if sources:
            return Check(
                "ingestion logs",
                "ok",
                f"skipped by the stack (ingestionLogs=false): delivery source {sources[0]} delivers them, "
                "not to this stack (no failed-documents metric or alarm)",
            )
        return Check(
            "ingestion logs",
            "warn",
            "the Knowledge Base's ingestion logs are delivered nowhere (ingestionLogs=false): a failed "
            "document shows only in its ingestion job's counts",
            "deploy with -c ingestionLogs=true (or set up a delivery: docs/OPERATIONS.md, ingestion logs)",
        )
    if not sources:
        return Check(
            "ingestion logs",
            "fail",
            f"no delivery source for the Knowledge Base's {LOG_TYPE}: nothing reaches {group}",
            "deploy the stack again",
        )
    groups = {}
    for delivery in _pages(logs.describe_deliveries, "deliveries"):
        if delivery.get("deliverySourceName") in sources:
            name = str(delivery.get("deliveryDestinationArn", "")).rsplit(":", 1)[-1].rsplit("/", 1)[-1]
            found = logs.get_delivery_destination(name=name)["deliveryDestination"]
            target = str((found.get("deliveryDestinationConfiguration") or {}).get("destinationResourceArn"))
            groups[target.removesuffix(":*").split(":log-group:", 1)[-1]] = delivery["deliverySourceName"]
    if group not in groups:
        return Check(
            "ingestion logs",
            "fail",
            f"delivery source {sources[0]} delivers nothing to {group}",
            "deploy the stack again",
        )
    whose = (
        "the Knowledge Base's own, used by the stack (ingestionLogSource)"
        if deploy_line == "use"
        else "the stack's"
    )
    return Check("ingestion logs", "ok", f"delivered to {group} by delivery source {groups[group]} ({whose})")


def _map_widths(definition: dict[str, Any]) -> list[int]:
    """The MaxConcurrency of every Map state of a state machine's definition, nested ones included. Pure."""
    widths = []
    for state in (definition.get("States") or {}).values():
        if state.get("Type") == "Map":
            widths.append(int(state.get("MaxConcurrency", 0)))
            widths += _map_widths(state.get("ItemProcessor") or state.get("Iterator") or {})
    return widths


def _map_functions(definition: dict[str, Any], *, inside: bool = False) -> list[str]:
    """The Lambda functions a Map's children invoke: a task's Resource when it is the function's ARN
    (LambdaInvoke with payload_response_only, as the workflow's are), or the FunctionName of a
    ``lambda:invoke`` task. Pure."""
    found = []
    for state in (definition.get("States") or {}).values():
        resource = str(state.get("Resource", ""))
        if inside and state.get("Type") == "Task":
            if ":lambda:" in resource and ":function:" in resource:
                found.append(resource)
            elif resource.endswith(":lambda:invoke"):
                name = (state.get("Parameters") or state.get("Arguments") or {}).get("FunctionName")
                if isinstance(name, str):
                    found.append(name)
        if state.get("Type") == "Map":
            processor = state.get("ItemProcessor") or state.get("Iterator") or {}
            found += _map_functions(processor, inside=True)
    return list(dict.fromkeys(found))


# Lambda keeps this much of the account's concurrency unreserved (PutFunctionConcurrency refuses to go below).
UNRESERVED_FLOOR = 100


def _workflow_concurrency(deployment: Deployment, clients: Clients) -> Check:
    """The workflow's Maps run their shards as Lambda invocations at once (workflowMapConcurrency). Without
    a reservation the children share the account's unreserved concurrency (reduced in a new account: Lambda
    quotas page); with the step's reserved concurrency (workflowReservedConcurrency) they run in that pool,
    one left for a look. Beyond either the children throttle, retry for minutes, and fail the Map
    (ContextualizeDeadEnd). A reservation must leave Lambda's 100 unreserved to the account."""
    machine = clients("stepfunctions").describe_state_machine(stateMachineArn=deployment.state_machine_arn)
    definition = json.loads(machine["definition"])
    widths = [w for w in _map_widths(definition) if w > 0]
    if not widths:
        return Check("workflow concurrency", "ok", "the workflow runs no Map")
    width = max(widths)
    answers = [clients("lambda").get_function_concurrency(FunctionName=f) for f in _map_functions(definition)]
    reserved = [
        int(answer["ReservedConcurrentExecutions"])
        for answer in answers
        if answer.get("ReservedConcurrentExecutions") is not None
    ]
    limits = clients("lambda").get_account_settings()["AccountLimit"]
    total, free = (
        int(limits.get("ConcurrentExecutions", 0)),
        int(limits.get("UnreservedConcurrentExecutions", 0)),
    )
    account = f"the account's Lambda concurrency is {total:,} ({free:,} unreserved)"
    if reserved:
        pool = min(reserved)
        said = f"a Map runs {width} shards at once within the step's reserved concurrency of {pool:,}"
        if width >= pool:
            return Check(
                "workflow concurrency",
                "fail",
                f"a Map runs {width} shards at once on the step's reserved concurrency of {pool:,}: the "
                "children will throttle (a look needs one too) and fail the Map",
                f"deploy with -c workflowMapConcurrency={max(1, pool - 1)}, or a larger "
                "workflowReservedConcurrency",
            )
        if free < UNRESERVED_FLOOR:
            most = max(0, pool - (UNRESERVED_FLOOR - free))
            return Check(
                "workflow concurrency",
                "fail",
                f"{said}, leaving {free:,} unreserved in the account, under the {UNRESERVED_FLOOR} Lambda "
                "keeps for every other function (the transformation's included)",
                f"deploy with -c workflowReservedConcurrency={most} or less"
                if most >= 2
                else "deploy without workflowReservedConcurrency, or ask for more Lambda concurrency",
            )
        if free == UNRESERVED_FLOOR:  # fine, but a larger reservation would be refused at deploy
            return Check(
                "workflow concurrency",
                "ok",
                f"{said}, leaving {free:,} unreserved in the account, Lambda's floor: a larger "
                "workflowReservedConcurrency cannot deploy",
            )
        return Check("workflow concurrency", "ok", f"{said}; {account}")
    said = f"a Map runs {width} shards at once; {account}"
    if width >= free:
        return Check(
            "workflow concurrency",
            "fail",
            f"{said}: the children will throttle and fail the Map",
            f"deploy with -c workflowMapConcurrency={max(1, free // 2)}, or ask for more Lambda concurrency "
            "(Service Quotas, Concurrent executions)",
        )
    if width > free // 2:
        return Check(
            "workflow concurrency",
            "warn",
            f"{said}: little is left for the transformation function during a Map",
            f"deploy with -c workflowMapConcurrency={max(1, free // 2)}",
        )
    return Check("workflow concurrency", "ok", said)


# Bedrock's batch inference job statuses a job ends in, and those that say it ran.
_JOB_ENDED = {"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"}
_JOB_RAN = {"Completed", "PartiallyCompleted"}
ASSUMPTIONS = "docs/DEFERRED.md, Assumptions"


def _batch_jobs(deployment: Deployment, clients: Clients) -> Check:
    """What no page settles, told by the stack's latest batch job that ended (ckb contextualize's, run as the
    stack's batch role): that batch jobs take the configured inference profile (AWS's table lists
    cross-Region profiles without telling global from geographic ones), and that the batch role's
    foundation-model grant, conditioned on bedrock:InferenceProfileArn, is honoured for batch (AWS's batch
    role template has no condition). A job that ran proves both; one refused says which."""
    found = clients("bedrock").list_model_invocation_jobs(
        nameContains="ckb-", sortBy="CreationTime", sortOrder="Descending", maxResults=50
    )
    ours = [
        j
        for j in found.get("invocationJobSummaries") or []
        if j.get("roleArn") == deployment.batch_role_arn and j.get("status") in _JOB_ENDED
    ]
    if not ours:
        return Check(
            "batch jobs",
            "ok",
            "no batch job of this stack has ended yet: that batch takes the model's inference profile and "
            f"that the batch role's conditioned grant holds are assumptions until one has ({ASSUMPTIONS})",
        )
    latest = ours[0]
    name, model = latest.get("jobName", "?"), latest.get("modelId", "?")
    status, message = latest.get("status", "?"), str(latest.get("message") or "").strip()
    if status in _JOB_RAN:
        return Check(
            "batch jobs",
            "ok",
            f"{name} ({model}) {status}: batch takes this profile, and the batch role's grant holds",
        )
    if status != "Failed":
        return Check("batch jobs", "ok", f"{name} ({model}) ended {status}: it proves nothing either way")
    lowered = message.lower()
    if any(word in lowered for word in ("not authorized", "accessdenied", "access denied", "permission")):
        return Check(
            "batch jobs",
            "fail",
            f"{name} ({model}) failed: {message}",
            "the batch role's foundation-model grant may not apply to batch (its bedrock:InferenceProfileArn "
            f"condition): {ASSUMPTIONS}, says what to add",
        )
    if any(word in lowered for word in ("inference profile", "not supported", "model identifier", "modelid")):
        return Check(
            "batch jobs",
            "fail",
            f"{name} ({model}) failed: {message}",
            f"batch may not take a {model.split('.', 1)[0]}. profile: set MODEL_ID to a geographic one "
            f"(us., eu., ...) for batch ({ASSUMPTIONS})",
        )
    return Check(
        "batch jobs", "warn", f"{name} ({model}) failed: {message or 'no message'}", "see the job's message"
    )


# Above this share of chunks given the structural context instead of the model's, `ckb sync` suggests the
# doctor: the model is likely unreachable or throttled (ContextFallbacks against ChunksIn).
FALLBACK_SHARE_TO_SUGGEST = 0.05


def _alarms(deployment: Deployment, clients: Clients) -> Check:
    """An alarm reaches someone only through a confirmed subscription: SNS mails an address a link first,
    and until it is followed the subscription's ARN reads ``PendingConfirmation``."""
    topic = deployment.alarm_topic_arn
    pages = clients("sns").get_paginator("list_subscriptions_by_topic").paginate(TopicArn=topic)
    arns = [s["SubscriptionArn"] for page in pages for s in page["Subscriptions"]]
    confirmed = sum(arn.startswith("arn:") for arn in arns)
    pending = sum(arn == "PendingConfirmation" for arn in arns)
    waiting = f"{pending} waiting for its confirmation" if pending else ""
    if not confirmed:
        return Check(
            "alarms",
            "warn",
            f"nobody hears the alarms: {topic} has no confirmed subscription"
            + (f" ({waiting})" if waiting else ""),
            "deploy with -c alarmEmail=you@example.com and follow the link SNS mails, or subscribe to the "
            "topic (docs/OPERATIONS.md, Alarms: who hears them)",
        )
    plural = "s" if confirmed > 1 else ""
    return Check(
        "alarms",
        "ok",
        f"the alarms notify {topic}: {confirmed} confirmed subscription{plural}"
        + (f", {waiting}" if waiting else ""),
    )


def fallbacks_during(clients: Clients, start: datetime, end: datetime) -> tuple[int, int]:
    """(chunks given the fallback, chunks in) by the function between ``start`` and ``end`` (CloudWatch)."""
    fell, chunks = _sums(clients, start, end, ("ContextFallbacks", "ChunksIn"))
    return fell, chunks


def model_calls_during(clients: Clients, start: datetime, end: datetime) -> int:
    """The function's model calls between ``start`` and ``end`` (CloudWatch)."""
    (calls,) = _sums(clients, start, end, ("ModelCalls",))
    return calls


def _sums(clients: Clients, start: datetime, end: datetime, metrics: tuple[str, ...]) -> list[int]:
    totals = []
    cloudwatch = clients("cloudwatch")
    for metric in metrics:
        found = cloudwatch.get_metric_statistics(
            Namespace=METRICS_NAMESPACE,
            MetricName=metric,
            Dimensions=[
                {"Name": "Strategy", "Value": "claude"},
                {"Name": "service", "Value": METRICS_SERVICE},
            ],
            StartTime=start,
            EndTime=end,
            Period=60,
            Statistics=["Sum"],
        )
        totals.append(int(sum(point.get("Sum", 0) for point in found.get("Datapoints", []))))
    return totals
