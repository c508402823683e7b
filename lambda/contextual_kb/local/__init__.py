"""Offline tooling, never in the Lambda: the Bedrock stand-in, a local S3 (moto), KB-style chunking and
staging, running the real handler outside Lambda, sample events and corpora, the fault harness."""
