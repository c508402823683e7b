"""The Knowledge Base's own ingestion logs (APPLICATION_LOGS, delivered by the stack to a log group): what a
failed document's events look like, and the CloudWatch Logs Insights query that shows each one's reason.

Per AWS's "Monitor knowledge bases using CloudWatch Logs": a document's events have ``event_type``
``StartIngestionJob.ResourceStatusChanged`` and, under ``event``, ``ingestion_job_id``,
``document_location.s3_location.uri``, ``status`` and ``status_reasons`` (a list). A failing stage logs
``EMBEDDING_FAILED``, ``INDEXING_FAILED``, ``DELETION_FAILED`` or ``METADATA_UPDATE_FAILED`` with its
reasons; the document's final status is then ``FAILED``.
"""

from __future__ import annotations

LOG_TYPE = "APPLICATION_LOGS"
DOCUMENT_EVENT = "StartIngestionJob.ResourceStatusChanged"
FINAL_FAILURE = "FAILED"


def failed_documents_query(job_id: str | None = None) -> str:
    """Each failed document of a job (of every job without one): its URI, the status and the reasons."""
    if job_id and not job_id.isalnum():  # AWS's job ids are 10 letters and digits
        raise ValueError(f"not an ingestion job id: {job_id!r}")
    job = f' and event.ingestion_job_id = "{job_id}"' if job_id else ""
    return (
        "fields @timestamp, event.document_location.s3_location.uri as document, event.status as status, "
        "event.status_reasons.0 as reason, event.status_reasons.1 as more"
        f' | filter event_type = "{DOCUMENT_EVENT}"{job} and event.status like /FAILED$/'
        " | sort @timestamp asc"
    )
