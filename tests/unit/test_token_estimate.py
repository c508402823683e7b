"""Chunk sizes in the embedding model's tokens, in every script (runtime/tokens.py): every chunk of
CHUNKING=structure stays within 1.5x CHUNK_MAX_TOKENS by a real multilingual tokenizer (Tekken,
evaluation/tokenizer.py) for English, code, Chinese, Japanese, Korean, Thai, base64 and hex, every character
still covered in order; Chinese is cut after its sentence ends; time stays linear."""

from __future__ import annotations

import base64
import itertools
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextual_kb.evaluation.tokenizer import reference_tokens
from contextual_kb.runtime.chunking import chunk_document
from contextual_kb.runtime.tokens import count_tokens

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1.5

SENTENCES = {
    "english": [
        "The transformation rebuilds each document from the chunks the Knowledge Base hands it.",
        "Retrieval fails less often when every chunk carries a short context about its place.",
        "Internationalization and localization are usually abbreviated as i18n and l10n.",
        "A throttled call waits its turn and is asked again; nothing is lost on the way.",
        "Quarterly revenue rose to 1,234,567 dollars, up 12.5% on the year before.",
    ],
    "chinese": [
        "检索增强生成需要为每个片段提供上下文，否则检索往往会失败。",
        "我们在嵌入之前为每个片段添加简短的上下文说明，并保留原文。",
        "该函数从知识库交给它的片段中重建每个完整的文档！",
        "如果模型被限流，调用会等待并重新尝试，不会丢失任何内容。",
        "本合同自双方签字之日起生效，有效期为三年？",
    ],
    "japanese": [
        "検索拡張生成では、各チャンクに短い文脈を付け加えると検索の失敗が減ります。",
        "この関数は、ナレッジベースから渡されたチャンクから文書全体を組み立て直します。",
        "モデルが制限された場合、呼び出しは順番を待ってから再試行されます！",
        "カタカナとひらがなと漢字を含む文章を正しく区切る必要があります。",
        "契約は両当事者が署名した日から三年間有効です？",
    ],
    "korean": [
        "검색 증강 생성은 각 청크에 짧은 문맥을 추가하여 검색 실패를 줄입니다.",
        "이 함수는 지식 기반이 넘겨준 청크로부터 전체 문서를 다시 만듭니다.",
        "모델이 제한되면 호출은 차례를 기다렸다가 다시 시도됩니다.",
        "계약은 양 당사자가 서명한 날부터 삼 년 동안 유효합니다.",
    ],
    "thai": [
        "การค้นคืนข้อมูลแบบเสริมด้วยการสร้างช่วยลดความล้มเหลวในการค้นหา",
        "ฟังก์ชันนี้สร้างเอกสารทั้งฉบับขึ้นใหม่จากชิ้นส่วนที่ฐานความรู้ส่งมา",
        "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำจึงต้องตัดอย่างระมัดระวัง",
        "สัญญานี้มีผลบังคับใช้เป็นเวลาสามปีนับจากวันที่ลงนาม",
    ],
}
JOINERS = {"english": " ", "chinese": "", "japanese": "", "korean": " ", "thai": " "}
CODE_FILES = sorted((ROOT / "lambda" / "contextual_kb" / "runtime").rglob("*.py"))


@st.composite
def document(draw: st.DrawFn) -> tuple[str, str]:
    shape = draw(st.sampled_from([*SENTENCES, "code", "base64", "hex", "mixed"]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    size = draw(st.integers(2_000, 30_000))
    if shape in SENTENCES:
        parts: list[str] = []
        while sum(map(len, parts)) < size:
            parts.append(rng.choice(SENTENCES[shape]))
            if rng.random() < 0.15:
                parts.append("\n\n")
        return shape, JOINERS[shape].join(parts)
    if shape == "code":
        text = rng.choice(CODE_FILES).read_text()
        return shape, (text * (1 + size // max(1, len(text))))[:size]
    if shape == "base64":
        return shape, base64.b64encode(rng.randbytes(size * 3 // 4)).decode()
    if shape == "hex":
        return shape, rng.randbytes(size // 2).hex()
    pieces = [rng.choice(SENTENCES[rng.choice(list(SENTENCES))]) for _ in range(size // 40)]
    pieces += [rng.randbytes(30).hex(), base64.b64encode(rng.randbytes(60)).decode()]
    rng.shuffle(pieces)
    return shape, " ".join(pieces)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=document(), max_tokens=st.sampled_from([64, 128, 300, 512]))
def test_every_chunk_is_within_one_and_a_half_times_the_size_by_a_real_tokenizer(
    case: tuple[str, str], max_tokens: int
) -> None:
    shape, text = case
    chunks = chunk_document(text, max_tokens=max_tokens).chunks
    assert "".join(text[c.start : c.end] for c in chunks) == text  # every character, in order
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    worst = max(reference_tokens(text[c.start : c.end]) for c in chunks)
    assert worst <= LIMIT * max_tokens, f"{shape}: a chunk of {worst} tokens for {max_tokens}"


def test_chinese_is_cut_after_its_sentence_ends() -> None:
    text = "".join(SENTENCES["chinese"] * 40)
    chunks = chunk_document(text, max_tokens=100).chunks
    assert len(chunks) > 5
    assert all(text[c.end - 1] in "。！？" for c in chunks[:-1])


def test_a_long_chinese_run_without_punctuation_is_cut_near_the_size() -> None:
    """The issue's case: 173,000 characters came back in chunks of up to 2,828 characters for 300 tokens."""
    text = "检索增强生成需要为每个片段提供上下文否则检索往往会失败" * 6000
    chunks = chunk_document(text, max_tokens=300).chunks
    assert max(c.end - c.start for c in chunks) <= 300
    assert max(reference_tokens(text[c.start : c.end]) for c in chunks[:20]) <= LIMIT * 300


def test_the_estimate_keeps_english_and_code_as_they_were() -> None:
    """Ordinary words count as before (one a word of up to 16 characters): English and code chunks keep
    their size within 10%."""
    import re

    before = re.compile(r"\w{1,16}|[^\w\s]")
    prose = " ".join(SENTENCES["english"][:4] * 50)
    code = "".join(path.read_text() for path in CODE_FILES[:20])
    for text in (prose, code):
        assert 1.0 <= count_tokens(text) / len(before.findall(text)) <= 1.10


@pytest.mark.parametrize("megabytes", [1])
def test_time_stays_linear_in_chinese(megabytes: int) -> None:
    sentence = "".join(SENTENCES["chinese"])
    small = (sentence * (1 + (megabytes << 20) // (3 * len(sentence))))[: (megabytes << 20) // 3]
    large = small * 4
    # CPU time, the sizes in turn, best of three each: a busy machine falls on both (see the structural
    # pass's linearity test in tests/load). 8x: the log-scale midpoint of linear (4x) and quadratic (16x).
    best = [float("inf"), float("inf")]
    for _ in range(3):
        for index, text in enumerate((small, large)):
            started = time.process_time()
            chunk_document(text, max_tokens=300)
            best[index] = min(best[index], time.process_time() - started)
    assert best[1] < 8 * best[0], f"1 MB: {best[0]:.2f} s, 4 MB: {best[1]:.2f} s"


# Python with many short typed fields and literals: ``: str = ""`` and ``100_000`` are more tokens to Tekken
# than the estimate says (a known gap of runtime/tokens.py, found by the property test above on
# runtime/pending.py cut at 2,000 characters): 102 tokens for an estimate of 64.
DENSE_FIELDS = (
    '    model_id: str\n    instruction: str = ""\n    glossary: str = ""\n'
    "    context_max_tokens: int = 160\n    context_max_chars: int = 800\n"
    "    max_document_tokens: int = 100_000\n    window_tokens: int = 16_000\n"
    "    opening_tokens: int = 2000\n\n\nclass PendingDocument(BaseModel):\n"
    "    model_config = ConfigDict(frozen=True)\n\n"
)


@pytest.mark.xfail(strict=True, reason="known gap: dense typed fields are underestimated (1.6x at 64 tokens)")
def test_dense_typed_fields_are_within_one_and_a_half_times() -> None:
    assert count_tokens(DENSE_FIELDS) <= 64
    assert reference_tokens(DENSE_FIELDS) <= LIMIT * count_tokens(DENSE_FIELDS)
