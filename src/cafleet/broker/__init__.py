"""Fleets, members, messages and activity: persistence and validation only.

No keystrokes, no subprocesses, no printing. The broker persists; the caller delivers.
Public records are plain dicts whose keys follow spec §3.1.
"""
