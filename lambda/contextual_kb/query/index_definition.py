"""The OpenSearch Serverless vector index the Knowledge Base writes to: defined once, here.

The stack hands this body to the custom resource that creates the index (``cdk/vector_store.py``), and
``ckb eval``'s ``index`` analysis is built from the same definition (``evaluation/lexical.py``,
``analyzer_from``), so the offline preview cannot drift from what is deployed.

The text field's analysis is ours, in full (``AWS::OpenSearchServerless::Index`` takes analyzers by built-in
name only): the standard tokenizer; ``word_delimiter_graph`` keeping the original token (``DiffExecutor`` is
indexed whole and as ``Diff`` ``Executor``; ``max_tokens`` whole and as ``max`` ``tokens``), then
``flatten_graph`` (a graph filter in an index analyzer); lowercase; our 127-word English stop list (Lucene's
33 words leave "what", "how", "does"); Snowball's English stemmer. Measured: docs/BENCHMARKS.md.

The index name carries a hash of the body: a change of analysis (create-only in OpenSearch) is a new index
under a new name, never a collision with the old one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

VECTOR_FIELD = "bedrock-knowledge-base-default-vector"
TEXT_FIELD = "AMAZON_BEDROCK_TEXT_CHUNK"
METADATA_FIELD = "AMAZON_BEDROCK_METADATA"
TEXT_ANALYZER = "contextual_kb"
INDEX_PREFIX = "contextual-kb"

# A common English stop list (NLTK's, 127 words). Lucene's 33-word `_english_` set leaves question words
# ("what", "how", "does") that dominate short queries: measured on the codebase benchmark, raw chunks
# 87.6 -> 89.2 Pass@10 with this list (docs/BENCHMARKS.md).
ENGLISH_STOP_WORDS = frozenset(
    "a about above after again against all am an and any are as at be because been before being below "
    "between both but by can did do does doing down during each few for from further had has have having "
    "he her here hers herself him himself his how i if in into is it its itself just me more most my myself "
    "no nor not now of off on once only or other our ours ourselves out over own same she should so some "
    "such than that the their theirs them themselves then there these they this those through to too under "
    "until up very was we were what when where which while who whom why will with you your yours yourself "
    "yourselves".split()
)

ANALYSIS: dict[str, Any] = {
    "filter": {
        "ckb_word_delimiter": {
            "type": "word_delimiter_graph",
            "preserve_original": True,
            "split_on_case_change": True,
            "split_on_numerics": True,
            "stem_english_possessive": True,
        },
        "ckb_stop": {"type": "stop", "stopwords": sorted(ENGLISH_STOP_WORDS)},
        "ckb_stemmer": {"type": "snowball", "language": "English"},
    },
    "analyzer": {
        TEXT_ANALYZER: {
            "type": "custom",
            "tokenizer": "standard",
            "filter": ["ckb_word_delimiter", "flatten_graph", "lowercase", "ckb_stop", "ckb_stemmer"],
        }
    },
}


def index_body(dimension: int) -> dict[str, Any]:
    """Settings and mappings: what Bedrock needs (a faiss HNSW vector field of the embedding's dimension, the
    chunk's text, non-indexed metadata) and our analysis on the text."""
    return {
        "settings": {"index": {"knn": True, "knn.algo_param.ef_search": 512}, "analysis": ANALYSIS},
        "mappings": {
            "properties": {
                VECTOR_FIELD: {
                    "type": "knn_vector",
                    "dimension": dimension,
                    "method": {"name": "hnsw", "engine": "faiss", "space_type": "l2"},
                },
                TEXT_FIELD: {"type": "text", "index": True, "analyzer": TEXT_ANALYZER},
                METADATA_FIELD: {"type": "text", "index": False},
            }
        },
    }


def index_name(body: dict[str, Any]) -> str:
    """``contextual-kb-`` and 10 hex digits of the body's hash (lowercase, as index names must be)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return f"{INDEX_PREFIX}-{hashlib.sha256(canonical.encode()).hexdigest()[:10]}"
