"""Buckets: source documents (versioned), the KB's intermediate files, and access logs.

All block public access, refuse plain HTTP and are encrypted (SSE-S3, or one customer-managed KMS key). They,
their policies and the key are kept when the stack is deleted (README, "What destroy keeps").
Intermediate objects expire after ``intermediateExpirationDays``, except the remembered contexts and the
pending documents (both are read later: by re-syncs, by ``ckb contextualize``).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

# Prefixes the KB and the Lambda write under in the intermediate bucket (the contexts prefix is kept).
KB_INTERMEDIATE_PREFIX = "aws/bedrock/knowledge_bases/"
OUTPUT_PREFIX = "contextual-kb/output/"
CONTEXTS_PREFIX = "contextual-kb/contexts/"
# Batch inference inputs and outputs (ckb contextualize) expire; pending documents stay until contextualized.
BATCH_PREFIX = "contextual-kb/batch/"
# A batch run's inputs, outputs and state must outlive its jobs (ckb contextualize submits them with a 24-hour
# timeout, after time queued) and the run's resume: they expire after a week at least, whatever the setting.
BATCH_MIN_EXPIRATION_DAYS = 7
PENDING_PREFIX = "contextual-kb/pending/"


class Storage(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, kms_key: bool, expiration_days: int, source: bool = True
    ) -> None:
        """``source``: a source bucket too (not when attaching: the data source has its own)."""
        super().__init__(scope, construct_id)
        # Access logs delivered by bucket policy (no ACL: the buckets enforce bucket-owner ownership), in any
        # app: a user's app without cdk.json's recommended flags would otherwise ask for an ACL and fail.
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        self.key: kms.Key | None = (
            kms.Key(
                self,
                "Key",
                enable_key_rotation=True,
                description="contextual-kb buckets and intermediate files",
            )
            if kms_key
            else None
        )
        encryption = s3.BucketEncryption.KMS if self.key else s3.BucketEncryption.S3_MANAGED
        common = {
            "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
            "enforce_ssl": True,
            "removal_policy": RemovalPolicy.RETAIN,
        }
        # Server access logs cannot go to a KMS-encrypted bucket: SSE-S3 here, always.
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,  # log delivery by policy, no ACL
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            **common,
        )
        self._source = (
            s3.Bucket(
                self,
                "Source",
                versioned=True,
                encryption=encryption,
                encryption_key=self.key,
                bucket_key_enabled=bool(self.key),
                server_access_logs_bucket=self.access_logs,
                server_access_logs_prefix="source/",
                **common,
            )
            if source
            else None
        )
        self.intermediate = s3.Bucket(
            self,
            "Intermediate",
            encryption=encryption,
            encryption_key=self.key,
            bucket_key_enabled=bool(self.key),
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="intermediate/",
            lifecycle_rules=[
                s3.LifecycleRule(prefix=prefix, expiration=Duration.days(days))
                for prefix, days in (
                    (KB_INTERMEDIATE_PREFIX, expiration_days),
                    (OUTPUT_PREFIX, expiration_days),
                    (BATCH_PREFIX, max(expiration_days, BATCH_MIN_EXPIRATION_DAYS)),
                )
            ],
            **common,
        )
        # A kept bucket keeps its policy (TLS only; the access logs' delivery): destroy would leave the
        # buckets open to plain HTTP and stop their access logs.
        for bucket in (self.access_logs, self._source, self.intermediate):
            if bucket is not None and bucket.policy is not None:
                bucket.policy.apply_removal_policy(RemovalPolicy.RETAIN)

    @property
    def source(self) -> s3.Bucket:
        if self._source is None:
            raise AttributeError(
                "this storage has no source bucket (attach mode: the data source has its own)"
            )
        return self._source
