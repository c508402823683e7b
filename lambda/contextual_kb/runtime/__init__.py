"""The transformation runtime: everything the Lambda runs, and nothing else (the function's asset is this
package). Imports nothing of ``contextual_kb`` outside it.

``handler`` (entry point) -> ``models`` (the KB's contract) -> ``transform`` (validate, rebuild documents
with ``documents``, get contexts from a ``context`` strategy, put them on chunks with ``enrichment``, write
with ``outputs`` and ``storage``), within ``deadline`` and ``budget``; ``settings``, ``errors`` and
``observability`` serve them all.
"""
