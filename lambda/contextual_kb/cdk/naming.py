"""Names derived from the stack's name that fit every service's limits. Pure.

- OpenSearch Serverless collections: 3-28 characters here (the API says 32, older CDK docs 28: the lower
  bound is safe), ``[a-z][a-z0-9-]*``; its security and access policies: 3-32, ``[a-z][a-z0-9-]+``.
- Bedrock knowledge bases and data sources: ``([0-9a-zA-Z][_-]?){1,100}`` (no two ``-`` or ``_`` in a row).

A name that would be too long keeps its head and gets a short hash of the whole, so two long stack names
that share a head still get different names.
"""

from __future__ import annotations

import hashlib
import re

from aws_cdk import Stack, Token

COLLECTION_MAX = 28
POLICY_MAX = 32
BEDROCK_NAME_MAX = 100
_HASH = 6


def stack_name_of(stack: Stack) -> str:
    """The name the constructs derive their names from: the stack's name, a literal. A NestedStack's name is
    a token (its AWS::StackName, known at deploy only), and a name made from its placeholder string
    (``${Token[TOKEN.414]}``, numbered in the order tokens are made) would change when anything unrelated is
    added to the app, replacing what it names: a nested stack is named by its parent's name and its id."""
    name = stack.stack_name
    if not Token.is_unresolved(name):
        return name
    parent = stack.nested_stack_parent
    if parent is None:  # a stack's own name is always a literal in CDK; kept whole rather than guessed at
        return name
    return f"{stack_name_of(parent)}-{re.sub(r'[^0-9A-Za-z-]', '', stack.node.id) or 'nested'}"


def short_hash(text: str, length: int = _HASH) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fit(base: str, suffix: str, limit: int, *, whole: str | None = None) -> str:
    """``base`` + ``suffix`` within ``limit`` characters: when too long, ``base`` is cut and a hash of
    ``whole`` (default ``base``) joined to it."""
    if len(base) + len(suffix) <= limit:
        return base + suffix
    tag = short_hash(whole or base)
    head = base[: max(1, limit - len(suffix) - len(tag) - 1)].rstrip("-_")
    return f"{head}-{tag}{suffix}"


def lowercase_base(stack_name: str) -> str:
    """The stack name as OpenSearch Serverless names allow: lowercase letters, digits and single hyphens,
    starting with a letter."""
    base = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "", stack_name.lower())).strip("-")
    if not base or not base[0].isalpha():
        base = f"ckb-{base}".rstrip("-")
    return base


def collection_name(stack_name: str, *, standby_replicas: bool = True, customer_key: bool = False) -> str:
    """The collection's name changes with what CloudFormation can only replace, or what AWS sets only at
    its creation (a custom-named resource cannot be replaced under the same name): its standby replicas, and
    its key (an encryption policy assigns its key to collections created after it). AWS's defaults keep the
    name stacks deployed before had."""
    suffix = "-kb" + ("" if standby_replicas else "-nosb") + ("-cmk" if customer_key else "")
    return fit(lowercase_base(stack_name), suffix, COLLECTION_MAX, whole=stack_name)


def collection_names(stack_name: str) -> list[str]:
    """Every name this stack's collection may have: the policies cover each, so that while one collection
    replaces the other both are covered (the old one's index can be deleted, the new one created)."""
    return [
        collection_name(stack_name, standby_replicas=standby, customer_key=key)
        for standby in (True, False)
        for key in (False, True)
    ]


def policy_name(stack_name: str, kind: str) -> str:
    """``kind``: enc, net, access, index..."""
    return fit(lowercase_base(stack_name), f"-{kind}", POLICY_MAX, whole=stack_name)


def bedrock_name(stack_name: str, suffix: str) -> str:
    """A knowledge base's or data source's name: letters and digits, single ``-`` between them."""
    base = re.sub(r"[-_]+", "-", re.sub(r"[^0-9A-Za-z_-]", "", stack_name)).strip("-_") or "ckb"
    return fit(base, suffix, BEDROCK_NAME_MAX, whole=stack_name)


DELIVERY_NAME_MAX = 60


def delivery_name(stack_name: str, suffix: str) -> str:
    """A CloudWatch Logs delivery source's or destination's name: ``[\\w-]``, 1-60 characters, unique in the
    account and region (the stack's name makes it so)."""
    return fit(stack_name, suffix, DELIVERY_NAME_MAX)
