"""Inputs every multiplexer backend must pass through unchanged (shared by the tmux and
herdr backend tests)."""

from __future__ import annotations

# Arguments a shell or tmux would mangle; each must reach the program unchanged.
HOSTILE_ARGS = [
    "two words",
    "'single'",
    '"double"',
    "$HOME",
    "$(touch pwned)",
    "`touch pwned`",
    "x;",
    ";",
    "\\;",
    "a\\\\;",
    "#{pane_id}",
    "-l",
    "--",
    "* ?",
    "ünïcødé 中文 🙂",
    "line1\nline2",
    "{ a }",
    "~",
    "",
]
# Text that tmux could read as key names, options or command separators.
HOSTILE_TEXT = [
    "C-c",
    "Enter",
    "-l",
    "--",
    ";",
    "\\;",
    "end;",
    "a\\\\;",
    "$(rm -rf x)",
    "#{pane_id}",
    "ünïcødé 中文 🙂",
    "Escape",
    " leading and trailing ",
    "{",
    "}",
]
ARGV_DUMPER = (
    "import json, os, sys, time\n"
    "json.dump({'argv': sys.argv[2:], 'cwd': os.getcwd(),"
    " 'env': {k: os.environ.get(k) for k in ('CFT_A', 'CFT_B')}},"
    " open(sys.argv[1] + '.tmp', 'w'))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(60)\n"
)
