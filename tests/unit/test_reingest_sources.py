"""Which sources ``ckb contextualize``'s re-ingestion may mark (``deferred/reingest.existing``): only a
missing object counts as deleted; another account's 403, a throttle or an archived object keep the
document awaiting re-ingestion, each with why. Pure (a fake client answering HeadObject)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from contextual_kb.deferred.reingest import existing


class Heads:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 (boto3's names)
        answer = self.answers[f"s3://{Bucket}/{Key}"]
        if isinstance(answer, str):
            raise ClientError({"Error": {"Code": answer, "Message": answer}}, "HeadObject")
        return answer


def test_only_a_missing_object_is_deleted_and_every_other_answer_is_said() -> None:
    s3 = Heads(
        {
            "s3://mine/ok.md": {},
            "s3://mine/ir.md": {"StorageClass": "GLACIER_IR"},
            "s3://mine/restored.md": {"StorageClass": "GLACIER", "Restore": 'ongoing-request="false"'},
            "s3://mine/gone.md": "404",
            "s3://theirs/doc.md": "403",
            "s3://mine/busy.md": "SlowDown",
            "s3://mine/cold.md": {"StorageClass": "DEEP_ARCHIVE"},
            "s3://mine/thawing.md": {"StorageClass": "GLACIER", "Restore": 'ongoing-request="true"'},
        }
    )
    wiki = "https://wiki.example.com/page"
    found, missing, skipped = existing(s3, [*s3.answers, wiki])
    assert found == ["s3://mine/ok.md", "s3://mine/ir.md", "s3://mine/restored.md"]
    assert missing == ["s3://mine/gone.md"]
    assert skipped["s3://theirs/doc.md"] == "S3 HeadObject 403"
    assert skipped["s3://mine/busy.md"] == "S3 HeadObject SlowDown"
    assert skipped["s3://mine/cold.md"].startswith("archived (DEEP_ARCHIVE)")
    assert skipped["s3://mine/thawing.md"].startswith("archived (GLACIER)")
    assert skipped[wiki].startswith("not in S3")
