"""The codebase benchmark: where it lies on this machine, and fetching it once from its public source.

The benchmark is Anthropic's (the cookbook's contextual-embeddings guide, MIT licence). The project does not
ship it: the first command that needs it downloads the two published files at a pinned commit, checks each
against its size and sha256, and keeps them in a cache folder (``CKB_DATA_DIR``, else the platform's user
cache), with the dev split derived beside them. A file is written under a temporary name and renamed only
once whole and verified, so an interrupted or failed download leaves nothing half-written behind.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = "anthropics/anthropic-cookbook"
COMMIT = "4b36a1e1f64361397f4cbe4fbc7cdace338f16f8"
FOLDER = "skills/contextual-embeddings/data"
LICENCE = "MIT licence, Copyright (c) 2023 Anthropic"
SOURCE = f"github.com/{REPOSITORY} at {COMMIT[:7]}, {FOLDER}"
BASE_URL = f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}/{FOLDER}"
BASE_URL_VARIABLE = "CKB_DATASET_URL"  # another copy of the same files (a mirror; the tests' local server)
DATA_DIR_VARIABLE = "CKB_DATA_DIR"

CORPUS = "codebase_chunks.json"
QUERIES = "evaluation_set.jsonl"  # the published query set: 248 queries
DEV_QUERIES = "evaluation_dev.jsonl"  # its dev split: the 1st, 3rd, 5th... lines (124 queries)


@dataclass(frozen=True)
class Published:
    name: str
    size: int
    sha256: str


FILES = (
    Published(CORPUS, 1_126_046, "70dbed1cb8a90a107b23742b1537051346860f841ec8b03734c1298fa4a34d46"),
    Published(QUERIES, 3_571_229, "7186e2bed15547a2ed178134876b29e4abb206bf0394facbe61d58bf835ee073"),
)
TIMEOUT_S = 30.0  # per connection and read: a network that answers nothing ends in one line, not a hang
_BLOCK = 1 << 16


class DatasetUnavailableError(Exception):
    """The benchmark is not here and could not be fetched: ``what`` failed; the message is one line that says
    what to do."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(_unavailable(what))


def data_dir() -> Path:
    """The cache folder: ``CKB_DATA_DIR``, else the platform's user cache (``~/.cache/contextual-kb``...)."""
    given = os.environ.get(DATA_DIR_VARIABLE, "").strip()
    if given:
        return Path(given).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("contextual-kb", appauthor=False))


def codebase_dir() -> Path:
    """Where the codebase benchmark lies (or will, once fetched): ``<data dir>/codebase``."""
    return data_dir() / "codebase"


def dev_split(published: bytes) -> bytes:
    """The dev split of the published query set: its odd-numbered lines (1st, 3rd...). Pure.

    The held-out half (the even-numbered lines) is left for checking figures tuned on this one.
    """
    lines = [line for line in published.split(b"\n") if line.strip()]
    return b"".join(line + b"\n" for line in lines[::2])


def locate(folder: Path) -> tuple[Path, Path] | None:
    """(corpus, dev queries) in ``folder`` when both are there, else None. A folder with the published query
    set but no dev split gets the split derived (written beside it), so ``--dataset`` takes either."""
    corpus, dev, published = folder / CORPUS, folder / DEV_QUERIES, folder / QUERIES
    if corpus.is_file() and not dev.is_file() and published.is_file():
        _write_whole(dev, dev_split(published.read_bytes()))
    return (corpus, dev) if corpus.is_file() and dev.is_file() else None


def ensure_codebase(progress: Callable[[str], None] | None = None) -> tuple[Path, Path]:
    """(corpus, dev queries) of the codebase benchmark, fetched into the cache on first use.

    Raises DatasetUnavailableError (one line: what failed, and how to point ``--dataset`` at a copy).
    """
    folder = codebase_dir()
    found = locate(folder)
    if found is not None:
        return found
    base = os.environ.get(BASE_URL_VARIABLE, "").strip().rstrip("/") or BASE_URL
    missing = [file for file in FILES if not (folder / file.name).is_file()]
    if progress is not None:
        megabytes = sum(file.size for file in missing) / 1e6
        progress(
            f"Fetching the codebase benchmark once ({megabytes:.1f} MB): Anthropic's, {SOURCE} ({LICENCE}), "
            f"into {folder}"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetUnavailableError(f"cannot create {folder}: {exc.strerror or exc}") from None
    for file in missing:
        _write_whole(folder / file.name, _download(f"{base}/{file.name}", file))
    (folder / "SOURCE.txt").write_text(
        f"Anthropic's codebase retrieval benchmark, {LICENCE}.\nFetched from {base}/ ({SOURCE}).\n"
        f"{DEV_QUERIES} is the 1st, 3rd, 5th... lines of {QUERIES} (the dev split).\n"
    )
    found = locate(folder)
    assert found is not None  # both files were just written whole
    return found


def _download(url: str, file: Published) -> bytes:
    """The file's bytes, checked against its published size and sha256; DatasetUnavailableError else."""
    request = urllib.request.Request(url, headers={"User-Agent": "contextual-kb"})
    digest, parts, received = hashlib.sha256(), [], 0
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            while block := response.read(_BLOCK):
                received += len(block)
                if received > file.size:
                    raise DatasetUnavailableError(f"{url}: more than the published {file.size:,} bytes")
                digest.update(block)
                parts.append(block)
    except urllib.error.HTTPError as exc:
        raise DatasetUnavailableError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise DatasetUnavailableError(f"{url}: {exc.reason}") from None
    except (http.client.HTTPException, OSError) as exc:  # a connection cut mid-file, a read timing out
        what = type(exc).__name__ if not str(exc) else str(exc)
        raise DatasetUnavailableError(f"{url}: {what} after {received:,} bytes") from None
    if received != file.size:
        raise DatasetUnavailableError(f"{url}: truncated, {received:,} of {file.size:,} bytes")
    if digest.hexdigest() != file.sha256:
        raise DatasetUnavailableError(
            f"{url}: sha256 {digest.hexdigest()[:12]}... is not the published {file.sha256[:12]}..."
        )
    return b"".join(parts)


def _write_whole(path: Path, data: bytes) -> None:
    """Write under a temporary name in the same folder, then rename: never a half-written file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _unavailable(what: str) -> str:
    return (
        f"could not fetch the codebase benchmark ({what}); no partial file was kept. Download {CORPUS} and "
        f"{QUERIES} from {SOURCE} into a folder and pass --dataset FOLDER (or set {DATA_DIR_VARIABLE} to a "
        "folder holding codebase/)"
    )
