"""A stand-in coding agent: a tiny full-screen program that behaves like an agent's input
box, for tests and demos that need a real pane without a real agent.

    python -m cafleet.agents.standin --member-id N [--record FILE] [--auto-reply]
                                     [--permission-prompt] [--enter-guard SECONDS]
                                     [--prompt TEXT] [--placeholder TEXT] [--prefill TEXT]
                                     [--startup-clear] [--waiting-for-startup] [--completion]
                                     [--late-echo SECONDS] [--start-delay SECONDS] [--start-gate PATH]
                                     [--reply-lines N] [--inline]

It puts its terminal in raw mode and draws a banner, the lines it received (``• …``), a
rule and the input line ``> `` (the "standin" cues of cafleet.delivery.keystrokes.screen). Printable
keys are echoed into the input line; Enter (CR or LF) submits it: the line moves into the
scrollback and is appended to ``--record`` as one JSON object per line,
``{"ts", "kind": "submit", "text"}``, text exact. Backspace and Ctrl-U edit; Ctrl-C and
Ctrl-D quit, restoring the terminal. Every other control key or escape sequence (a lone
Escape, arrows, ESC [200~ ...) is not acted on but recorded as ``{"kind": "key", "key"}``,
so a test can prove that none reached the pane.

``--permission-prompt`` starts with a claude-like question ("Do you want to proceed?",
``❯ 1. Yes`` / ``2. No``): keys are collected without echo and each Enter records
``{"kind": "permission", "text"}``; the answer ``1`` or ``2`` dismisses it. A submitted
line ``/permission`` draws the question again (an agent asking a second time).

``--prompt "❯ "`` draws claude's composer instead of ``> `` (for tests that use the claude
cues). ``--enter-guard S`` ignores (and records as the key ``enter-too-soon``) an Enter that
arrives less than S seconds after typed text, as codex turns such an Enter into a newline:
it lets tests exercise the settle delay and the Enter retries.

Behaviours of the real agents that delivery must survive, each off by default:

* ``--placeholder TEXT`` draws TEXT, dimmed, in the empty input line (claude's ``Try "…"``,
  codex's suggestions, opencode's ``Ask anything... "…"``).
* ``--prefill TEXT`` starts with TEXT already typed (a person composing).
* ``--startup-clear`` is claude while it starts: the first Enter is not acted on (the key
  ``enter-during-startup``); instead the input line is cleared, recorded as ``{"kind":
  "cleared", "text"}``, and the stand-in's own start-up prompt is submitted (``• (start-up
  prompt)``), as claude does with the prompt on its command line.
* ``--waiting-for-startup`` is codex while it starts: ``Waiting for startup`` shows above the
  rule, typing is accepted but every Enter is held (the key ``enter-while-starting``) until
  the process gets SIGUSR1. ``--late-startup`` enters that state at the first key it
  receives instead (codex drawing it only after the text was typed).
* ``--completion`` opens a file-mention popup under the input line while the text ends in
  ``@word``; Enter then accepts the completion (the word becomes ``word.txt``, without the
  ``@``, as codex does; the key ``completion-accepted``) instead of submitting.
* ``--late-echo S`` is an agent on a loaded machine: Enter submits and clears the input
  line at once, but the line shows in the transcript only S seconds later.
* ``--reply-lines N`` answers every submitted line, once its echo shows, with N lines of
  output (``(reply line 1 of N)`` …): an agent's long answer, which pushes the echo up and
  out of the screen.
* ``--inline`` draws the transcript as claude and codex do: each new row is printed above
  the input box and scrolls up into the terminal's own history (tmux's scrollback), where
  an echo pushed off the screen can still be read; by default the whole screen is redrawn
  in place, as a full-screen program such as opencode draws it, and a row pushed off the
  screen is gone.
* ``--start-gate PATH`` draws the input box only once PATH exists: a test decides when
  the box appears, instead of racing a delay.
* ``--start-delay S`` is an agent that draws its input box only S seconds after it starts
  (opencode's first seconds, any agent on a loaded machine): until then the screen shows
  the banner and ``starting…``, with no rule and no input line, and every key is dropped
  (recorded as the key ``before-input-box``); ``{"kind": "box-drawn"}`` is recorded when
  the box appears.

SIGUSR2 freezes the stand-in (it reads no input and draws nothing, like an agent busy
with its own work; tmux resumes a stopped pane at once, so SIGSTOP cannot do this) and a
second SIGUSR2 thaws it; each is recorded (``{"kind": "frozen"}``, ``{"kind": "thawed"}``).

Every submitted line is echoed into the transcript (``• <text>``). Like the real agents,
the stand-in wraps long rows itself (continuation rows start with two blanks; never the
terminal's auto-wrap, whose stale marks make tmux join unrelated rows), shows only the end
of an input line or an echo taller than the screen, and draws the completion popup's rows
with ``┊``.

Environment (for panes started by ``cafleet member create``, which passes only
``--member-id``): ``CAFLEET_STANDIN_RECORD_DIR`` records into ``<dir>/member-<id>.jsonl``
and ``CAFLEET_STANDIN_AUTO_REPLY=1`` turns on ``--auto-reply``;
``CAFLEET_STANDIN_START_DELAY=S`` sets ``--start-delay`` and ``CAFLEET_STANDIN_START_GATE=PATH``
``--start-gate``.

Shell mode, as claude's ``!``: a ``!`` typed into the empty input line is not text but
switches the line to shell mode (its prompt becomes ``! ``; BackSpace in the empty line
leaves it). Enter then runs the line with ``/bin/sh -c`` in the stand-in's own directory
and environment, shows ``! <line>`` and the output (``  ⎿ …``) in the transcript, and
records ``{"kind": "shell", "text", "output", "status"}``; no reply follows.

``--auto-reply``: when a submitted line holds a cafleet preview header ``[cafleet msg <id>
from <sender> …``, the stand-in shows ``working… (esc to interrupt)`` and runs the real
command line, ``$CAFLEET_BIN`` (default ``python -m cafleet``): ``message poll <me>
--json``, then for each message ``message send --from-member-id <me> --to-member-id
<sender> "ack: <first 40 characters of its body>"`` and ``message ack <id>``, recording
``{"kind": "reply"}`` or ``{"kind": "reply-error"}``.

Standard library only (termios, tty, select, os, sys). The program (:mod:`.program`: the
command line, the signals, the loop that reads the terminal) drives the agent's state and
screen (:mod:`.agent`), which reads keys and shapes rows with :mod:`.terminal`.
"""
