"""Where the codebase benchmark lies for the commands' defaults: ``../shared`` beside a clone of the repo."""

from __future__ import annotations

from pathlib import Path

DATASET = Path(__file__).resolve().parents[4] / "shared" / "datasets" / "codebase"
SHOWN_DATASET = "../shared/datasets/codebase"  # in --help, where the full path would be this machine's
