"""One table row per coding agent: its binary, its ``--model``/``--effort`` rules and the
argv that starts it as a fleet member (docs/agents.md); and where each agent keeps the
records of its own usage (:func:`data_dir`, read by :mod:`cafleet.agents.usage`).

The argv is built for ``execvp`` (no shell) and checked against the real tools'
argument parsers by ``scripts/check_agent_flags.py``. Three details matter there:

* claude's ``--allowedTools <tools...>`` is variadic: every following word that does
  not start with ``-`` is taken as one more rule, so a prompt placed right after the
  rules is swallowed and claude starts with no prompt at all. ``--name <member>``
  therefore comes right after the rules: it closes the list.
* A spawn prompt may itself start with ``-`` (a bullet list, ``--help me``). claude and
  codex get ``--`` before the prompt so it is always the positional prompt (without it
  both read ``-prompt`` as short options: codex as ``-p rompt``, a profile name).
  opencode takes the prompt as the value of ``--prompt``; the ``--prompt=<prompt>`` form
  keeps a leading ``-`` in the value instead of starting a new option.
* The permission rules: claude takes ``Bash(cafleet message *)`` (current rule syntax;
  the older ``Bash(cafleet message:*)`` form is deprecated) as one argv word per rule;
  codex reads the rules file and opencode the agent preset that ``cafleet setup``
  installs (see :mod:`cafleet.agents.install`).
* codex gets ``--no-daemon``: by default its TUI hands the session to one background
  ``codex app-server`` per ``CODEX_HOME``, started by the first codex member and kept
  with that member's environment, so every later member's commands would run with the
  first one's ``CAFLEET_MEMBER_ID`` and ``CAFLEET_DATABASE_URL``. In-process, each
  member's commands see its own pane's environment.

Imports stay light (no ``typing``/``dataclasses``/``subprocess`` at module level): the
command line imports this module for ``fleet create`` and ``member create``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from cafleet.errors import AgentError, UsageError, shown

AGENTS: tuple[str, ...] = ("claude", "codex", "opencode")
"""The public coding agents. ``standin`` (our test/demo program) is accepted but hidden."""

STANDIN = "standin"

CLAUDE_ALLOWED_TOOLS: tuple[str, ...] = ("Bash(cafleet message *)",)
"""claude permission rules that let a member run every ``cafleet message`` command."""

STANDIN_MODULE = "cafleet.agents.standin"

VERSION_TIMEOUT = 5.0
"""Seconds ``binary_version`` waits for ``<agent> --version``."""


class Backend:
    """What cafleet needs to know about one coding agent."""

    __slots__ = ("binary", "efforts", "name", "product", "provider_model")

    def __init__(self, name: str, binary: str, product: str, efforts: tuple[str, ...], provider_model: bool) -> None:
        self.name = name
        self.binary = binary  # looked up on PATH
        self.product = product  # for "install <product>" hints
        self.efforts = efforts  # accepted --effort levels; () = the agent takes no effort
        self.provider_model = provider_model  # --model must be provider/model


BACKENDS: dict[str, Backend] = {
    "claude": Backend("claude", "claude", "Claude Code", ("low", "medium", "high", "xhigh", "max"), False),
    "codex": Backend("codex", "codex", "Codex CLI", ("minimal", "low", "medium", "high", "xhigh"), False),
    "opencode": Backend("opencode", "opencode", "opencode", (), True),
    STANDIN: Backend(STANDIN, "python", "the cafleet stand-in agent", (), False),
}


def _choices(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + " or " + values[-1]


def backend(agent: str) -> Backend:
    """The backend named ``agent``; an unknown name is a usage error (exit 2)."""
    found = BACKENDS.get(agent) if isinstance(agent, str) else None
    if found is None:
        raise UsageError(f"unknown coding agent {shown(agent)}; choose {_choices(AGENTS)}")
    return found


def _check_model(spec: Backend, model: str) -> None:
    if spec.name == STANDIN:
        raise UsageError("the standin agent takes no --model; leave it out")
    bad_char = any(ch.isspace() or not ch.isprintable() for ch in model)
    if not model or bad_char or model.startswith("-"):
        raise UsageError(f"invalid --model {shown(model)}; give a model name without spaces that does not start with -")
    if spec.provider_model:
        provider, _, name = model.partition("/")
        if not provider or not name:
            raise UsageError(
                f"invalid --model {shown(model)} for opencode; use the form provider/model (for example anthropic/claude-sonnet-4-5)"
            )


def validate(agent: str, model: str | None, effort: str | None) -> None:
    """Refuse, before any side effect, an unknown agent or a model/effort it cannot take.

    Every failure is a :class:`UsageError` (exit 2) naming the accepted values.
    """
    spec = backend(agent)
    if effort is not None:
        if not spec.efforts:
            raise UsageError(f"{spec.name} takes no --effort; leave it out")
        if effort not in spec.efforts:
            raise UsageError(f"invalid --effort {shown(effort)} for {spec.name}; choose {_choices(spec.efforts)}")
    if model is not None:
        _check_model(spec, model)


def build_argv(
    agent: str,
    *,
    member_name: str,
    prompt: str,
    model: str | None = None,
    effort: str | None = None,
    member_id: int | None = None,
    session_id: str | None = None,
) -> list[str]:
    """The argv that starts ``agent`` as member ``member_name`` with its spawn prompt.

    ``argv[0]`` is the bare program name (``claude``, ``codex``, ``opencode``); the
    stand-in runs as ``<this python> -m cafleet.agents.standin --member-id N`` and
    needs ``member_id``. Validates ``model``/``effort`` first (see :func:`validate`).
    ``session_id`` (a UUID) is claude's ``--session-id``: the name of the transcript its
    usage is read from (docs/usage.md); the other agents ignore it.
    """
    return _argv(agent, member_name, prompt, model, effort, member_id, session_id=session_id)


def resume_argv(
    agent: str,
    *,
    member_name: str,
    session: str,
    line: str,
    model: str | None = None,
    effort: str | None = None,
    member_id: int | None = None,
) -> list[str]:
    """The argv that starts ``agent`` again as member ``member_name``, resuming its own
    conversation ``session`` with ``line`` as the next prompt (not a second spawn prompt):
    claude ``--resume <session>`` (the same session id, so usage goes on in one
    transcript), ``codex resume <session>``, opencode ``--session <session>`` (without the
    line: opencode's TUI ignores ``--prompt`` when it opens a session, so the previews it is
    owed wake it instead). The stand-in has no conversation: it starts as usual."""
    return _argv(agent, member_name, line, model, effort, member_id, resume=session)


def _argv(
    agent: str,
    member_name: str,
    prompt: str,
    model: str | None,
    effort: str | None,
    member_id: int | None,
    *,
    session_id: str | None = None,
    resume: str | None = None,
) -> list[str]:
    validate(agent, model, effort)
    if "\x00" in prompt:
        raise UsageError("the spawn prompt contains a NUL character; remove it")
    if agent == "claude":
        argv = ["claude", "--permission-mode", "dontAsk", "--allowedTools", *CLAUDE_ALLOWED_TOOLS]
        argv += ["--name", member_name]
        if session_id is not None:
            argv += ["--session-id", session_id]
        if resume is not None:
            argv += ["--resume", resume]
        if model is not None:
            argv += ["--model", model]
        if effort is not None:
            argv += ["--effort", effort]
        return [*argv, "--", prompt]
    if agent == "codex":
        argv = ["codex", *(["resume"] if resume is not None else [])]
        argv += ["--no-daemon", "--ask-for-approval", "never", "--sandbox", "workspace-write"]
        if model is not None:
            argv += ["--model", model]
        if effort is not None:
            argv.append(f"--config=model_reasoning_effort={effort}")
        return [*argv, "--", *([resume] if resume is not None else []), prompt]
    if agent == "opencode":
        argv = ["opencode", "--agent", "cafleet"]
        if model is not None:
            argv += ["--model", model]
        if resume is not None:  # its TUI drops --prompt beside --session (opencode 1.18): none given
            return [*argv, "--session", resume]
        return [*argv, f"--prompt={prompt}"]
    if member_id is None:
        raise ValueError("build_argv needs member_id for the standin agent")
    return [sys.executable, "-m", STANDIN_MODULE, "--member-id", str(int(member_id))]


def find_binary(agent: str, environ: Mapping[str, str]) -> str:
    """The absolute path of ``agent``'s program on ``environ['PATH']``.

    Raises :class:`AgentError` (exit 1) when it is missing, so ``member create`` can
    refuse before writing anything. The stand-in is this Python interpreter.
    """
    spec = backend(agent)
    if spec.name == STANDIN:
        return sys.executable
    import shutil

    search_path = environ.get("PATH") or ""
    found = shutil.which(spec.binary, path=search_path) if search_path else None
    if found is None:
        others = ", ".join(name for name in AGENTS if name != spec.name)
        raise AgentError(
            f"{spec.binary} not found on PATH; install {spec.product} or pass --coding-agent "
            f"with an installed agent ({others})"
        )
    return os.path.abspath(found)


def binary_version(agent: str, environ: Mapping[str, str], timeout: float = VERSION_TIMEOUT) -> str | None:
    """The first line ``<agent> --version`` prints, or None when the program is
    missing, fails, prints nothing or does not answer within ``timeout`` seconds."""
    try:
        path = find_binary(agent, environ)
    except AgentError:
        return None
    import subprocess

    from cafleet.config import child_environ

    try:
        done = subprocess.run(
            [path, "--version"],
            env=child_environ(environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()
    return None


def data_dir(agent: str, environ: Mapping[str, str]) -> str | None:
    """Where ``agent`` keeps its records for a pane started with ``environ``."""
    home = environ.get("HOME") or os.path.expanduser("~")
    if agent == "claude":
        return environ.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")
    if agent == "codex":
        return environ.get("CODEX_HOME") or os.path.join(home, ".codex")
    if agent == "opencode":
        return os.path.join(environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "opencode")
    return None
