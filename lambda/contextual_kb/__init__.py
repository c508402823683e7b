"""Contextual retrieval for Amazon Bedrock Knowledge Bases.

Six parts; each imports only what its line names (``tests/unit/test_architecture.py``, docs/ARCHITECTURE.md):

- ``runtime``: what the transformation Lambda runs (entry point
  ``contextual_kb.runtime.handler.lambda_handler``): nothing else of the package; the function's asset
  holds this part alone;
- ``resources``: the stack's custom resources (the vector index, attaching a data source): nothing else;
- ``query``: the deployed Knowledge Base's side (retrieve and rerank, answers, ingestion jobs, the stack):
  the runtime;
- ``local``: offline tooling (the Bedrock stand-in, a local S3, KB-style staging, the fault harness): the
  runtime;
- ``evaluation``: retrieval metrics, lexical analysis, offline and deployed runs: runtime, query, local;
- ``cli``: the ``ckb`` command line: any part.
"""


def __getattr__(name: str) -> str:
    """``__version__``: the installed distribution's (pyproject.toml's), so the two cannot disagree; looked up
    on first use, not at import (the function's cold start imports this package and never asks)."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("contextual-kb")
    except PackageNotFoundError:  # the source tree on PYTHONPATH, not installed (the function's asset)
        return "0+unknown"
