#!/usr/bin/env bash
# Installs cafleet into ./.venv, plus the system packages it needs (tmux).
# Usage: bash scripts/install.sh [--test]   (--test also installs the test dependencies,
# Debian's chromium for the WebUI browser tests, OpenSSH for the remote-host tests and
# postgresql + libpq5 for the PostgreSQL store's tests, npm for the real agents; CAFLEET_POSTGRES=1 installs libpq5,
# the PostgreSQL client library the store loads for a postgresql:// URL; a SQLite file never needs it)
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1

apt_packages=()
command -v tmux >/dev/null 2>&1 || apt_packages+=(tmux)
if [ "$with_tests" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
  # The remote-host tests run a real sshd on 127.0.0.1 and reach it with ssh.
  command -v ssh >/dev/null 2>&1 || apt_packages+=(openssh-client)
  { command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; } || apt_packages+=(openssh-server)
  # A real PostgreSQL server for the tests of the PostgreSQL store (they start their own cluster).
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_packages+=(postgresql)
  # npm (with Node.js) installs the pinned claude, codex and opencode the real-agent tests run.
  command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
  # The WebUI's login test makes a member's own curl ask the API without the token.
  command -v curl >/dev/null 2>&1 || apt_packages+=(curl)
fi
# libpq: the PostgreSQL store talks to the server through it (and the tests' psycopg loads it too).
if [ "$with_tests" = 1 ] || [ "${CAFLEET_POSTGRES:-}" = 1 ]; then
  ldconfig -p 2>/dev/null | grep -q 'libpq\.so\.5' || apt_packages+=(libpq5)
fi
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  apt_packages+=(python3-venv)
fi

if [ "${#apt_packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "cafleet needs these Debian packages: ${apt_packages[*]}; install them (as root) and rerun." >&2
    exit 1
  fi
  echo "installing Debian packages: ${apt_packages[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "cafleet needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
  exit 1
}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
if [ "$with_tests" = 1 ]; then
  .venv/bin/python -m pip install -q -e '.[test]'
elif [ "${CAFLEET_POSTGRES:-}" = 1 ]; then
  .venv/bin/python -m pip install -q '.[postgres]'
else
  .venv/bin/python -m pip install -q .
fi
echo "cafleet installed: $(.venv/bin/cafleet --version) at $(pwd)/.venv/bin/cafleet"
