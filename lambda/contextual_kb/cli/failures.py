"""``ckb sync``'s failed documents, grouped by reason: a count and a few names each, so a job with 200
failures reads in a screen (all of them are in ``--json``); and whether ``ckb doctor`` checks what failed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NAMES_SHOWN = 3  # documents named per reason
REASONS_SHOWN = 10  # reasons shown; the rest counted

# What ckb doctor checks (query/doctor.py: the role's permissions, the data source's KMS key, the
# transformation function and its settings, model access, the embedding model, quotas, the intermediate
# bucket), as words a failure reason about them holds. A reason about the document itself (encrypted, not
# parsable, too large, an unsupported type) is none of these: doctor would find nothing.
_DOCTOR_WORDS = (
    "lambda",
    "transformation",
    "function",
    "access denied",
    "accessdenied",
    "not authorized",
    "permission",
    "kms",
    "throttl",
    "quota",
    "rate exceeded",
    "model",
    "embedding",
    "intermediate",
)


@dataclass(frozen=True)
class Group:
    reason: str
    uris: list[str]


def grouped(failed: Sequence[Any]) -> list[Group]:
    """The failed documents (``uri``, ``reason``) by reason, the commonest first (then by reason). Pure."""
    by: dict[str, list[str]] = {}
    for document in failed:
        by.setdefault(document.reason.strip() or "no reason given", []).append(document.uri)
    return [Group(reason, uris) for reason, uris in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def lines(groups: Sequence[Group]) -> list[tuple[str, list[str]]]:
    """Per reason (the first :data:`REASONS_SHOWN`): its line (count and reason) and the lines under it (a
    few documents, one a line so each reads whole and copies whole, then how many more); then how many
    reasons are left out. Pure."""
    out = []
    for group in groups[:REASONS_SHOWN]:
        more = len(group.uris) - NAMES_SHOWN
        out.append(
            (
                f"{len(group.uris):,} document(s): {group.reason}",
                [
                    *group.uris[:NAMES_SHOWN],
                    *([f"... and {more:,} more (--json lists them all)"] if more > 0 else []),
                ],
            )
        )
    left = groups[REASONS_SHOWN:]
    if left:
        out.append(
            (
                f"{sum(len(g.uris) for g in left):,} more document(s) for {len(left):,} other reason(s) "
                "(--json lists them all)",
                [],
            )
        )
    return out


def doctor_helps(reason: str) -> bool:
    """Whether ``reason`` is about something ckb doctor checks. Pure."""
    lowered = reason.lower()
    return any(word in lowered for word in _DOCTOR_WORDS)
