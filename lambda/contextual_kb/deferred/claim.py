"""Which ``ckb contextualize`` run is under way, and which process holds it: one object in the intermediate
bucket (``<batch prefix>current.json``), taken and renewed by S3 conditional writes.

A run is claimed before it plans (``PutObject`` with ``If-None-Match: *``: of two processes, one writes it,
the other is refused), so two runs at once never plan, and so never pay for, the same pending chunks. The
holder renews the claim as it works (``If-Match`` on the ETag it wrote), and always just before anything
paid (a job created, records asked on demand), before a job's contexts are stored and before each write of
the run's state. A claim not renewed
for ``LEASE_SECONDS`` (by S3's clock: the object's ``LastModified``) has lapsed: its process stopped without
releasing it (killed, its machine gone), and the next run takes it over, again conditionally, and resumes
the run. A holder that finds its claim taken over stops before its next paid step, in one line.
A process that stops on an error or an interrupt releases its claim (the run is resumed at once).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

# A holder renews at least every quarter of this (and before each paid step); planning, an upload or one
# slice of on-demand answers takes far less. A confirmation prompt may wait longer: then the claim lapses,
# and the prompt's answer is refused if another run took the claim meanwhile.
LEASE_SECONDS = 600.0
RENEW_EVERY = LEASE_SECONDS / 4
# A conditional write or delete refused: the object changed (412), a concurrent write won (409), or is gone.
REFUSED = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}


class ContextualizeError(Exception):
    """The run cannot go on; the message says why and what to do."""


class BusyError(ContextualizeError):
    """Another process holds the run (its claim is live): nothing is wrong, the run is under way there."""


class TakenOverError(ContextualizeError):
    """The claim no longer names this holder's run and owner: another process took the run over (after the
    lease lapsed) or finished it. What the claim says now: ``run`` and ``holder`` ("" when none holds it,
    or it is gone) and ``taken_from``, the owner the holder took the run over from ("" when it did not)."""

    def __init__(self, message: str, seen: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.run = str((seen or {}).get("run") or "")
        self.holder = str((seen or {}).get("owner") or "")
        self.taken_from = str((seen or {}).get("taken_from") or "")


class Claim:
    def __init__(
        self,
        s3: Any,
        bucket: str,
        key: str,
        *,
        lease_seconds: float = LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
        owner: str = "",
    ) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.key = key
        self.lease_seconds = lease_seconds
        self.clock = clock  # compared with S3's LastModified: a skew of seconds is nothing to a lease
        # A process's own, or a workflow execution's name: each of its steps is a new process, and one
        # that finds the claim still naming its owner (a step retried after a timeout) takes it at once.
        self.owner = owner or uuid.uuid4().hex
        self.run = ""
        self.etag = ""  # of the claim as this process last wrote it; "" when it holds none
        # The owner whose lapsed claim this one took over (kept in the claim: the taken-over execution's
        # Map children tell a takeover from a fault by it, ``workflow.shard``)
        self.taken_from = ""
        self._renewed = 0.0
        self._writes = 0

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def peek(self) -> tuple[dict[str, Any], str, float] | None:
        """The claim as it is (its body, ETag and age in seconds), or None when there is none. Only a
        missing object means none: any other error is raised (after the SDK's retries), never taken as
        "no run"; a body that is not a claim stops the run in one line."""
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise
        raw = got["Body"].read()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict) or not isinstance(body.get("run"), str) or not body["run"]:
                raise ValueError("no run named")
        except ValueError as exc:
            raise ContextualizeError(
                f"{self.where} does not name a run ({exc}): delete it to plan a new run (a run it named is "
                "then not resumed: its pending records are planned again)"
            ) from None
        modified = got.get("LastModified")
        age = self.clock() - modified.timestamp() if isinstance(modified, datetime) else float("inf")
        return body, str(got.get("ETag", "")), age

    def take(self, new_run: str) -> str:
        """Hold the claim: ``new_run`` when none was held (a new run), or the run of a claim that was
        released or has lapsed (to resume). Raises ``ContextualizeError`` when another process holds it."""
        seen = self.peek()
        if seen is None:
            self.taken_from = ""
            if self._write(new_run, {"IfNoneMatch": "*"}):
                return new_run
            seen = self.peek()  # another process claimed it at the same moment
            if seen is None:
                raise ContextualizeError(
                    f"{self.where} was claimed and released while this run started: run it again"
                )
        body, etag, age = seen
        if body.get("owner") and body["owner"] != self.owner and age < self.lease_seconds:
            owner = str(body["owner"])
            holder = (
                f"the stack's deferred workflow (execution {owner.removeprefix('workflow:')})"
                if owner.startswith("workflow:")
                else "another ckb contextualize"
            )
            raise BusyError(
                f"run {body['run']} is under way in {holder} (its claim renewed "
                f"{max(age, 0):.0f} s ago; a claim lapses {self.lease_seconds:.0f} s after its last "
                "renewal): wait for it to end, then run again to see its result"
            )
        if body.get("owner") and body["owner"] != self.owner:  # lapsed: taken over
            self.taken_from = str(body["owner"])
        elif body.get("owner") != self.owner:  # released: the run is resumed, not taken from anyone
            self.taken_from = ""
        else:  # our own (a step retried): as it was
            self.taken_from = str(body.get("taken_from") or "")
        if not self._write(body["run"], {"IfMatch": etag}):
            raise BusyError(
                f"another ckb contextualize took over run {body['run']} at the same moment: wait for it to "
                "end, then run again"
            )
        return body["run"]

    def renew(self, *, force: bool = False, run: str = "") -> None:
        """Renew the claim (``run``: now naming that run): when forced (before a paid step or a write of
        the run's state), or once a quarter of the lease has passed. Raises when it was taken over."""
        if not force and not run and self.clock() - self._renewed < RENEW_EVERY:
            return
        seen = None
        for _ in range(8):
            if self._write(run or self.run, {"IfMatch": self.etag}):
                return
            # Refused: renewed meanwhile by another process of the same owner (the shards of one workflow
            # execution, ``shards.py``, renew it side by side): still ours, so written again over that.
            seen = self.peek()
            if seen is None or seen[0].get("owner") != self.owner or seen[0].get("run") != self.run:
                break
            self.etag = seen[1]
        taken, self.etag = self.run, ""
        raise TakenOverError(
            f"run {taken} was taken over by another ckb contextualize (this one had not renewed its "
            f"claim for {self.lease_seconds:.0f} s, e.g. at a confirmation prompt): this one stops "
            "here, before anything more is paid for; the other goes on",
            seen[0] if seen is not None else None,
        )

    def join(self, run: str) -> None:
        """Work on run ``run`` under the claim another process of the same owner holds (a workflow
        execution's look, whose shards run in other processes: ``shards.py``). Raises when the claim no
        longer names that run and owner (taken over: the shard stops before it writes anything)."""
        seen = self.peek()
        if seen is None or seen[0].get("run") != run or seen[0].get("owner") != self.owner:
            holder = (
                "nothing"
                if seen is None
                else f"{seen[0].get('run')}, held by {seen[0].get('owner') or 'no one'}"
            )
            raise TakenOverError(
                f"run {run} is no longer held by {self.owner} (the claim names {holder}): this shard stops "
                "here; the run's next look goes on",
                seen[0] if seen is not None else None,
            )
        self.run, self.etag = run, seen[1]
        self.taken_from = str(seen[0].get("taken_from") or "")
        self.renew(force=True)

    def release(self, *, finished: bool = False) -> None:
        """Give the claim up: deleted when the run is finished (none under way), or kept naming the run with
        no holder, for the next ``ckb contextualize`` to resume at once. Never over another's claim."""
        if not self.etag:
            return
        condition = {"IfMatch": self.etag}
        try:
            if finished:
                self.s3.delete_object(Bucket=self.bucket, Key=self.key, **condition)
            else:
                self._put({"run": self.run, "owner": "", "released_at": _now()}, condition)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in REFUSED:
                raise
        self.etag = ""

    def _write(self, run: str, condition: dict[str, str]) -> bool:
        """The claim written for this process over ``condition``; False when S3 refuses the condition."""
        self._writes += 1  # a new body each time: S3's ETag is the body's hash, so each write's is its own
        body = {"run": run, "owner": self.owner, "renewed_at": _now(), "write": self._writes}
        if self.taken_from:
            body["taken_from"] = self.taken_from
        try:
            self.etag = self._put(body, condition)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in REFUSED:
                return False
            raise
        self.run, self._renewed = run, self.clock()
        return True

    def _put(self, body: dict[str, Any], condition: dict[str, str]) -> str:
        response = self.s3.put_object(
            Bucket=self.bucket,
            Key=self.key,
            Body=json.dumps(body).encode(),
            ContentType="application/json",
            **condition,
        )
        return str(response.get("ETag", ""))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
