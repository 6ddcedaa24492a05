"""The command line: parse, call the library, render; nothing else.

``main`` parses argv against the declarative command table in :mod:`cafleet.cli.table`
and imports only the one handler module the command needs, so that the hot commands
start in a few milliseconds more than a bare interpreter.
"""
