"""The chunk-size token estimate (runtime/tokens.py) against a real multilingual tokenizer (Tekken,
evaluation/tokenizer.py), by script and shape: the ratio real / estimate over whole texts, and the worst
ratio over windows of 300 estimated tokens (what a chunk is); then the chunks of CHUNKING=structure at 300
tokens, measured by the real tokenizer. Before: the estimate this replaced (``\\w{1,16}|[^\\w\\s]``).

    .venv/bin/python bench/tokens.py [--json out.json]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # the test's sentences: one sample, not two

BEFORE = re.compile(r"\w{1,16}|[^\w\s]")
WINDOW = 300


def samples() -> dict[str, str]:
    from corpus import DEFAULT_DATASET, load_documents  # bench/corpus.py
    from test_token_estimate import JOINERS, SENTENCES

    rng = random.Random(7)
    out = {}
    for name, sentences in SENTENCES.items():
        parts = [rng.choice(sentences) for _ in range(400)]
        out[name] = JOINERS[name].join(parts)
    documents = load_documents(DEFAULT_DATASET)
    out["code (codebase corpus)"] = "\n".join(d["content"] for d in documents)
    out["prose (this repository's docs)"] = "\n".join(
        (ROOT / p).read_text() for p in ("README.md", "docs/BENCHMARKS.md", "docs/SECURITY.md")
    )
    out["base64"] = base64.b64encode(rng.randbytes(30_000)).decode()
    out["hex"] = rng.randbytes(20_000).hex()
    out["numbers (a table)"] = "\n".join(
        " | ".join(f"{rng.randint(0, 10 ** rng.randint(1, 9)):,}" for _ in range(6)) for _ in range(400)
    )
    out["russian"] = " ".join(
        ["Поиск с дополненной генерацией уменьшает количество ошибок при извлечении документов."] * 200
    )
    return out


def measure(name: str, text: str) -> dict[str, Any]:
    from contextual_kb.evaluation.tokenizer import reference_tokens
    from contextual_kb.runtime.chunking import chunk_document
    from contextual_kb.runtime.tokens import TOKEN, count_tokens

    real = reference_tokens(text)
    estimate = count_tokens(text)
    starts = [m.start() for m in TOKEN.finditer(text)]
    windows = [
        reference_tokens(text[starts[i] : starts[i + WINDOW] if i + WINDOW < len(starts) else len(text)])
        / min(WINDOW, len(starts) - i)
        for i in range(0, len(starts), WINDOW)
    ]
    chunks = chunk_document(text, max_tokens=WINDOW).chunks
    chunk_tokens = [reference_tokens(text[c.start : c.end]) for c in chunks]
    return {
        "text": name,
        "characters": len(text),
        "real_tokens": real,
        "real_per_estimate": round(real / estimate, 3),
        "real_per_estimate_before": round(real / max(1, len(BEFORE.findall(text))), 3),
        "worst_window": round(max(windows), 3),
        "chunks_at_300": len(chunks),
        "largest_chunk_real_tokens": max(chunk_tokens),
        "largest_chunk_vs_300": round(max(chunk_tokens) / WINDOW, 3),
        "estimate_per_before": round(estimate / max(1, len(BEFORE.findall(text))), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [measure(name, text) for name, text in samples().items()]
    print(
        "| text | real / estimate (before) | worst window of 300 | largest chunk at 300, real tokens | "
        "estimate / before |\n|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['text']} | {r['real_per_estimate']} ({r['real_per_estimate_before']}) | "
            f"{r['worst_window']} | {r['largest_chunk_real_tokens']} ({r['largest_chunk_vs_300']}x) | "
            f"{r['estimate_per_before']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
