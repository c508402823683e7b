"""The claim on a ``ckb contextualize`` run (``deferred/claim.py``): S3 conditional writes on moto, which
answers ``If-None-Match: *`` and ``If-Match`` with 412 as S3 does (checked here first)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from contextual_kb.deferred.claim import Claim, ContextualizeError, TakenOverError

BUCKET = "ckb-claims"
KEY = "contextual-kb/batch/current.json"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def claim(s3: Any, **kwargs: Any) -> Claim:
    return Claim(s3, BUCKET, KEY, **kwargs)


def test_moto_refuses_conditional_writes_as_s3_does(s3: Any) -> None:
    first = s3.put_object(Bucket=BUCKET, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key="k", Body=b"2", IfNoneMatch="*")
    s3.put_object(Bucket=BUCKET, Key="k", Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key="k", Body=b"4", IfMatch=first["ETag"])
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.delete_object(Bucket=BUCKET, Key="k", IfMatch=first["ETag"])


def test_of_two_processes_claiming_at_the_same_moment_one_holds_and_the_other_is_refused(s3: Any) -> None:
    a, b = claim(s3), claim(s3)
    b_peek, looks = b.peek, []

    def saw_none_first() -> Any:  # b looked before a wrote: both saw no claim
        looks.append(1)
        return None if len(looks) == 1 else b_peek()

    b.peek = saw_none_first  # type: ignore[method-assign]
    assert a.take("run-a") == "run-a"
    with pytest.raises(ContextualizeError, match="run run-a is under way in another ckb contextualize"):
        b.take("run-b")
    assert len(looks) == 2  # its If-None-Match write was refused, then it looked again
    a.renew(force=True)  # still a's


def test_a_released_claim_is_resumed_at_once_and_a_finished_one_is_gone(s3: Any) -> None:
    a = claim(s3)
    a.take("run-a")
    a.release()
    b = claim(s3)
    assert b.take("run-b") == "run-a"  # released: resumed, not refused
    b.release(finished=True)
    assert b.peek() is None
    assert claim(s3).take("run-c") == "run-c"


def test_a_holder_whose_claim_was_taken_over_is_refused_and_cannot_release_the_others(s3: Any) -> None:
    a = claim(s3)
    a.take("run-a")
    b = claim(s3, lease_seconds=0)  # a's claim has lapsed, for b
    assert b.take("run-b") == "run-a"
    with pytest.raises(TakenOverError, match="was taken over by another ckb contextualize") as raised:
        a.renew(force=True)
    assert raised.value.holder == b.owner  # who holds it now: the workflow's shards tell a CLI's apart
    a.release(finished=True)  # a no-op: a holds nothing
    body, _, _ = b.peek() or ({}, "", 0.0)
    assert body["owner"] == b.owner


def test_only_a_missing_claim_means_none_and_a_corrupt_one_stops_in_one_line(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"[1, 2")
    with pytest.raises(ContextualizeError) as stopped:
        claim(s3).take("run-a")
    assert "\n" not in str(stopped.value) and f"s3://{BUCKET}/{KEY} does not name a run" in str(stopped.value)

    class Throttled:
        def __getattr__(self, name: str) -> Any:
            return getattr(s3, name)

        def get_object(self, **_: Any) -> Any:
            raise ClientError({"Error": {"Code": "SlowDown", "Message": "slow down"}}, "GetObject")

    with pytest.raises(ClientError, match="SlowDown"):
        claim(Throttled()).take("run-a")


def test_a_joiner_names_who_holds_the_claim_now_or_none(s3: Any) -> None:
    a = claim(s3)
    a.owner = "workflow:exec-1"
    a.take("run-a")
    with pytest.raises(TakenOverError, match="no longer held by workflow:exec-2") as raised:
        joiner = claim(s3)
        joiner.owner = "workflow:exec-2"
        joiner.join("run-a")
    assert raised.value.holder == "workflow:exec-1"
    a.release(finished=True)
    with pytest.raises(TakenOverError, match="the claim names nothing") as raised:
        claim(s3).join("run-a")
    assert raised.value.holder == ""


def test_a_holder_whose_claim_is_gone_is_told_none_holds_it_and_a_takeover_is_recorded(s3: Any) -> None:
    a = claim(s3)
    a.owner = "workflow:exec-1"
    a.take("run-a")
    b = claim(s3, lease_seconds=0)
    b.owner = "workflow:exec-2"
    assert b.take("run-b") == "run-a" and b.taken_from == "workflow:exec-1"
    b.renew(force=True)  # kept through renewals, and by a process joining it
    joiner = claim(s3)
    joiner.owner = "workflow:exec-2"
    joiner.join("run-a")
    with pytest.raises(TakenOverError) as raised:
        a.renew(force=True)
    assert (raised.value.run, raised.value.holder, raised.value.taken_from) == (
        "run-a",
        "workflow:exec-2",
        "workflow:exec-1",
    )
    joiner.release(finished=True)  # the run finished: the claim is gone
    with pytest.raises(TakenOverError) as raised:
        b.renew(force=True)
    assert (raised.value.run, raised.value.holder) == ("", "")
    c = claim(s3)
    assert c.take("run-c") == "run-c" and c.taken_from == ""
    c.release()
    d = claim(s3)
    assert d.take("run-d") == "run-c" and d.taken_from == ""  # released: resumed, taken from no one
