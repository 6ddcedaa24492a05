#!/usr/bin/env bash
# Installs cafleet with its test dependencies (tmux, chromium, pytest, hypothesis,
# Playwright) and runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
exec .venv/bin/python -m pytest "$@"
