"""A real multilingual tokenizer to check the chunk-size estimate against (``runtime/tokens.py``): Mistral's
Tekken, from ``mistral-common`` (PyPI, a development dependency), whose vocabulary ships in the package.

Why it stands in for the embedding models' tokenizers (Titan's and Cohere's are not published): it is a
byte-level BPE of 131,072 tokens trained on more than 100 languages, the kind of tokenizer multilingual
embedding models use; it gives about one token per CJK character and splits digits one by one and base64 or
hex into pieces of one or two characters, so it counts those shapes at least as high as a smaller or
English-centred vocabulary would for common text. ``Tekken`` loads once (about a second).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

TEKKEN_FILE = "tekken_240911.json"


@functools.cache
def _tekken() -> Any:
    try:
        import mistral_common
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    except ImportError as exc:  # pragma: no cover - a development dependency
        raise RuntimeError("the reference tokenizer needs mistral-common (pip install -e '.[dev]')") from exc
    return Tekkenizer.from_file(str(Path(mistral_common.__file__).parent / "data" / TEKKEN_FILE))


def reference_tokens(text: str) -> int:
    """Tekken's token count of ``text`` (no special tokens)."""
    return len(_tekken().encode(text, bos=False, eos=False))
