"""Fleets, members, messages, notifications, the admin timeline and activity: persistence
and validation only.

No keystrokes, no subprocesses, no printing. The broker persists; the caller delivers.
Public records are plain dicts whose keys are the stored column names (README.md shows
them; docs/architecture.md says what each module owns); their shapes are declared once, as
``TypedDict`` classes for the type checker, in :mod:`cafleet.broker.records`.
"""
