"""The token estimate that chunk sizes are decided in (``CHUNKING=structure``, the KB-style fixed-size
chunks of the local tools, ``ckb eval --chunkers``). Pure.

The embedding models' tokenizers are not public; the estimate only has to keep a chunk within what the model
takes, for any script or shape of text, without changing English and code chunks (what the codebase
benchmark measured). Calibrated against Mistral's Tekken tokenizer (``bench/tokens.py``; docs/BENCHMARKS.md,
"Chunk sizes in tokens, in every script"):

- **CJK ideographs, kana, hangul and Thai**: one token per character (written without spaces between
  words, a run of them is not one word; the tokenizers of multilingual models give about one a character);
- **long runs of letters and digits mixed** (base64, hex, hashes, minified data): one token per character
  while 20 more such characters follow and one of the next 21 is a digit (the tokenizers split them
  into pieces of one to two characters); the tail of a run falls to the rules below;
- **digits**: a number of up to three digits standing alone is one token (``0``, ``300``, ``2.5``'s ``2``);
  a longer run, or a group after a separator (``1,234,567``'s ``234``), one a digit, as multilingual
  tokenizers split digit strings (Tekken splits every digit; code's small numbers stay one token);
- **Latin-script words** (ASCII and Latin-1/Extended letters, ``_``): one token per word of up to 16
  characters, as before (a longer word counts once per 16);
- **other letters** (Cyrillic, Greek, Arabic, Hebrew, Devanagari, ...): one token per four;
- **anything else that is not white space** (punctuation, marks, symbols): one token each.

Every character that is not white space belongs to a token, so a range of white space alone counts 0.
"""

from __future__ import annotations

import re

# Scripts written without spaces, or whose tokenizers give about a token a character: hangul jamo, CJK
# radicals and symbols, kana, bopomofo, CJK extension A and unified ideographs, hangul syllables,
# compatibility ideographs, half-width katakana, Thai and Lao.
_ONE_PER_CHARACTER = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\u0e00-\u0e7f\u0e80-\u0eff"
)
_BLOB = "A-Za-z0-9+/="  # base64's alphabet (hex's too)
_LATIN = "A-Za-z_\u00c0-\u024f"
TOKEN = re.compile(
    rf"[{_BLOB}](?=[{_BLOB}]{{20}})(?=[{_BLOB}]{{0,20}}\d)"  # inside a long mixed run: a character each
    rf"|[{_ONE_PER_CHARACTER}]"
    r"|(?<![\d,.])\d{1,3}(?![\d])|\d"
    rf"|[{_LATIN}]{{1,16}}"
    rf"|[^\W\d{_LATIN}{_ONE_PER_CHARACTER}]{{1,4}}"
    r"|[^\w\s]"
)


def count_tokens(text: str, start: int = 0, end: int | None = None) -> int:
    """The estimate of ``text[start:end]``'s tokens."""
    return len(TOKEN.findall(text, start, len(text) if end is None else end))
