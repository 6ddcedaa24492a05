"""Coding-agent backends and the assets cafleet installs for them.

``backends`` knows, per coding agent (claude, codex, opencode, and the hidden test
``standin``), which binary to run, which ``--model``/``--effort`` values it takes and the
exact argv that starts a member so that it can run ``cafleet message ...`` without a
permission prompt. ``install`` copies the embedded skill, rules file and opencode agent
preset (``assets/``) into each agent's configuration directory. ``usage`` reads what each
agent records of its own model usage (one reader per agent over a shared accumulator and
price table), ``previews`` the cafleet previews those records show an agent took, and
``sessions`` which of its sessions a member resumes. All are leaves: they import nothing
from the broker, the store or the multiplexers.
"""
