"""The Logs Insights query of failed documents in the Knowledge Base's own logs (AWS's "Monitor knowledge
bases using CloudWatch Logs": a document's events, their status and reasons)."""

from __future__ import annotations

import pytest

from contextual_kb.query.ingestion_logs import failed_documents_query


def test_the_query_names_each_failed_documents_uri_status_and_reasons() -> None:
    query = failed_documents_query()
    assert query.startswith("fields @timestamp, event.document_location.s3_location.uri as document, ")
    assert "event.status_reasons.0 as reason" in query
    # every failing stage (EMBEDDING_FAILED, INDEXING_FAILED, ...) and the final FAILED, of documents only
    assert (
        'filter event_type = "StartIngestionJob.ResourceStatusChanged" and event.status like /FAILED$/'
        in query
    )
    assert "ingestion_job_id" not in query


def test_a_job_narrows_it_to_that_job() -> None:
    assert ' and event.ingestion_job_id = "JOB1234567" and ' in failed_documents_query("JOB1234567")


@pytest.mark.parametrize("job_id", ['JOB" or 1=1', "JOB 1", "", "JOB|fields"])
def test_a_job_id_that_is_not_awss_is_refused_not_spliced_into_the_query(job_id: str) -> None:
    if job_id == "":  # no job: every job's failures
        assert "ingestion_job_id" not in failed_documents_query(job_id)
        return
    with pytest.raises(ValueError, match="not an ingestion job id"):
        failed_documents_query(job_id)
