"""The local Knowledge Base's ingestion jobs against transformations that misbehave (called in process, S3 on
moto): what the service does with a file whose transformation loses a chunk, and with a second job while one
runs."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.local.knowledge_base import ApiError, DataSourceSpec, KnowledgeBaseSpec, LocalKnowledgeBase

KB, DS, SOURCE, STAGING = "KBTEST0001", "DSTEST0001", "source-bucket", "staging-bucket"


def service(s3: Any, invoke: Any) -> LocalKnowledgeBase:
    for bucket in (SOURCE, STAGING):
        s3.create_bucket(Bucket=bucket)
    spec = KnowledgeBaseSpec(KB, [DataSourceSpec(DS, SOURCE, STAGING, max_tokens=20, overlap_percentage=0)])
    return LocalKnowledgeBase([spec], analyzer=ANALYZERS["index"], s3=lambda: s3, invoke=invoke)


def test_a_transformation_that_loses_a_chunk_fails_its_document(s3: Any) -> None:
    def lossy(event: dict[str, Any]) -> dict[str, Any]:
        (entry,) = event["inputFiles"]
        key = entry["contentBatches"][0]["key"]
        batch = s3.get_object(Bucket=STAGING, Key=key)["Body"].read()
        kept = json.loads(batch)
        kept["fileContents"] = kept["fileContents"][:-1]  # one chunk dropped
        s3.put_object(Bucket=STAGING, Key=key + ".out", Body=json.dumps(kept).encode())
        return {"outputFiles": [{**entry, "contentBatches": [{"key": key + ".out"}]}]}

    kb = service(s3, lossy)
    s3.put_object(Bucket=SOURCE, Key="a.txt", Body=("word " * 30).encode())
    job = kb.start_ingestion_job(KB, DS)["ingestionJob"]
    kb.wait_for_jobs()
    done = kb.get_ingestion_job(KB, DS, job["ingestionJobId"])["ingestionJob"]
    assert done["status"] == "COMPLETE" and done["statistics"]["numberOfDocumentsFailed"] == 1
    (document,) = kb.list_documents(KB, DS, {})["documentDetails"]
    assert document["status"] == "FAILED"
    assert document["statusReason"] == "the transformation failed: ValueError: 2 chunks went in, 1 came back"
    assert kb.indexed_chunks(KB) == []  # nothing of it is searchable


def test_one_job_at_a_time_per_data_source(s3: Any) -> None:
    release = threading.Event()

    def slow(event: dict[str, Any]) -> dict[str, Any]:
        release.wait(timeout=30)
        return {"outputFiles": []}

    kb = service(s3, slow)
    s3.put_object(Bucket=SOURCE, Key="a.txt", Body=b"text")
    kb.start_ingestion_job(KB, DS)
    with pytest.raises(ApiError) as refused:
        kb.start_ingestion_job(KB, DS)
    assert refused.value.code == "ConflictException"
    running = kb.list_ingestion_jobs(
        KB,
        DS,
        {"filters": [{"attribute": "STATUS", "operator": "EQ", "values": ["IN_PROGRESS", "STARTING"]}]},
    )
    assert len(running["ingestionJobSummaries"]) == 1
    release.set()
    kb.wait_for_jobs()


def toy_embed(texts: Any) -> Any:
    """Hashed bags of words: deterministic vectors, enough to test the dense paths without the dense extra."""
    import hashlib

    import numpy as np

    vectors = np.zeros((len(texts), 64), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
    return vectors


def test_semantic_and_hybrid_search_with_vectors(s3: Any) -> None:
    for bucket in (SOURCE, STAGING):
        s3.create_bucket(Bucket=bucket)
    spec = KnowledgeBaseSpec(KB, [DataSourceSpec(DS, SOURCE, STAGING)])
    kb = LocalKnowledgeBase([spec], analyzer=ANALYZERS["index"], s3=lambda: s3, invoke=None, embed=toy_embed)
    s3.put_object(Bucket=SOURCE, Key="bucket.txt", Body=b"token bucket refill rate")
    s3.put_object(Bucket=SOURCE, Key="refund.txt", Body=b"refund card payment days")
    kb.start_ingestion_job(KB, DS)
    kb.wait_for_jobs()

    def search(kind: str) -> list[tuple[str, float]]:
        body = {
            "retrievalQuery": {"text": "bucket refill"},
            "retrievalConfiguration": {
                "vectorSearchConfiguration": {"numberOfResults": 2, "overrideSearchType": kind}
            },
        }
        found = kb.retrieve(KB, body)["retrievalResults"]
        return [(r["location"]["s3Location"]["uri"].rsplit("/", 1)[-1], r["score"]) for r in found]

    semantic = search("SEMANTIC")
    assert [name for name, _ in semantic] == ["bucket.txt", "refund.txt"]  # cosine: every chunk, ranked
    assert semantic[0][1] > semantic[1][1] >= 0
    hybrid = search("HYBRID")
    # RRF of BM25 (bucket.txt alone matches) and cosine: bucket.txt first, 1/61 + 1/61.
    assert hybrid[0] == ("bucket.txt", pytest.approx(2 / 61))
    assert hybrid[1] == ("refund.txt", pytest.approx(1 / 62))
    kb.specs[KB].storage = "S3_VECTORS"  # no lexical side: HYBRID is answered as SEMANTIC
    assert search("HYBRID") == semantic
