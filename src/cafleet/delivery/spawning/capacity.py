"""Room for one more member: its host's available memory and its fleet's member cap,
checked by ``member create`` before anything is written; and the headroom ``doctor`` shows.

Memory is the kernel's ``MemAvailable`` (``/proc/meminfo``): what new programs can be given
without swapping, the page cache the kernel can drop included. On another host it is read
over the SSH connection the creation uses anyway. Where it cannot be read (not Linux, a
kernel without the field) nothing is checked and nothing is said.

A new member needs its agent's estimate (``CAFLEET_AGENT_MEMORY_CLAUDE``, ``_CODEX``,
``_OPENCODE``, from the measurement in docs/performance.md, "Agents' memory"; the stand-in
30 MiB), and its host keeps ``CAFLEET_MEMORY_MARGIN`` free besides. ``CAFLEET_FLEET_MAX_MEMBERS`` caps a fleet's
members other than its Director. ``member create --force`` skips both checks.

``CAFLEET_MEMINFO`` names a file read instead of /proc/meminfo, on the member's host: how
the tests make a machine short of memory (a real file with a small MemAvailable). A file it
names that cannot be read is an error, never a check skipped in silence.
"""

from __future__ import annotations

from cafleet.errors import ConfigError, Conflict, shown

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from cafleet import config
    from cafleet.mux.ssh import Ssh
    from cafleet.store.protocol import Store

MEMINFO = "/proc/meminfo"
STANDIN_MIB = 30  # the stand-in agent (a small Python program): about 20 MiB measured
ESTIMATES = {  # the setting that says what one member of each agent needs
    "claude": "CAFLEET_AGENT_MEMORY_CLAUDE",
    "codex": "CAFLEET_AGENT_MEMORY_CODEX",
    "opencode": "CAFLEET_AGENT_MEMORY_OPENCODE",
}
FORCE_HINT = "give --force to create the member anyway."
# Prints the file ($1) on the host; its status says whether it could be read.
_READ = 'exec cat -- "$1"'


def meminfo_available(text: str) -> int | None:
    """``MemAvailable`` in MiB from /proc/meminfo's text; None when it has no such line."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            words = line.split()
            if len(words) == 3 and words[1].isascii() and words[1].isdigit() and words[2] == "kB":
                return int(words[1]) // 1024
            return None
    return None


def meminfo_path(environ: Mapping[str, str]) -> str:
    """The file the check reads: ``CAFLEET_MEMINFO`` (an absolute path), else /proc/meminfo."""
    from cafleet.errors import UsageError

    path = environ.get("CAFLEET_MEMINFO", "")
    if path and not path.startswith("/"):
        raise UsageError(f"CAFLEET_MEMINFO must be an absolute path, got {shown(path)}.")
    return path or MEMINFO


def available_here(environ: Mapping[str, str]) -> int | None:
    """This machine's available memory in MiB; None when the kernel does not say."""
    path = meminfo_path(environ)
    try:
        with open(path, "rb") as handle:
            text = handle.read(1 << 16).decode("ascii", "replace")
    except OSError as error:
        if path == MEMINFO:
            return None
        raise ConfigError(f"CAFLEET_MEMINFO names {shown(path)}, which cannot be read ({error.strerror}).") from None
    return _checked(meminfo_available(text), path, "this machine")


def available_on(ssh: Ssh, environ: Mapping[str, str]) -> int | None:
    """The available memory in MiB of ``ssh``'s host, in one SSH call; None when its kernel
    does not say."""
    path = meminfo_path(environ)
    code, out, err = ssh.run(["sh", "-c", _READ, "sh", path])
    if code != 0 and path != MEMINFO:
        from cafleet.mux import first_line

        raise ConfigError(
            f"host {ssh.host} cannot read the file CAFLEET_MEMINFO names, {shown(path)} "
            f"({first_line(err) or f'exit status {code}'})."
        )
    return _checked(meminfo_available(out) if code == 0 else None, path, f"host {ssh.host}")


def _checked(available: int | None, path: str, where: str) -> int | None:
    if available is None and path != MEMINFO:
        raise ConfigError(
            f"the file CAFLEET_MEMINFO names on {where}, {shown(path)}, has no 'MemAvailable: N kB' line."
        )
    return available


def estimate(settings: config.Settings, agent: str) -> tuple[int, str | None]:
    """(MiB one member of ``agent`` is counted to need, the setting that says so or None)."""
    from cafleet.agents.backends import STANDIN

    if agent == STANDIN:
        return STANDIN_MIB, None
    name = ESTIMATES[agent]
    return getattr(settings, name.lower().removeprefix("cafleet_")), name


def room(settings: config.Settings, available: int, agent: str) -> int:
    """How many more members of ``agent`` fit in ``available`` MiB, the margin kept free."""
    return max(0, (available - settings.memory_margin) // estimate(settings, agent)[0])


def check_room(
    store: Store, settings: config.Settings, fleet_id: int, agent: str, host: str | None, force: bool
) -> None:
    """Refuse a new member of ``agent`` (on ``host``, or here) when its fleet is at its cap
    or its host lacks the memory, unless ``force``: a Conflict whose one line names the
    figures and the settings behind them. Runs before the member is registered."""
    if force:
        return
    cap = settings.fleet_max_members
    if cap is not None:
        from cafleet.broker import members

        count = members.count_besides_director(store, fleet_id)
        if count >= cap:
            raise Conflict(
                f"fleet {fleet_id} has {count} member{'s' if count != 1 else ''} besides its Director, its cap "
                f"(CAFLEET_FLEET_MAX_MEMBERS={cap}); nothing was created.",
                FORCE_HINT,
            )
    if host is None:
        available, where = available_here(settings.environ), "this machine"
    else:
        from cafleet.mux.ssh import Ssh

        available, where = available_on(Ssh(host, settings.environ), settings.environ), f"host {host}"
    if available is None:
        return
    need, name = estimate(settings, agent)
    margin = settings.memory_margin
    if available < need + margin:
        named = f" ({name})" if name else ""
        kept = f" and {margin} MiB kept free (CAFLEET_MEMORY_MARGIN)" if margin else ""
        article = "an" if agent[:1] in "aeiou" else "a"
        raise Conflict(
            f"{where} has {available} MiB of memory available; {article} {agent} member needs about {need} MiB{named}"
            f"{kept}; nothing was created.",
            FORCE_HINT,
        )
