"""docs/guarantees.md names the tests that prove each guarantee: every name it cites must
be a test function that exists, so the page cannot keep pointing at a renamed test."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "guarantees.md"


def cited() -> list[tuple[str, str]]:
    return sorted(set(re.findall(r"`(test_\w+\.py)::(test_\w+)`", PAGE.read_text(encoding="utf-8"))))


def test_every_cited_test_exists():
    citations = cited()
    assert len(citations) > 40  # the pattern really finds the citations
    missing = [
        f"{file}::{name}"
        for file, name in citations
        if not (ROOT / "tests" / file).exists()
        or not re.search(rf"^def {name}\(", (ROOT / "tests" / file).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []
