"""Read what each coding agent records about its own model usage (docs/usage.md).

A leaf: files and the agents' own databases only, nothing of cafleet's. The command line
loads it only for ``member usage``/``fleet usage``, ``member create`` and a send to a
member with a budget (the stored totals' :class:`~.totals.Usage`; no file is read there),
and the fleet keeper to read what is new. One module per job:

* :mod:`.totals`: what every reader shares: the bounds a record is read within, the price
  table, :class:`~.totals.Usage` (calls added up by model) and
  :class:`~.totals.TranscriptReader` (a byte offset per file, so reading again only
  parses what was appended). Both dump to plain data (JSON) and load from it: the fleet
  keeper stores them per member (:mod:`cafleet.delivery.usage`), so each read of the
  agent's records, by whichever process, starts where the last one stopped.
* :mod:`.claude`: ``<config dir>/projects/*/<session id>.jsonl``, one ``"type":"assistant"``
  line per content block, each repeating the call's ``message.usage``; a call is counted
  once per ``(message.id, requestId)``, its last line winning. No dollars: the price table.
* :mod:`.codex`: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`` whose first user
  message carries the member's identity lines; a ``token_usage_record`` line per
  response, counted once per ``response_id``. No dollars: the price table.
* :mod:`.opencode`: ``<data dir>/opencode.db`` read-only, table ``session`` (see
  :func:`~.opencode.opencode_usage`).

Every number read is bounded where it is read: a token count is a whole number from 0 to
:data:`~.totals.MAX_COUNT`, recorded dollars are finite and from 0 to
:data:`~.totals.MAX_RECORDED_USD`, a model name or call id is text of at most
:data:`~.totals.MAX_NAME` characters. A record that breaks a bound (or is not JSON) is
*unreadable*: skipped and counted (``Usage.unreadable``), never an error, so one hostile
line cannot stop a usage read, a budget check or ``fleet watch``.

Where a member's agent keeps its records is :func:`cafleet.agents.backends.data_dir`; the
cafleet previews those records show the agent took are :mod:`cafleet.agents.previews`.
"""
