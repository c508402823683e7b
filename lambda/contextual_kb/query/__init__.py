"""The query side of a deployed Knowledge Base: ``retrieval`` (retrieve wide, rerank), ``answering``
(``ckb ask``'s prompt), ``ingestion`` (sync jobs), ``deployment`` (the stack's outputs), ``aws_clients``.
Imports the runtime only (the Bedrock client, the context's separator)."""
