"""The re-ingestion ending ``ckb contextualize``: the documents that got contexts marked for the Knowledge
Base to ingest again (``ckb sync --reprocess``'s mechanism: a metadata file), then one ingestion job.

Only documents marked are re-ingested; each other one is said, with why, and its pending record stays
(awaiting re-ingestion) for the next run to mark again:

- a source outside S3 (web, Confluence, SharePoint): nothing here can mark it, and a sync skips an unchanged
  document, so ``ckb sync`` alone does not re-ingest it; it is re-ingested when it changes at its source;
- a source S3 does not let this operator read or write (another account's bucket, a read-only role), or
  whose metadata file cannot be marked (``reprocess.mark`` says why);
- an archived source (GLACIER, DEEP_ARCHIVE, not restored): the Knowledge Base cannot read it, so a mark
  would turn it into a failed document at every sync (GLACIER_IR is read directly: marked);
- a source deleted since it was recorded is not marked (a metadata file beside nothing would be left in the
  user's bucket): counted apart, its record dropped, since the Knowledge Base removes the document at its
  next sync.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from contextual_kb.deferred.concurrency import in_order

MISSING = {"404", "NoSuchKey", "NotFound"}
# Read only after a restore (GetObject: InvalidObjectState); marked, they would fail at every sync.
# GLACIER_IR is read directly.
ARCHIVED = {"GLACIER", "DEEP_ARCHIVE"}


@dataclass
class Reingested:
    """What the re-ingestion did with each source it was given."""

    marked: list[str] = field(default_factory=list)  # source URIs the ingestion job re-ingests
    skipped: dict[str, str] = field(default_factory=dict)  # source URI -> why it was not marked
    missing: list[str] = field(default_factory=list)  # deleted since recorded: nothing to ingest
    model_calls: int | None = None  # the function's model calls during the job, when known
    job: str = ""  # "<job id> <status>", when one ran


def split_s3(uri: str) -> tuple[str, str] | None:
    if not uri.startswith("s3://"):
        return None
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return (bucket, key) if bucket and key else None


def existing(s3: Any, sources: list[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """(S3 sources that exist, those deleted, the others with why they cannot be marked): a HEAD each,
    several at a time. Only a missing object counts as deleted: an error (403 from another account's
    bucket, a throttle after the SDK's retries) is that document's reason, never "deleted"."""
    found: list[str] = []
    missing: list[str] = []
    skipped: dict[str, str] = {}

    def look(uri: str) -> str:
        where = split_s3(uri)
        if where is None:
            return "not in S3: re-ingested only when it changes at its source (a sync skips it as it is)"
        try:
            head = s3.head_object(Bucket=where[0], Key=where[1])
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            return "missing" if code in MISSING else f"S3 HeadObject {code or 'error'}"
        except BotoCoreError as exc:
            return f"S3 HeadObject {exc}"
        storage = str(head.get("StorageClass", ""))
        if storage in ARCHIVED and 'ongoing-request="false"' not in str(head.get("Restore", "")):
            return f"archived ({storage}): the Knowledge Base cannot read it until it is restored"
        return ""

    for uri, why in in_order(look, sources):
        if not why:
            found.append(uri)
        elif why == "missing":
            missing.append(uri)
        else:
            skipped[uri] = why
    return found, missing, skipped


def reingest_s3(
    s3: Any,
    sources: list[str],
    start_job: Callable[[], tuple[str, int | None]] | None,
    log: Callable[[str], None],
) -> Reingested:
    """Each source that still exists marked (``reprocess.mark``), then, when any was, ``start_job`` (one
    ingestion job, followed: its line, and the model calls made meanwhile when known). Every source not
    marked is logged with why."""
    from contextual_kb.query.reprocess import Plan, mark
    from contextual_kb.runtime.pending import now_iso

    found, missing, skipped = existing(s3, sources)
    result = Reingested(missing=missing, skipped=skipped)
    by_bucket: dict[str, list[str]] = {}
    for uri in found:
        bucket, key = split_s3(uri) or ("", "")
        by_bucket.setdefault(bucket, []).append(key)
    stamp = now_iso()
    for bucket, keys in by_bucket.items():
        marked = mark(s3, Plan(bucket, [(key, 0) for key in keys], []), stamp)
        refused = {key: why for key, why in marked.skipped}
        for key in keys:
            uri = f"s3://{bucket}/{key}"
            if key in refused:
                result.skipped[uri] = refused[key]
            else:
                result.marked.append(uri)
        log(f"marked {len(keys) - len(refused)} document(s) in s3://{bucket} for re-ingestion")
    for uri in missing:
        log(f"not marked: {uri}: deleted since it was recorded (nothing to ingest)")
    for uri, why in sorted(result.skipped.items()):
        log(f"not marked: {uri}: {why}")
    if result.marked and start_job is not None:
        result.job, result.model_calls = start_job()
    return result
