"""Install the embedded agent assets where each coding agent looks for them (docs/agents.md).

Offline by construction: the files ship inside the package (``cafleet/agents/assets``)
and are read with :mod:`importlib.resources`. Per agent:

* claude: the ``cafleet`` skill in ``<CLAUDE_CONFIG_DIR or ~/.claude>/skills/cafleet/``.
* codex: the skill in ``<CODEX_HOME or ~/.codex>/skills/cafleet/`` and the rules file
  ``<CODEX_HOME or ~/.codex>/rules/cafleet.rules`` (codex loads every ``*.rules`` file
  there; it lets ``cafleet message ...`` run without approval).
* opencode: the skill in ``<XDG_CONFIG_HOME or ~/.config>/opencode/skills/cafleet/``
  (opencode honours ``XDG_CONFIG_HOME`` for its config directory) and the agent preset
  ``<OPENCODE_CONFIG_DIR or ~/.opencode>/agents/cafleet.md`` that ``--agent cafleet``
  selects.

Every location comes from the ``environ`` mapping the caller passes, never from the
running process, so tests and ``cafleet setup`` agree on one source of truth. A set
config variable must be an absolute path; an empty one counts as unset.

Each installed text carries the cafleet version (``@CAFLEET_VERSION@`` in the embedded
file; a ``metadata`` entry in SKILL.md, a comment elsewhere) so ``cafleet doctor`` can
tell an out-of-date install with :func:`installed_version`. Writes are atomic (temporary
file in the same directory + ``os.replace``) and idempotent: identical bytes are left
alone, so a second run reports ``unchanged`` and keeps the files' timestamps. Recording
the result in ``asset_installs`` is the caller's job.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cafleet.errors import ConfigError, shown

VERSION_PLACEHOLDER = "@CAFLEET_VERSION@"
VERSION_MARKER = "cafleet-version:"

CREATED = "created"
UPDATED = "updated"
UNCHANGED = "unchanged"

SKILL = "skills/cafleet/SKILL.md"
CODEX_RULES = "codex/rules/cafleet.rules"
OPENCODE_AGENT = "opencode/agents/cafleet.md"


@dataclass(frozen=True)
class AssetFile:
    """One embedded file (``source``, relative to ``cafleet/agents/assets``) and where it goes."""

    source: str
    dest: Path


@dataclass(frozen=True)
class AssetTarget:
    """One ``asset_installs`` row to be: ``path`` is a skill directory or a single file."""

    coding_agent: str
    path: Path
    files: tuple[AssetFile, ...]


@dataclass(frozen=True)
class InstalledAsset:
    """The outcome for one target: ``status`` is created, updated or unchanged."""

    coding_agent: str
    path: Path
    status: str


def _absolute(environ: Mapping[str, str], name: str) -> Path | None:
    """The directory in ``environ[name]``, None when unset or empty; relative is an error."""
    value = environ.get(name)
    if not value:
        return None
    if not os.path.isabs(value):
        raise ConfigError(f"{name} must be an absolute path, got {shown(value)}; fix it or unset it")
    return Path(value)


def _home(environ: Mapping[str, str]) -> Path:
    home = _absolute(environ, "HOME")
    if home is None:
        raise ConfigError(
            "HOME is not set; set it to your home directory so cafleet knows where to install agent assets"
        )
    return home


def _config_dir(environ: Mapping[str, str], name: str, *default: str) -> Path:
    found = _absolute(environ, name)
    return found if found is not None else _home(environ).joinpath(*default)


def _skill_target(agent: str, skills_dir: Path) -> AssetTarget:
    directory = skills_dir / "cafleet"
    return AssetTarget(agent, directory, (AssetFile(SKILL, directory / "SKILL.md"),))


def _file_target(agent: str, source: str, dest: Path) -> AssetTarget:
    return AssetTarget(agent, dest, (AssetFile(source, dest),))


def asset_targets(agent: str, environ: Mapping[str, str]) -> list[AssetTarget]:
    """Where ``agent``'s assets go under ``environ``. The hidden stand-in has none.

    Raises UsageError for an unknown agent and ConfigError for a relative config
    variable or a missing HOME (when a default under HOME is needed).
    """
    from cafleet.agents.backends import backend

    name = backend(agent).name
    if name == "claude":
        claude_dir = _config_dir(environ, "CLAUDE_CONFIG_DIR", ".claude")
        return [_skill_target(name, claude_dir / "skills")]
    if name == "codex":
        codex_home = _config_dir(environ, "CODEX_HOME", ".codex")
        return [
            _skill_target(name, codex_home / "skills"),
            _file_target(name, CODEX_RULES, codex_home / "rules" / "cafleet.rules"),
        ]
    if name == "opencode":
        xdg_config = _config_dir(environ, "XDG_CONFIG_HOME", ".config")
        preset_dir = _config_dir(environ, "OPENCODE_CONFIG_DIR", ".opencode")
        return [
            _skill_target(name, xdg_config / "opencode" / "skills"),
            _file_target(name, OPENCODE_AGENT, preset_dir / "agents" / "cafleet.md"),
        ]
    return []  # the stand-in reads nothing from disk


def asset_bytes(source: str) -> bytes:
    """The embedded file ``source`` as it is installed: the version filled in."""
    from importlib.resources import files

    from cafleet import __version__

    resource = files("cafleet.agents") / "assets"
    for part in source.split("/"):
        resource = resource / part
    text = resource.read_bytes().decode("utf-8")
    return text.replace(VERSION_PLACEHOLDER, __version__).encode("utf-8")


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write(dest: Path, data: bytes) -> str:
    """Write ``data`` to ``dest`` atomically unless it already holds exactly that."""
    try:
        old_stat = dest.stat()
        old = dest.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        old_stat, old = None, None
    except OSError as error:
        raise ConfigError(
            f"cannot read {dest}: {error.strerror or error}; fix or remove it, then rerun cafleet setup"
        ) from None
    if old == data:
        return UNCHANGED
    import tempfile

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cannot create the directory {dest.parent}: {error.strerror or error}; a file is in the way or access is denied"
        ) from None
    mode = (old_stat.st_mode & 0o777) if old_stat is not None else (0o666 & ~_current_umask())
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
        tmp = None
    except OSError as error:
        raise ConfigError(
            f"cannot write {dest}: {error.strerror or error}; check the directory's permissions"
        ) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return CREATED if old is None else UPDATED


def _combined(statuses: list[str]) -> str:
    if all(status == UNCHANGED for status in statuses):
        return UNCHANGED
    if all(status == CREATED for status in statuses):
        return CREATED
    return UPDATED


def install(agent: str, environ: Mapping[str, str]) -> list[InstalledAsset]:
    """Install ``agent``'s assets; one result per target, in :func:`asset_targets` order."""
    results = []
    for target in asset_targets(agent, environ):
        statuses = [_write(item.dest, asset_bytes(item.source)) for item in target.files]
        results.append(InstalledAsset(target.coding_agent, target.path, _combined(statuses)))
    return results


def installed_version(path: str | os.PathLike[str]) -> str | None:
    """The cafleet version recorded in an installed asset (a skill directory or a file),
    or None when it is missing, unreadable or carries no version."""
    location = Path(path)
    if location.is_dir():
        location = location / "SKILL.md"
    try:
        with open(location, "rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    for line in head.splitlines():
        _, marker, rest = line.partition(VERSION_MARKER)
        if marker:
            version = rest.strip().strip("\"'")
            return version or None
    return None
