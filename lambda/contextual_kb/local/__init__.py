"""Offline tooling: a local S3, KB-style chunking and staging, sample events. Not used by the Lambda."""
