"""Measuring retrieval: ``metrics`` (Pass@k, Recall@k, MRR, paired differences), ``lexical`` (BM25
analysis), ``offline`` (``ckb eval --local``: the real handler, then BM25 or dense), ``deployed`` (against
the deployed Knowledge Base), ``dense`` (MiniLM, an optional extra)."""
