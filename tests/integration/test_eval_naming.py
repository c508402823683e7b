"""One name for an evaluation document on both paths: ``ckb eval --local`` stages each document under the key
``ckb eval --stack`` uploads it as, so the handler reads the same path in both (the structural context
writes it into every chunk's context). Names that would merge two documents are refused, never merged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.evaluation.deployed import upload_corpus
from contextual_kb.evaluation.offline import BUCKET, contextualized_bodies, load_corpus, stage_corpus
from contextual_kb.local.inputs import InputFileError


def doc(text: str, uuid: str, doc_id: str | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "original_uuid": uuid,
        "content": text,
        "chunks": [{"original_index": 0, "content": text}],
    }
    return document | ({"doc_id": doc_id} if doc_id is not None else {})


ODD = [
    doc("# Plain\n\nplain words", "u0", "doc00"),
    doc("# Nested\n\nnested words", "u1", "src/lib/a b+c.py"),
    doc("# Unicode\n\nunicode words", "u2", "文件/café ü.md"),
    doc("# No id\n\nno id words", "u3-uuid"),  # the codebase corpus's shape without doc_id: the uuid names it
    doc("# Empty id\n\nempty id words", "u4-uuid", ""),
]


def test_both_paths_give_each_document_the_same_key() -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        for bucket in (BUCKET, "source"):
            s3.create_bucket(Bucket=bucket)
        staged = stage_corpus(s3, BUCKET, ODD)
        assert upload_corpus(s3, "source", ODD) == len(ODD)
        uploaded = [o["Key"] for o in s3.list_objects_v2(Bucket="source")["Contents"]]
    keys = [f.source_uri.removeprefix("s3://").split("/", 1)[1] for f in staged]
    assert sorted(keys) == sorted(uploaded)
    assert keys == [
        "ckb-eval/doc00.txt",
        "ckb-eval/src_lib_a b+c.py.txt",
        "ckb-eval/文件_café ü.md.txt",
        "ckb-eval/u3-uuid.txt",
        "ckb-eval/u4-uuid.txt",
    ]


def test_eval_local_contexts_name_the_uploaded_key() -> None:
    bodies, _ = contextualized_bodies(ODD, "structural")
    assert bodies[("u0", 0)].startswith("Document ckb-eval/doc00.txt: Plain\n")
    assert bodies[("u2", 0)].startswith("Document ckb-eval/文件_café ü.md.txt: Unicode\n")
    assert bodies[("u3-uuid", 0)].startswith("Document ckb-eval/u3-uuid.txt: No id\n")


def test_documents_whose_batch_keys_would_match_stay_apart() -> None:
    """``café`` and ``cafè`` (and ``a b``, ``a+b``) are different keys; the staged batch objects' names keep
    only [A-Za-z0-9._-], which must not make one document's batches overwrite the other's."""
    documents = [
        doc("# First\n\nalpha bravo", "u0", "café"),
        doc("# Second\n\ncharlie delta", "u1", "cafè"),
        doc("# Third\n\necho foxtrot", "u2", "a b"),
        doc("# Fourth\n\ngolf hotel", "u3", "a+b"),
    ]
    bodies, _ = contextualized_bodies(documents, "structural")
    for document in documents:
        body = bodies[(document["original_uuid"], 0)]
        assert body.endswith(document["content"]), (document["doc_id"], body)


COLLIDING = [doc("one", "u0", "a/b"), doc("two", "u1", "a_b")]


def test_names_that_would_merge_two_documents_are_refused(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(COLLIDING))
    expected = r"'a/b' and 'a_b' would both be ckb-eval/a_b\.txt"
    with pytest.raises(InputFileError, match=expected):
        load_corpus(corpus)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="source")
        with pytest.raises(ValueError, match=expected):
            upload_corpus(s3, "source", COLLIDING)
        assert s3.list_objects_v2(Bucket="source")["KeyCount"] == 0  # refused before anything is put
        s3.create_bucket(Bucket=BUCKET)
        with pytest.raises(ValueError, match=expected):
            stage_corpus(s3, BUCKET, COLLIDING)


@pytest.mark.parametrize("where", ["--local", "--stack"])
def test_ckb_eval_says_which_names_collide_in_one_line(where: str, tmp_path: Path) -> None:
    corpus, queries = tmp_path / "corpus.json", tmp_path / "queries.jsonl"
    corpus.write_text(json.dumps(COLLIDING))
    queries.write_text(json.dumps({"query": "one", "golden_chunk_uuids": [["u0", 0]]}))
    args = ["eval", "--corpus", str(corpus), "--queries", str(queries), "--yes"]
    result = CliRunner().invoke(app, [*args, "--local"] if where == "--local" else [*args, "--stack", "X"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {corpus}: documents 'a/b' and 'a_b' would both be ckb-eval/a_b.txt"), line


def test_a_name_too_long_for_s3_is_refused_on_both_paths(tmp_path: Path) -> None:
    """S3 keys hold at most 1,024 bytes: eval --stack could not upload it, so eval --local refuses it too."""
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([doc("one", "u0", "é" * 510)]))  # 1,020 bytes, 1,033 with the prefix
    with pytest.raises(InputFileError, match=r"1,033 bytes as an S3 key \(at most 1,024\)"):
        load_corpus(corpus)


def test_the_chunker_comparison_names_documents_alike() -> None:
    """``ckb eval --local --chunkers``: both chunkers' structural contexts name the key --stack uploads."""
    from contextual_kb.evaluation.chunkers import chunk_by_structure, chunk_fixed

    for chunked in (
        chunk_by_structure(ODD, max_tokens=300, overlap_tokens=0),
        chunk_fixed(ODD, max_tokens=300),
    ):
        firsts = [chunked.bodies[[s[0] for s in chunked.spans].index(d["original_uuid"])] for d in ODD]
        assert firsts[1].startswith("Document ckb-eval/src_lib_a b+c.py.txt: Nested\n"), firsts[1]
        assert firsts[3].startswith("Document ckb-eval/u3-uuid.txt: No id\n"), firsts[3]
