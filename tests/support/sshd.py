"""A real ``sshd`` on 127.0.0.1 standing in for "another host".

:func:`running_sshd` starts ``sshd -D -e`` as a child process on a free port, with a host
key, a client key and an ``authorized_keys`` file made in a private directory; nothing
under the real HOME (or ``/etc/ssh``) is read or written. The client side is an
``ssh_config`` file of its own (``CAFLEET_SSH_CONFIG`` points cafleet at it) naming the
host ``alias`` with its port, key and a known-hosts file in the same directory.

The remote side gets a HOME and a ``TMUX_TMPDIR`` of its own through sshd's ``SetEnv``,
so the tmux server cafleet starts "there" is not the test's local one. sshd is stopped by
its own pid; connection masters left by cafleet are closed with ``ssh -O exit`` first.

:func:`running_sshds` starts several such hosts (one folder, HOME, tmux socket directory
and sshd each) and writes one ``ssh_config`` naming them all, with one connection-master
directory for all of them, as a user's own configuration would: "three hosts" in a test
are this machine plus two of these.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/bin/sshd")
PRIVSEP_DIR = "/run/sshd"


def sshd_binary() -> str | None:
    found = shutil.which("sshd")
    if found:
        return found
    return next((path for path in SSHD_CANDIDATES if os.access(path, os.X_OK)), None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SshHost:
    """A running sshd: reach it as ``alias`` with ``ssh -F config``."""

    def __init__(
        self, root: Path, alias: str, port: int, remote_env: Mapping[str, str], control_dir: Path | None = None
    ) -> None:
        self.root = root
        self.control_dir = root / "control" if control_dir is None else control_dir
        self.alias = alias
        self.port = port
        self.config = root / "ssh_config"
        self.log = root / "sshd.log"
        self.remote_home = Path(remote_env["HOME"])
        self.remote_tmux_tmpdir = Path(remote_env["TMUX_TMPDIR"])
        self.remote_env = dict(remote_env)
        self.proc: subprocess.Popen | None = None
        self._log_handle = None

    # -- what the test observes ------------------------------------------------------------
    def accepted(self) -> int:
        """How many connections sshd has authenticated so far (its -e log)."""
        return self.log.read_text(encoding="utf-8", errors="replace").count("Accepted publickey")

    def ssh(self, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """Run ``command`` on the host over a fresh connection (no master): for checks."""
        return subprocess.run(
            ["ssh", "-F", str(self.config), "-o", "ControlMaster=no", "-o", "ControlPath=none", self.alias, command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def remote_tmux(self, *args: str) -> str:
        """A tmux command against cafleet's server on the host (``-L cafleet``), run locally
        with the host's TMUX_TMPDIR: the same machine, so no SSH is needed to look."""
        done = subprocess.run(
            ["tmux", "-L", "cafleet", *args],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "TMUX_TMPDIR": str(self.remote_tmux_tmpdir)},
        )
        if done.returncode != 0:
            raise RuntimeError(f"remote tmux {args[:1]} failed: {done.stderr.strip()}")
        return done.stdout

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        assert self.proc is None
        self._log_handle = open(self.log, "ab")  # noqa: SIM115 - sshd's output, held open for the child until stop
        offset = self.log.stat().st_size
        self.proc = subprocess.Popen(
            [sshd_binary(), "-D", "-e", "-f", str(self.root / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=self._log_handle,
        )
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited at start: {self.log.read_text(errors='replace')[-600:]}")
            if b"Server listening" in self.log.read_bytes()[offset:]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("sshd did not start listening within 20 s")
            time.sleep(0.02)

    def close_masters(self) -> None:
        """Close the connection master cafleet keeps for this host, if any (it is ours)."""
        subprocess.run(
            ["ssh", "-F", str(self.config), "-o", f"ControlPath={self.control_dir}/%C", "-O", "exit", self.alias],
            capture_output=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        """Stop sshd (by its pid) and drop the connection master: the host is unreachable."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self.proc = None
        self.close_masters()
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def change_host_key(self) -> None:
        """Stop sshd, give it a new host key and start it again: the known_hosts entry the
        client has is now wrong, as after a reinstall (or a man in the middle)."""
        self.stop()
        for name in ("host_key", "host_key.pub"):
            (self.root / name).unlink()
        _keygen(self.root / "host_key")
        self.start()

    def kill_remote_tmux(self) -> None:
        try:
            pid = int(self.remote_tmux("display-message", "-p", "#{pid}").strip())
        except (RuntimeError, ValueError):
            return
        subprocess.run(
            ["tmux", "-L", "cafleet", "kill-server"],
            capture_output=True,
            timeout=20,
            env={**os.environ, "TMUX_TMPDIR": str(self.remote_tmux_tmpdir)},
        )
        deadline = time.monotonic() + 20
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
            except OSError:
                break
            time.sleep(0.02)


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cafleet-test", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@contextmanager
def running_sshd(
    root: Path,
    remote_path: str,
    alias: str = "farhost",
    extra_env: Mapping[str, str] | None = None,
    control_dir: Path | None = None,
) -> Iterator[SshHost]:
    """Start an sshd in ``root`` (a fresh, short directory); stop it on exit.

    ``remote_path`` is PATH on the remote side (tmux, this Python, the venv's ``cafleet``);
    ``extra_env`` adds variables every remote session gets; ``control_dir`` is where the
    client's connection masters live (``root/control`` unless given).
    """
    if sshd_binary() is None:
        pytest.fail("sshd is not installed; run `bash scripts/install.sh --test` (openssh-server)")
    if not os.path.isdir(PRIVSEP_DIR):  # Debian's service makes it at boot; sshd -D needs it too
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    remote_home = root / "remote-home"
    remote_tmp = root / "remote-tmp"
    control_dir = root / "control" if control_dir is None else control_dir
    for folder in (remote_home, remote_tmp, control_dir):
        folder.mkdir(mode=0o700, exist_ok=True)
    _keygen(root / "host_key")
    _keygen(root / "client_key")
    shutil.copy(root / "client_key.pub", root / "authorized_keys")
    port = free_port()
    user = getpass.getuser()
    remote_env = {
        "HOME": str(remote_home),
        "TMUX_TMPDIR": str(remote_tmp),
        "PATH": remote_path,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        **(extra_env or {}),
    }
    for key, value in remote_env.items():
        assert " " not in value and '"' not in value, f"{key} must be a plain word for sshd's SetEnv"
    (root / "sshd_config").write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {root / 'host_key'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                "PidFile none",
                "StrictModes no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                f"AllowUsers {user}",
                "PrintMotd no",
                "LogLevel INFO",
                "SetEnv " + " ".join(f"{k}={v}" for k, v in remote_env.items()),
                "",
            ]
        ),
        encoding="utf-8",
    )
    host_pub = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n", encoding="utf-8")
    (root / "ssh_config").write_text(
        "\n".join(
            [
                f"Host {alias}",
                "  HostName 127.0.0.1",
                f"  Port {port}",
                f"  User {user}",
                f"  IdentityFile {root / 'client_key'}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {root / 'known_hosts'}",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes",
                "  CheckHostIP no",
                "",
            ]
        ),
        encoding="utf-8",
    )
    host = SshHost(root, alias, port, remote_env, control_dir)
    host.start()
    try:
        yield host
    finally:
        host.stop()
        host.kill_remote_tmux()


@contextmanager
def running_sshds(root: Path, remote_path: str, aliases: Sequence[str]) -> Iterator[tuple[Path, list[SshHost]]]:
    """One sshd per alias, each in ``root/<alias>``: (one ``ssh_config`` naming every host,
    the hosts). Their connection masters share ``root/control``."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    config = root / "ssh_config"
    with ExitStack() as stack:
        hosts = [
            stack.enter_context(running_sshd(root / alias, remote_path, alias, control_dir=root / "control"))
            for alias in aliases
        ]
        config.write_text("".join(host.config.read_text(encoding="utf-8") for host in hosts), encoding="utf-8")
        yield config, hosts
