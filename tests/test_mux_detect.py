"""Backend detection and reaching panes from the environment or a stored placement."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cafleet.errors import ConfigError, CorruptRow, MuxError
from cafleet.mux.detect import (
    detect_backend,
    multiplexer_for_environment,
    multiplexer_for_placement,
)
from cafleet.mux.herdr import Herdr
from cafleet.mux.tmux import Tmux

TMUX = {"TMUX": "/tmp/tmux-1/default,42,0", "TMUX_PANE": "%3"}
HERDR = {"HERDR_ENV": "1", "HERDR_PANE_ID": "w1:p2", "HERDR_SOCKET_PATH": "/tmp/h.sock"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (TMUX, "tmux"),
        (HERDR, "herdr"),
        ({**TMUX, "CAFLEET_MULTIPLEXER": "herdr"}, "herdr"),
        ({**HERDR, "CAFLEET_MULTIPLEXER": "tmux"}, "tmux"),
        ({**TMUX, **HERDR, "CAFLEET_MULTIPLEXER": "tmux"}, "tmux"),
        ({**TMUX, **HERDR, "CAFLEET_MULTIPLEXER": "herdr"}, "herdr"),
        ({"CAFLEET_MULTIPLEXER": "herdr"}, "herdr"),
        ({**TMUX, "HERDR_ENV": ""}, "tmux"),
        ({**HERDR, "TMUX": ""}, "herdr"),
        ({**TMUX, "CAFLEET_MULTIPLEXER": ""}, "tmux"),
    ],
)
def test_detection_matrix(environ, expected):
    assert detect_backend(environ) == expected


@pytest.mark.parametrize("value", ["screen", "TMUX", " tmux", "zellij"])
def test_unknown_multiplexer_setting_is_a_config_error(value):
    with pytest.raises(ConfigError) as caught:
        detect_backend({**TMUX, "CAFLEET_MULTIPLEXER": value})
    assert str(caught.value) == f"CAFLEET_MULTIPLEXER must be one of tmux, herdr, got {value!r}."


def test_both_multiplexers_are_ambiguous():
    with pytest.raises(MuxError, match="ambiguous; set CAFLEET_MULTIPLEXER to tmux or herdr"):
        detect_backend({**TMUX, **HERDR})


@pytest.mark.parametrize("environ", [{}, {"TMUX": "", "HERDR_ENV": ""}, {"TMUX_PANE": "%1"}])
def test_no_multiplexer_says_where_to_run(environ):
    with pytest.raises(MuxError, match="run inside a tmux or herdr session"):
        detect_backend(environ)


def test_environment_builds_the_calling_panes_backend():
    tmux = multiplexer_for_environment(TMUX, timeout=2.5)
    assert isinstance(tmux, Tmux)
    assert (tmux.socket, tmux.pane, tmux.timeout) == ("/tmp/tmux-1/default", "%3", 2.5)
    herdr = multiplexer_for_environment({**HERDR, "CAFLEET_HERDR_BIN": "/opt/herdr"})
    assert isinstance(herdr, Herdr)
    assert (herdr.socket, herdr.pane, herdr.binary) == ("/tmp/h.sock", "w1:p2", "/opt/herdr")


def test_placement_builds_a_backend_for_the_stored_session():
    tmux = multiplexer_for_placement("tmux", "$2@/tmp/sock@dir/default")
    assert isinstance(tmux, Tmux) and tmux.socket == "/tmp/sock@dir/default"
    herdr = multiplexer_for_placement("herdr", "w3@/tmp/h.sock")
    assert isinstance(herdr, Herdr)
    assert (herdr.workspace, herdr.socket) == ("w3", "/tmp/h.sock")
    assert multiplexer_for_placement("herdr", "w3").socket is None


def test_unknown_stored_backend_is_a_corrupt_row():
    with pytest.raises(CorruptRow, match="stored multiplexer backend 'screen' is not tmux or herdr"):
        multiplexer_for_placement("screen", "x")


def test_a_tmux_pane_is_reached_again_through_its_stored_placement(tmux_server):
    environ = tmux_server.environ_for(tmux_server.main_pane())
    context = multiplexer_for_environment(environ).current_pane()
    assert context.backend == "tmux"
    assert multiplexer_for_placement(context.backend, context.session).pane_exists(context.pane_id)


def test_a_herdr_pane_is_reached_again_through_its_stored_placement(herdr_env):
    context = multiplexer_for_environment(herdr_env.environ).current_pane()
    assert (context.backend, context.pane_id) == ("herdr", "w1:p1")
    assert multiplexer_for_placement(context.backend, context.session).pane_exists(context.pane_id)


EXPENSIVE = {"subprocess", "json", "re", "typing", "dataclasses", "shlex"}


@pytest.mark.parametrize(
    ("module", "also_unwanted"),
    [
        ("cafleet.mux.detect", {"cafleet.mux.tmux", "cafleet.mux.herdr", "cafleet.mux.base"}),
        ("cafleet.mux.tmux", {"cafleet.mux.base"}),
        ("cafleet.mux.herdr", {"cafleet.mux.base"}),
    ],
)
def test_importing_mux_modules_loads_nothing_expensive(module, also_unwanted):
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"import {module}\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30).stdout
    loaded = set(out.split())
    assert module in loaded
    assert not loaded & (EXPENSIVE | also_unwanted)
