"""Reaching a multiplexer on another host over SSH: the user's own ``ssh``, its config and keys.

A placement whose pane lives on another host stores its tmux session as

    ssh://[user@]host[:port]/<session_id>@<socket_path>

in ``member_placements.mux_session``: the part after ``ssh://`` and before the next ``/``
is an OpenSSH destination (a host name, an alias of the user's ``ssh_config``, an IPv4
address or a bracketed IPv6 one, optionally with a user and a port); the rest is exactly
what a local tmux placement stores. A session without the ``ssh://`` prefix is local, and
local placements are byte-for-byte what they always were. Pane ids and identities are the
remote tmux server's own.

The destination is given to ssh as ``[user@]host`` and ``-p port``, never as an
``ssh://`` URI: OpenSSH (9.2) refuses ``ssh://[::1]:22``, so an IPv6 address loses its
brackets there and its port is passed apart, like any other host's.

Every operation is one ``ssh`` process running one tmux command line on the host: the
argv cafleet would have run locally, each word quoted with :func:`shlex.quote` for the
remote shell, so a guarded ``if-shell -F`` (identity check and keystrokes in one tmux
call) stays one atomic call there. The user's shell on the host may print before it runs
the command (a ``.bashrc`` that greets or warns: bash reads it for commands sshd starts),
so the command first prints a marker unique to the call on stdout and stderr, then
``exec``s the argv; what came before the marker on each stream is the shell's and is
dropped. A host that never printed the marker did not run the command (its shell ended
first), which is said as such. Connections are shared per host through OpenSSH's
connection multiplexing (``ControlMaster=auto``, a ``ControlPath`` in a private directory,
``ControlPersist``): only the first call to a host pays the handshake. ``BatchMode=yes``:
ssh never prompts, a host that needs a password or an unknown host key fails at once.

ssh exits 255 when it could not reach the host (or the connection broke); that is reported
as a :class:`~cafleet.errors.MuxError` naming the host, so the delivery path keeps the
message owed and warns, and supervision reports the member dead. A host key that no longer
matches known_hosts is told as that, with the fingerprint ssh saw and its own command for
removing the old key, never as ssh's ``@@@@`` banner.
"""

from __future__ import annotations

from cafleet.errors import MuxError

PREFIX = "ssh://"
SSH_FAILED = 255  # ssh's own exit status for "could not connect / connection lost"
CONTROL_PERSIST = "10m"
CONNECT_TIMEOUT = 5
_KEY_CHANGED = "REMOTE HOST IDENTIFICATION HAS CHANGED"
# Run on the host through its user's shell: the marker ($0) on both streams, then the argv.
_MARKED = 'printf "%s\\n" "$0" && printf "%s\\n" "$0" >&2 && exec "$@"'
# A user, a host (name, IPv4, or bracketed IPv6) and a port: what a URI destination allows,
# and nothing the remote shell or ssh's option parser could misread.
_HOST_PATTERN = r"(?:[A-Za-z0-9_][A-Za-z0-9._-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"


def check_host(host: str) -> str:
    """``host`` when it is a usable ``[user@]host[:port]``; else a MuxError."""
    import re

    if not re.fullmatch(_HOST_PATTERN, host or ""):
        raise MuxError(
            f"{host!r} is not a host cafleet can reach; give [user@]host[:port] "
            "(a name, an ssh_config alias, an IPv4 address or a bracketed IPv6 address)."
        )
    return host


def split_session(session: str) -> tuple[str | None, str]:
    """(host, the multiplexer's own session string); host is None for a local placement."""
    if not session.startswith(PREFIX):
        return None, session
    host, sep, rest = session[len(PREFIX) :].partition("/")
    try:
        if sep:
            return check_host(host), rest
    except MuxError:
        pass
    from cafleet.mux import damaged

    raise damaged("session", session, "ssh://[user@]host[:port]/<session>")


def destination(host: str) -> tuple[str, str | None]:
    """(``[user@]address``, port or None) of a checked ``[user@]host[:port]``: what ssh takes
    as its destination and ``-p``; an IPv6 address without its brackets."""
    user, at, rest = check_host(host).rpartition("@")
    if rest.startswith("["):
        address, _, after = rest[1:].partition("]")
        port = after[1:] or None
    else:
        address, _, port_text = rest.partition(":")
        port = port_text or None
    return f"{user}{at}{address}", port


def join_session(host: str, session: str) -> str:
    """The stored form of a session on ``host``."""
    return f"{PREFIX}{check_host(host)}/{session}"


def control_dir(environ) -> str:
    """A directory only this user can enter, for the connection masters' sockets.

    ``CAFLEET_SSH_CONTROL_DIR``, else ``$XDG_RUNTIME_DIR/cafleet-ssh``, else
    ``<tmp>/cafleet-ssh-<uid>``; created 0700 and refused when another user owns it or can
    enter it (a socket there would hand our connection to them).
    """
    import os
    import stat
    import tempfile

    chosen = environ.get("CAFLEET_SSH_CONTROL_DIR", "")
    if not chosen:
        runtime = environ.get("XDG_RUNTIME_DIR", "")
        chosen = (
            os.path.join(runtime, "cafleet-ssh")
            if runtime
            else os.path.join(tempfile.gettempdir(), f"cafleet-ssh-{os.getuid()}")
        )
    try:
        os.makedirs(chosen, mode=0o700, exist_ok=True)
        info = os.lstat(chosen)
    except OSError as error:
        raise MuxError(
            f"cannot use {chosen} for SSH connection sockets ({error.strerror}); "
            "set CAFLEET_SSH_CONTROL_DIR to a private directory."
        ) from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise MuxError(
            f"{chosen} is not a private directory of this user, so it cannot hold SSH connection "
            "sockets; remove it or set CAFLEET_SSH_CONTROL_DIR to a private directory."
        )
    return chosen


class Ssh:
    """How to run one command line on ``host`` (``[user@]host[:port]``)."""

    def __init__(self, host: str, environ=None) -> None:
        from cafleet.config import process_environ

        self.host = check_host(host)
        self.environ = process_environ() if environ is None else environ

    def argv(self, remote_argv, marker: str | None = None) -> list[str]:
        """The local argv that runs ``remote_argv`` (a list of words) on the host; with
        ``marker``, the host's shell first prints it on stdout and stderr (one line each)."""
        import shlex

        words = list(remote_argv)
        if marker is not None:
            words = ["exec", "sh", "-c", _MARKED, marker, *words]
        address, port = destination(self.host)

        options = [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={CONNECT_TIMEOUT}",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={control_dir(self.environ)}/%C",
            "-o",
            f"ControlPersist={CONTROL_PERSIST}",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=2",
            "-T",
            "-x",
        ]
        config = self.environ.get("CAFLEET_SSH_CONFIG", "")
        if config:
            options = ["-F", config, *options]
        if port is not None:
            options += ["-p", port]
        return ["ssh", *options, address, " ".join(shlex.quote(word) for word in words)]

    def unreachable(self, stderr: str) -> MuxError:
        from cafleet.mux import first_line

        if _KEY_CHANGED in stderr:
            return MuxError(self._key_changed(stderr))
        unbannered = "\n".join(line.strip(" \t@") for line in stderr.splitlines())  # ssh frames warnings in @
        return MuxError(f"host {self.host} cannot be reached over SSH ({first_line(unbannered) or 'ssh failed'}).")

    def _key_changed(self, stderr: str) -> str:
        """The one line for a host key that is not the one known_hosts recorded."""
        from cafleet.render import inline

        words = stderr.split()
        fingerprint = next((word.rstrip(".") for word in words if word.startswith("SHA256:")), None)
        remove = next((line.strip() for line in stderr.splitlines() if line.strip().startswith("ssh-keygen ")), None)
        seen = f" (it now offers {inline(fingerprint)})" if fingerprint else ""
        then = f"`{inline(remove)}`" if remove else "`ssh-keygen -R <host>`"
        return (
            f"the SSH host key of {self.host} has changed since known_hosts recorded it{seen}, so ssh refused to "
            "connect: the host was reinstalled, or someone is intercepting the connection; check the new key "
            f"with the host's administrator, then remove the old one with {then}."
        )

    def run(self, remote_argv, timeout: float = 15.0, input: bytes | None = None) -> tuple[int, str, str]:
        """Run ``remote_argv`` on the host: (exit status, stdout, stderr); MuxError when ssh
        itself failed (not installed, no answer in ``timeout`` s, or could not connect).
        ``input`` goes to the remote command's standard input (never its argv)."""
        import os
        import subprocess

        marker = f"cafleet-ssh-{os.urandom(8).hex()}"
        argv = self.argv(remote_argv, marker)
        try:
            if input is None:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
            else:
                done = subprocess.run(argv, input=input, capture_output=True, timeout=timeout)
        except FileNotFoundError:
            raise MuxError(
                "ssh is not installed or not on PATH; install OpenSSH's client to reach other hosts."
            ) from None
        except subprocess.TimeoutExpired:
            raise MuxError(f"host {self.host} did not answer over SSH within {timeout:g} s.") from None
        begins = f"{marker}\n".encode()
        out, ours = _after(done.stdout, begins)
        err = _after(done.stderr, begins)[0].decode("utf-8", "replace")
        if done.returncode == SSH_FAILED:
            raise self.unreachable(err)
        if not ours:
            from cafleet.mux import first_line

            raise MuxError(
                f"host {self.host} did not run cafleet's command over SSH: its shell ended before it "
                f"({first_line(err) or f'exit status {done.returncode}'}); check the shell's start-up files there."
            )
        return done.returncode, out.decode("utf-8", "replace"), err


def _after(data: bytes, marker: bytes) -> tuple[bytes, bool]:
    """(what follows the first ``marker`` in ``data``, whether it was there); without it, all."""
    at = data.find(marker)
    return (data, False) if at < 0 else (data[at + len(marker) :], True)
