"""Sections of the README generated from the code (the configuration table from
:mod:`cafleet.config`, the command reference from :mod:`cafleet.cli.helptext`), between
marker comments, and the small command line each generator offers:
``python -m <module> --markdown | --write-readme README.md``."""

from __future__ import annotations

from collections.abc import Callable


def replace_section(readme: str, start_marker: str, end_marker: str, body: str) -> str:
    """``readme`` with the text between the two markers replaced by ``body``."""
    start, end = readme.index(start_marker), readme.index(end_marker)
    return readme[: start + len(start_marker)] + "\n\n" + body + "\n\n" + readme[end:]


def generator_main(argv: list[str], module: str, markdown: Callable[[], str], replace: Callable[[str], str]) -> int:
    """``--markdown`` prints the section; ``--write-readme FILE`` rewrites it in place."""
    import sys

    if argv == ["--markdown"]:
        sys.stdout.write(markdown() + "\n")
        return 0
    if len(argv) == 2 and argv[0] == "--write-readme":
        with open(argv[1], encoding="utf-8") as handle:
            text = handle.read()
        updated = replace(text)
        if updated != text:
            with open(argv[1], "w", encoding="utf-8") as handle:
                handle.write(updated)
        return 0
    print(f"usage: python -m {module} --markdown | --write-readme README.md", file=sys.stderr)
    return 2
