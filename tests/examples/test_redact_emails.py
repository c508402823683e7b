"""examples/redact_emails: addresses redacted before the model sees them, then Claude's contexts (the
Bedrock stand-in), through the real handler path (moto's S3) with the contract cases of events/."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextual_kb.local.bedrock_standin import BedrockStandIn
from contextual_kb.local.lambda_context import LocalLambdaContext
from contextual_kb.runtime import handler as own
from contextual_kb.runtime.errors import ContractError
from tests.conftest import output_lines
from tests.examples import load
from tests.integration.test_claude import big_chunks, outputs, paragraphs
from tests.integration.test_claude import stage as stage_documents
from tests.integration.test_handler import GOOD_SAMPLES, read, stage
from tests.support import outputs_in

example = load("redact_emails")

ADDRESSES = ["ana.lopez@example.com", "ops+pager@payments.example.co.uk", "x_y@sub-1.example.org"]
# What must never reach the model or the store: each address, and both halves of the one cut in two.
SECRETS = [*ADDRESSES, "ops@exam", "ops@example.com", "@example"]


def ledger_with_addresses() -> list[str]:
    """A document long enough to be cached, its addresses in several batches, one cut by the chunker."""
    chunks = big_chunks(8)
    chunks[0] = f"Escalate to {ADDRESSES[0]} first. " + chunks[0]
    chunks[3] += f" Billing questions: {ADDRESSES[1]}."
    chunks[4] += " The on-call address is ops@exam"  # the chunker cut the address here ...
    chunks[5] = "ple.com for the payments team. " + chunks[5]  # ... and the next chunk goes on
    chunks[7] = f"{ADDRESSES[2]}, " + chunks[7]
    return chunks


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail ana.lopez@example.com now", "mail [email] now"),
        ("<a@b.io>, c.d@e-f.example.org.", "<[email]>, [email]."),
        ("no address @here or user@localhost", "no address @here or user@localhost"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert example.redact(text) == expected


@pytest.mark.parametrize(
    ("left", "right", "cut"),
    [
        ("call ops@exam", "ple.com now", True),
        ("call ops@", "example.com now", True),
        ("call ops", "@example.com now", True),
        ("call ops@example.com", "now", False),
        ("class A:", "@dataclass", False),
        ("@dataclass", "class B:", False),
        ("ask @ana", "today", False),
    ],
)
def test_an_address_cut_by_the_chunker_is_found(left: str, right: str, cut: bool) -> None:
    assert example.cut_address(left, right) is cut


def test_no_address_reaches_the_model_or_the_store_and_every_chunk_gets_claudes_context(
    s3: Any, standin: BedrockStandIn, captured: pytest.CaptureFixture[str]
) -> None:
    event, _ = stage_documents(s3, {"ledger.md": ledger_with_addresses(), "notes.md": paragraphs("notes", 4)})
    captured.readouterr()
    response = example.handler(event, LocalLambdaContext())
    shown = json.dumps(standin.seen)
    assert standin.seen and not [s for s in SECRETS if s in shown]
    assert shown.count("[email]") > 0
    ledger, notes = outputs(s3, response)
    assert len(ledger) == 8 and len(notes) == 4  # every chunk back, in its batch, in order
    for item in ledger + notes:
        assert not [s for s in SECRETS if s in json.dumps(item)]
        assert item["contentMetadata"]["ckb_context"].startswith("This chunk is from")  # Claude's (stand-in)
        assert item["contentBody"].startswith(item["contentMetadata"]["ckb_context"] + "\n\n")
    original = ledger_with_addresses()
    expected = list(original)
    expected[0] = original[0].replace(ADDRESSES[0], "[email]")
    expected[3] = original[3].replace(ADDRESSES[1], "[email]")
    expected[4] = original[4].replace("ops@exam", "[email]")
    expected[5] = original[5].replace("ple.com", "[email]", 1)
    expected[7] = original[7].replace(ADDRESSES[2], "[email]")
    # Exactly the addresses, and the two parts of the cut one; every other chunk as it came, unmarked.
    assert [i["contentBody"].partition("\n\n")[2] for i in ledger] == expected
    assert [i["contentMetadata"].get("emails_redacted") for i in ledger] == [1, None, None, 1, 1, 1, None, 1]
    # One cache write for the long document, read by its other calls; the short one is not cacheable.
    assert standin.stats.cache_writes == 1 and standin.stats.as_dict()["max_writes_per_prefix"] == 1
    (emf,) = [line for line in output_lines(captured) if "_aws" in line and "ChunksIn" in line]
    assert emf["ChunksRewritten"] == [5.0] and emf["ChunksIn"] == emf["ChunksOut"] == [12.0]
    assert emf["CacheWrites"] == [1.0]


@pytest.mark.parametrize("name", [*GOOD_SAMPLES, "whole-documents-structure"])
def test_a_document_without_addresses_gets_what_the_function_itself_gives(
    s3: Any, standin: BedrockStandIn, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The contract cases (events/): none holds an address, so the example's output is the function's own
    with Claude's contexts, object for object."""
    if name == "whole-documents-structure":
        monkeypatch.setenv("CHUNKING", "structure")
        name = "whole-documents"
    monkeypatch.setenv("CONTEXT_MEMORY_PREFIX", "")  # each run asks the model: both are compared
    raw = stage(s3, name)
    reference = own.lambda_handler(raw, LocalLambdaContext())
    expected = [
        [read(s3, raw["bucketName"], r["key"]) for r in f["contentBatches"]] for f in reference["outputFiles"]
    ]
    response = example.handler(raw, LocalLambdaContext())
    assert response == reference
    got = [
        [read(s3, raw["bucketName"], r["key"]) for r in f["contentBatches"]] for f in response["outputFiles"]
    ]
    assert got == expected
    bodies = [i for f in got for b in f for i in b["fileContents"] if i["contentType"] == "TEXT"]
    assert bodies and all(
        i["contentMetadata"]["ckb_context"].startswith("This chunk is from") for i in bodies
    )


@pytest.mark.parametrize("name", ["malformed-event", "malformed-batch"])
def test_malformed_input_fails_in_one_line_and_writes_nothing(
    s3: Any, standin: BedrockStandIn, name: str
) -> None:
    raw = stage(s3, name)
    with pytest.raises(ContractError):
        example.handler(raw, LocalLambdaContext())
    assert outputs_in(s3, raw["bucketName"]) == [] and standin.seen == []
