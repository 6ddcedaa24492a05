#!/usr/bin/env python3
"""Check the argv and assets cafleet gives claude, codex and opencode against the real tools.

    python scripts/check_agent_flags.py                 # npm-install all three into a temp prefix
    python scripts/check_agent_flags.py --prefix DIR    # npm-install into DIR (kept)
    python scripts/check_agent_flags.py --bin-dir DIR   # use the programs already in DIR
    python scripts/check_agent_flags.py --use-path      # use the programs on PATH
    ... [--agent claude --agent codex ...]

The argv comes from ``cafleet.agents.backends.build_argv`` and the assets from
``cafleet.agents.install``, so what is checked is what cafleet runs. No agent session is
started and nothing needs credentials: every tool runs in a throw-away HOME with a
scrubbed environment and stdin closed, and each probe stops at the first point after
argument parsing (``--help``/``--version``, claude's "Not logged in", codex's "stdin is
not a terminal") or uses an offline inspection command (``codex execpolicy check``,
``codex debug prompt-input``, ``opencode debug agent|skill``).

Each probe that decides pass/fail from an output pattern also has a self-test showing
the pattern does catch the failure it looks for. Prints the versions checked and one
PASS/WARN/FAIL line per check; exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from cafleet.agents import backends, install
except ImportError:  # run with a Python that does not have cafleet installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from cafleet.agents import backends, install

# Pinned: the versions whose argument parsers were last checked (docs/agents.md). Bump
# them together with that page after running this script against the new releases.
NPM_PACKAGES = {
    "claude": "@anthropic-ai/claude-code@2.1.197",
    "codex": "@openai/codex@0.171.0",
    "opencode": "opencode-ai@1.18.33",
}
RUN_TIMEOUT = 90.0
NPM_TIMEOUT = 900.0
PROBE_PROMPT = "-probe prompt that starts with a dash"
PROBE_MODEL = {"claude": "sonnet", "codex": "gpt-5.5", "opencode": "anthropic/claude-sonnet-4-5"}
PROBE_SESSION_ID = "3f1c2a4e-1111-4222-8333-444455556666"  # claude's --session-id takes a UUID
PROBE_EFFORT = {"claude": "high", "codex": "high", "opencode": None}


class Check:
    """One line of the report."""

    __slots__ = ("detail", "name", "status")

    def __init__(self, name: str, status: str, detail: str = "") -> None:
        self.name = name
        self.status = status  # PASS | WARN | FAIL
        self.detail = detail

    def line(self) -> str:
        return f"  {self.status:<4}  {self.name}" + (f"  ({self.detail})" if self.detail else "")


def _check(name: str, ok: bool, detail: str = "") -> Check:
    return Check(name, "PASS" if ok else "FAIL", detail)


def tool_env(home: Path, binary: str) -> dict[str, str]:
    """A scrubbed environment: no credentials, no user config, no update checks."""
    return {
        "PATH": os.path.dirname(binary) + os.pathsep + os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",  # codex refuses TERM=dumb before looking at stdin
        "NO_COLOR": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    }


def run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """Run one probe; returns (exit code, stdout, stderr); a timeout is exit code -1."""
    try:
        done = subprocess.run(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {RUN_TIMEOUT:.0f}s"
    out = done.stdout.decode("utf-8", "replace")
    # codex warns that it will not create helper links under /tmp; not our concern
    err = "\n".join(
        line
        for line in done.stderr.decode("utf-8", "replace").splitlines()
        if "could not create PATH aliases" not in line
    )
    return done.returncode, out, err


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _short(text: str) -> str:
    line = _first_line(text)
    return line if len(line) <= 100 else line[:100] + "…"


def member_argv(agent: str, binary: str, **overrides) -> list[str]:
    """The argv cafleet builds for a member with model and effort set, binary pinned."""
    options = {"model": PROBE_MODEL[agent], "effort": PROBE_EFFORT[agent], "session_id": PROBE_SESSION_ID}
    options.update(overrides)
    argv = backends.build_argv(agent, member_name="probe", prompt=PROBE_PROMPT, **options)
    return [binary, *argv[1:]]


def flags_of(argv: list[str]) -> list[str]:
    """The option names in an argv (``--config=x`` gives ``--config``), in order, once each."""
    names: list[str] = []
    for token in argv[1:]:
        if token == "--":
            break
        if token.startswith("--"):
            name = token.partition("=")[0]
            if name not in names:
                names.append(name)
    return names


def help_lists(help_text: str, flag: str) -> bool:
    return re.search(rf"(^|[\s,]){re.escape(flag)}(?=[\s,=<\[]|$)", help_text, re.MULTILINE) is not None


def check_help(binary: str, argv: list[str], env: dict[str, str], cwd: Path) -> tuple[list[Check], str]:
    code, out, err = run([binary, "--help"], env, cwd)
    text = out + "\n" + err
    checks = [_check(f"--help lists {flag}", code == 0 and help_lists(text, flag)) for flag in flags_of(argv)]
    checks.append(
        _check(
            "probe self-test: --help does not list --cafleet-bogus-flag", not help_lists(text, "--cafleet-bogus-flag")
        )
    )
    return checks, text


def check_claude(binary: str, version: str, home: Path) -> list[Check]:
    env = tool_env(home, binary)
    argv = member_argv("claude", binary)
    checks, help_text = check_help(binary, argv, env, home)
    # the rule syntax cafleet uses, "Tool(prefix *)", is the one claude's own help shows
    checks.append(
        _check("--help shows rules in the form Bash(git *), as in Bash(cafleet message *)", "Bash(git *)" in help_text)
    )

    # commander validates --permission-mode choices while parsing, before --version exits
    code, out, err = run([binary, "--permission-mode", "dontAsk", "--version"], env, home)
    checks.append(
        _check("--permission-mode dontAsk accepted", code == 0 and (out + err).strip() == version, _short(err))
    )
    code, _, err = run([binary, "--permission-mode", "cafleetBogus", "--version"], env, home)
    checks.append(_check("probe self-test: --permission-mode cafleetBogus refused", code != 0, _short(err)))

    # claude warns on stderr about an effort level it does not know and ignores it
    for effort in backends.BACKENDS["claude"].efforts:
        code, out, err = run([binary, "--effort", effort, "--version"], env, home)
        checks.append(_check(f"--effort {effort} accepted", code == 0 and (out + err).strip() == version, _short(err)))
    code, out, err = run([binary, "--effort", "cafleet-bogus", "--version"], env, home)
    checks.append(_check("probe self-test: --effort cafleet-bogus warned about", "Unknown --effort" in out + err))

    # The whole argv: with stdin closed and no login, claude parses everything, takes the
    # prompt and stops at "Not logged in". An unknown flag, a bad value or a swallowed
    # prompt ("Input must be provided ...") stops it earlier with another message.
    code, out, err = run(argv, env, home)
    text = out + err
    bad = [word for word in ("unknown option", "error:", "Input must be provided", "Unknown --effort") if word in text]
    checks.append(
        _check(
            "member argv parsed, prompt bound (stops at 'Not logged in')",
            code != 0 and "Not logged in" in text and not bad,
            _short(text),
        )
    )
    swallowing = [
        binary,
        "--permission-mode",
        "dontAsk",
        "--allowedTools",
        *backends.CLAUDE_ALLOWED_TOOLS,
        "probe prompt",
    ]
    code, out, err = run(swallowing, env, home)
    checks.append(
        _check(
            "probe self-test: a prompt right after --allowedTools is swallowed",
            "Input must be provided" in out + err,
            _short(out + err),
        )
    )
    # --session-id is validated after parsing, when the session starts: a new UUID reaches
    # "Not logged in", anything else stops at "Invalid session ID" (and one already used,
    # as the member argv above used PROBE_SESSION_ID, at "already in use")
    import uuid

    code, out, err = run([binary, "--session-id", str(uuid.uuid4()), "-p", "probe"], env, home)
    checks.append(
        _check(
            "--session-id <uuid> accepted",
            "Not logged in" in out + err and "Invalid session" not in out + err,
            _short(out + err),
        )
    )
    code, out, err = run([binary, "--session-id", "cafleet-bogus", "-p", "probe"], env, home)
    checks.append(
        _check(
            "probe self-test: --session-id cafleet-bogus refused", "Invalid session ID" in out + err, _short(out + err)
        )
    )
    checks.append(Check("skill SKILL.md", "WARN", "not checked: claude lists skills only inside a logged-in session"))
    return checks


def check_codex_in_process(binary: str, argv: list[str], help_text: str, env: dict[str, str], cwd: Path) -> list[Check]:
    """Each codex member runs in its own process with its own environment.

    Without ``--no-daemon`` the TUI hands its session to one shared ``codex app-server``
    (per CODEX_HOME) that keeps the first member's environment; the flag must be in the
    member argv, be a top-level switch, and mean that in codex's own help.
    """
    described = re.search(r"--no-daemon\s+Run without the shared background server", help_text) is not None
    checks = [
        _check(
            "member argv has --no-daemon, which --help describes as running without the shared background server",
            "--no-daemon" in argv[: argv.index("--")] and described,
        )
    ]
    code, out, err = run([binary, "--no-daemon", "--help"], env, cwd)
    checks.append(
        _check("--no-daemon accepted before the prompt (top-level switch)", code == 0 and "Usage:" in out, _short(err))
    )
    code, out, err = run([binary, "--no-daemon=yes", "--help"], env, cwd)
    checks.append(
        _check(
            "probe self-test: --no-daemon takes no value (--no-daemon=yes refused)",
            code != 0 and "unexpected value" in out + err,
            _short(err),
        )
    )
    return checks


def check_codex(binary: str, version: str, home: Path) -> list[Check]:
    env = tool_env(home, binary)
    argv = member_argv("codex", binary)
    checks, help_text = check_help(binary, argv, env, home)
    checks += check_codex_in_process(binary, argv, help_text, env, home)

    # clap parses left to right and validates each value before it reaches --help
    flags_only = argv[: argv.index("--")]
    code, out, err = run([*flags_only, "--help"], env, home)
    checks.append(
        _check("flags and values accepted by clap (argv + --help)", code == 0 and "Usage:" in out, _short(err))
    )
    code, _, err = run([binary, "--ask-for-approval", "cafleet-bogus", "--help"], env, home)
    checks.append(
        _check(
            "probe self-test: --ask-for-approval cafleet-bogus refused",
            code != 0 and "invalid value" in err,
            _short(err),
        )
    )

    # The whole argv: clap accepts it, then the TUI refuses to start without a terminal.
    code, out, err = run(argv, env, home)
    text = out + err
    bad = [word for word in ("unexpected argument", "invalid value", "error:") if word in text]
    checks.append(
        _check(
            "member argv parsed (stops at 'stdin is not a terminal')",
            code != 0 and "stdin is not a terminal" in text and not bad,
            _short(text),
        )
    )
    code, out, err = run([binary, "--cafleet-bogus", "--", PROBE_PROMPT], env, home)
    checks.append(
        _check(
            "probe self-test: an unknown flag stops codex before the terminal check",
            "unexpected argument" in out + err and "stdin is not a terminal" not in out + err,
            _short(out + err),
        )
    )

    # model_reasoning_effort is forwarded as a string; compare with the bundled catalog
    code, out, _ = run([binary, "debug", "models"], env, home)
    supported: set[str] = set()
    try:
        for model in json.loads(out)["models"]:
            supported.update(level["effort"] for level in model.get("supported_reasoning_levels", []))
    except (ValueError, KeyError, TypeError):
        checks.append(Check("effort levels vs model catalog", "WARN", "codex debug models gave no catalog"))
    else:
        for effort in backends.BACKENDS["codex"].efforts:
            ok = effort in supported
            detail = "" if ok else f"no bundled model lists it; catalog has {', '.join(sorted(supported))}"
            checks.append(
                Check(
                    f"--config=model_reasoning_effort={effort} in the model catalog", "PASS" if ok else "WARN", detail
                )
            )

    environ = {"HOME": str(home)}
    install.install("codex", environ)
    rules = install.asset_targets("codex", environ)[1].path
    for command, expected in (
        (["cafleet", "message", "poll", "3"], "allow"),
        (["cafleet", "member", "delete", "3"], None),
    ):
        code, out, err = run([binary, "execpolicy", "check", "--rules", str(rules), *command], env, home)
        try:
            decision = json.loads(out).get("decision")
        except ValueError:
            decision = f"unreadable: {_short(err)}"
        checks.append(
            _check(
                f"rules file: `{' '.join(command)}` -> {expected or 'no rule'}",
                code == 0 and decision == expected,
                f"got {decision}",
            )
        )
    code, out, err = run([binary, "debug", "prompt-input", "hi"], env, home)
    checks.append(
        _check(
            "skill listed in the model's prompt (codex debug prompt-input)",
            "- cafleet: Run or join a cafleet fleet" in out and "cafleet/SKILL.md" in out,
            _short(err),
        )
    )
    return checks


def _opencode_json(binary: str, args: list[str], env: dict[str, str], cwd: Path):
    code, out, err = run([binary, *args], env, cwd)
    try:
        return json.loads(out), ""
    except ValueError:
        return None, _short(err or out) or f"exit {code}"


def _preset_ok(agent: dict | None) -> bool:
    if not agent:
        return False
    bash = [
        (rule["pattern"], rule["action"]) for rule in agent.get("permission", []) if rule.get("permission") == "bash"
    ]
    return agent.get("name") == "cafleet" and ("cafleet message *", "allow") in bash and agent.get("prompt") == ""


def check_opencode(binary: str, version: str, home: Path) -> list[Check]:
    env = tool_env(home, binary)
    argv = member_argv("opencode", binary)
    checks, _ = check_help(binary, argv, env, home)
    checks.append(
        Check(
            "member argv parse", "WARN", "not probed: opencode's parser ignores unknown flags, so --help is the check"
        )
    )

    agent, why = _opencode_json(binary, ["debug", "agent", "cafleet"], env, home)
    checks.append(_check("probe self-test: no cafleet agent before setup", agent is None))
    environ = {"HOME": str(home)}
    install.install("opencode", environ)
    agent, why = _opencode_json(binary, ["debug", "agent", "cafleet"], env, home)
    checks.append(
        _check(
            "preset ~/.opencode/agents/cafleet.md: bash 'cafleet message *' allow, own prompt kept",
            _preset_ok(agent),
            why,
        )
    )

    config_dir = home / "opencode-config-dir"
    install.install("opencode", {"HOME": str(home), "OPENCODE_CONFIG_DIR": str(config_dir)})
    (home / ".opencode" / "agents" / "cafleet.md").unlink()
    agent, why = _opencode_json(
        binary, ["debug", "agent", "cafleet"], {**env, "OPENCODE_CONFIG_DIR": str(config_dir)}, home
    )
    checks.append(_check("preset in $OPENCODE_CONFIG_DIR/agents/cafleet.md loaded", _preset_ok(agent), why))

    skills, why = _opencode_json(binary, ["debug", "skill"], env, home)
    found = [skill for skill in skills or [] if skill.get("name") == "cafleet"]
    expected = str(install.asset_targets("opencode", environ)[0].path / "SKILL.md")
    checks.append(
        _check(
            "skill ~/.config/opencode/skills/cafleet listed (opencode debug skill)",
            [s.get("location") for s in found] == [expected],
            why or str([s.get("location") for s in found]),
        )
    )
    return checks


CHECKERS = {"claude": check_claude, "codex": check_codex, "opencode": check_opencode}


def check_agent(agent: str, binary: str) -> tuple[str, list[Check]]:
    """Run every check for one agent binary in a throw-away HOME; returns (version, checks)."""
    with tempfile.TemporaryDirectory(prefix=f"cafleet-check-{agent}-") as tmp:
        home = Path(tmp)
        code, out, err = run([binary, "--version"], tool_env(home, binary), home)
        version = _first_line(out)
        if code != 0 or not version:
            return "?", [Check(f"{agent} --version", "FAIL", _short(err) or f"exit {code}")]
        return version, CHECKERS[agent](binary, version, home)


def npm_install(prefix: Path, agents: list[str]) -> None:
    packages = [NPM_PACKAGES[agent] for agent in agents]
    print(f"npm install --prefix {prefix} {' '.join(packages)}", flush=True)
    done = subprocess.run(
        ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error", *packages],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=NPM_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"npm install failed: {_short(done.stderr.decode('utf-8', 'replace'))}")


def locate(agent: str, bin_dir: Path | None) -> str | None:
    search = str(bin_dir) if bin_dir is not None else os.environ.get("PATH", "")
    found = shutil.which(agent, path=search) if search else None
    return os.path.abspath(found) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--prefix", type=Path, help="npm-install the agents into this directory (kept)")
    where.add_argument("--bin-dir", type=Path, help="use the agent programs already in this directory")
    where.add_argument("--use-path", action="store_true", help="use the agent programs on PATH")
    parser.add_argument("--agent", action="append", choices=sorted(CHECKERS), help="check only this agent (repeatable)")
    parser.add_argument(
        "--install-only", action="store_true", help="with --prefix: install and stop (for the test setup)"
    )
    args = parser.parse_args(argv)
    if args.install_only:
        if args.prefix is None:
            parser.error("--install-only needs --prefix")
        npm_install(args.prefix.resolve(), args.agent or list(CHECKERS))
        return 0
    agents = args.agent or list(CHECKERS)

    temp_prefix = None
    bin_dir: Path | None = args.bin_dir
    if not args.use_path and bin_dir is None:
        prefix = args.prefix
        if prefix is None:
            temp_prefix = tempfile.TemporaryDirectory(prefix="cafleet-agents-")
            prefix = Path(temp_prefix.name)
        npm_install(prefix.resolve(), agents)
        bin_dir = prefix.resolve() / "node_modules" / ".bin"
    try:
        failed = warned = passed = 0
        for agent in agents:
            binary = locate(agent, bin_dir)
            if binary is None:
                print(f"{agent}: FAIL not found in {bin_dir or 'PATH'}")
                failed += 1
                continue
            version, checks = check_agent(agent, binary)
            print(f"{agent} {version}  [{binary}]")
            for item in checks:
                print(item.line(), flush=True)
            passed += sum(item.status == "PASS" for item in checks)
            warned += sum(item.status == "WARN" for item in checks)
            failed += sum(item.status == "FAIL" for item in checks)
        print(f"{passed} passed, {warned} warnings, {failed} failed")
        return 1 if failed else 0
    finally:
        if temp_prefix is not None:
            temp_prefix.cleanup()


if __name__ == "__main__":
    sys.exit(main())
