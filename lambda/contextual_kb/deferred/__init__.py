"""Contexts made later: pending documents turned into Bedrock batch inference jobs (``ckb contextualize``)."""
