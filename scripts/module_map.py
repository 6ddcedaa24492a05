"""docs/architecture.md's module map: every module of src/cafleet with the first sentence of
its own docstring, written between two marker comments so that the map cannot drift from
the tree (tests/test_architecture.py fails when the written map is not this one).

    python scripts/module_map.py --markdown | --write-readme docs/architecture.md
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "cafleet"
START = "<!-- module map: start (scripts/module_map.py writes it) -->"
END = "<!-- module map: end -->"


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence, on one line (its first paragraph when no sentence
    ends within it)."""
    paragraph = " ".join(docstring.strip().split("\n\n", 1)[0].split())
    match = re.search(r"(?<!e\.g)(?<!i\.e)\.(?=\s+[A-Z`(*]|$)", paragraph)  # not inside "e.g." or "i.e."
    sentence = paragraph[: match.start() + 1] if match else paragraph
    return sentence if sentence.endswith(".") else sentence + "."


def rows() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
        found.append((path.relative_to(PACKAGE).as_posix(), first_sentence(docstring) if docstring else ""))
    return found


def markdown() -> str:
    lines = ["| module (under src/cafleet/) | what it holds |", "| --- | --- |"]
    lines += ["| `" + module + "` | " + text.replace("|", "\\|") + " |" for module, text in rows()]
    return "\n".join(lines)


def replace(document: str) -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from cafleet.readme import replace_section

    return replace_section(document, START, END, markdown())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    from cafleet.readme import generator_main

    sys.exit(generator_main(sys.argv[1:], "scripts/module_map.py", markdown, replace))
