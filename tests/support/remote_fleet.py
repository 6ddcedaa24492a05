"""A live local fleet with members on other hosts: real ``sshd`` hosts on 127.0.0.1
(tests/support/sshd.py) named in one ssh_config, and the Director in a private tmux server
(tests/support/pane_fleet.py). Shared by the remote-host and the secrets tests."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from tests.support.pane_fleet import tmux_fleet
from tests.support.sshd import running_sshds


@contextmanager
def short_directory():
    """A short private directory (sockets have a ~100-byte path limit)."""
    path = Path(tempfile.mkdtemp(prefix="cf-ssh-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, aliases):
    """(fleet, hosts): a live local fleet and one reachable host per alias, all named in
    one ssh_config (CAFLEET_SSH_CONFIG) with one connection-master directory."""
    remote_path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    with running_sshds(short_dir, remote_path, aliases) as (config, hosts):
        for key, value in {
            "CAFLEET_SSH_CONFIG": str(config),
            "CAFLEET_SSH_CONTROL_DIR": str(short_dir / "control"),
        }.items():
            env[key] = value
            monkeypatch.setenv(key, value)
        with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
            yield fleet, hosts


def create_remote_args(fleet, host, name: str) -> list[str]:
    """``member create`` of a stand-in named ``name`` on ``host``, without the prompt."""
    return [
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        name,
        "--description",
        f"{name} far away",
        "--coding-agent",
        "standin",
        "--host",
        host.alias,
    ]


def create_remote(fleet, host, name: str, *extra: str):
    return fleet.cafleet(*create_remote_args(fleet, host, name), *extra, "Wait for tasks from {director_member_id}.")


def remote_panes(host) -> dict[str, str]:
    """pane id -> pane pid on the host's cafleet tmux server."""
    try:
        out = host.remote_tmux("list-panes", "-a", "-F", "#{pane_id}\t#{pane_pid}")
    except RuntimeError:
        return {}
    return dict(line.split("\t") for line in out.splitlines())


def proc_environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace").split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)
