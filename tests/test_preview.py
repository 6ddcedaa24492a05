"""The preview and the sanitiser: exact output for known hostile input, and
properties over arbitrary text (no control character survives, truncation is exact,
line breaks become ⏎, the header is exact)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from cafleet.delivery.keystrokes.preview import flatten, render_preview, sanitise

TS = "2025-06-01T12:34:56.789012+00:00"
KEPT_FORMAT = {"\u200c", "\u200d"}  # ZWNJ, ZWJ


def controls(text: str) -> list[str]:
    """Every character a terminal or input box could act on, or that hides or reorders
    text: C0, DEL, C1, line/paragraph separators, surrogates, format characters."""
    found = []
    for ch in text:
        category = unicodedata.category(ch)
        if category in ("Cc", "Cs", "Zl", "Zp") or (category == "Cf" and ch not in KEPT_FORMAT):
            found.append(ch)
    return found


NASTY = [
    "\x1b",
    "[",
    "]",
    "(",
    "P",
    "\\",
    "\x07",
    "\x9b",
    "\x9c",
    "\x9d",
    "\x90",
    "\r",
    "\n",
    "\t",
    "\x00",
    "\x03",
    "\x04",
    "\x15",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\u202e",
    "\u2066",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\U000e0041",
    "\ud800",
    "0",
    ";",
    "m",
    "~",
    "é",
    "漢",
    "⏎",
]
any_char = st.characters(exclude_categories=())  # surrogates included
nasty_text = st.text(alphabet=st.one_of(any_char, st.sampled_from(NASTY)), max_size=80)
plain_line = st.text(
    alphabet=st.characters(exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn")),
    min_size=1,
    max_size=30,
).filter(str.isprintable)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain text, nothing to do", "plain text, nothing to do"),
        ("a\x1b[31mred\x1b[0m b", "ared b"),  # CSI dropped whole, no "[31m" residue
        ("a\x1b[1;2;3 qb", "ab"),  # CSI with an intermediate byte
        ("x\x1b]0;pwned title\x07y", "xy"),  # OSC to BEL
        ("x\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\z", "xlinkz"),  # OSC 8 to ST
        ("x\x1bP1$qm\x1b\\y", "xy"),  # DCS
        ("x\x1b_apc\x9cy", "xy"),  # APC ended by the 8-bit ST
        ("x\x1b]never ends", "x"),  # unterminated string runs to the end, as in a terminal
        ("e\x1b(Bf\x1b7g\x1bch", "efgh"),  # short escapes: charset, save cursor, reset
        ("g\x9b31mh\x9d0;t\x07i", "ghi"),  # 8-bit CSI and OSC
        ("trailing\x1b", "trailing"),
        ("c\x03d\x04e\x7f\x00f\x15g\x08h", "cdefgh"),  # C0 and DEL dropped
        ("one\r\ntwo\rthree\nfour\x85five\u2028six\u2029seven", "one\ntwo\nthree\nfour\nfive\nsix\nseven"),
        ("tab\there", "tab here"),
        ("\u202eevil\u202c \u2066iso\u2069 \u200e\u200fm", "evil iso m"),  # bidi controls
        ("zero\u200bwidth\ufeffbom", "zerowidthbom"),
        ("hidden\U000e0049\U000e0067\U000e006e", "hidden"),  # Unicode tag smuggling
        ("keep 👨\u200d👩\u200d👧 and \u200c", "keep 👨\u200d👩\u200d👧 and \u200c"),
        ("nbsp\u00a0and\u3000ideographic", "nbsp\u00a0and\u3000ideographic"),
        ("lone \ud800 surrogate", "lone  surrogate"),
    ],
)
def test_sanitise_exact(raw, clean):
    assert sanitise(raw) == clean


def test_render_preview_exact():
    body = "Please review\r\nthe \x1b[1mparser\x1b[0m\tchanges\n"
    assert render_preview(42, 7, TS, body, 200) == (f"[cafleet msg 42 from 7 {TS}]\nPlease review⏎the parser changes⏎")


def test_render_preview_truncates_to_code_points():
    assert render_preview(1, 2, TS, "漢字かな交じり文", 4) == f"[cafleet msg 1 from 2 {TS}]\n漢字かな…"
    assert render_preview(1, 2, TS, "abcd", 4) == f"[cafleet msg 1 from 2 {TS}]\nabcd"
    assert render_preview(1, 2, TS, "a\nb", 2) == f"[cafleet msg 1 from 2 {TS}]\na⏎…"
    assert render_preview(1, 2, TS, "abc", 0) == f"[cafleet msg 1 from 2 {TS}]\n…"
    with pytest.raises(ValueError):
        render_preview(1, 2, TS, "abc", -1)


def test_flatten_is_one_line():
    assert flatten("[h]\nline\r\nnext\x1b[2K") == "[h]⏎line⏎next"


@settings(max_examples=300)
@given(nasty_text)
def test_sanitise_leaves_no_control_but_newline(text):
    clean = sanitise(text)
    assert set(controls(clean)) <= {"\n"}
    assert "\x1b" not in clean
    assert sanitise(clean) == clean  # idempotent: nothing new forms once sequences are gone


@settings(max_examples=300)
@given(nasty_text, nasty_text, st.integers(min_value=0, max_value=120))
def test_preview_has_exactly_one_control_the_separator(created_at, body, max_len):
    preview = render_preview(9, 3, created_at, body, max_len)
    assert controls(preview) == ["\n"]
    header, line = preview.split("\n")
    assert header.startswith("[cafleet msg 9 from 3 ") and header.endswith("]")
    assert len(line) <= max_len + 1


@given(st.text(max_size=60).filter(str.isprintable), st.integers(min_value=0, max_value=70))
def test_printable_body_is_kept_and_cut_exactly(body, max_len):
    line = render_preview(5, 6, TS, body, max_len).split("\n")[1]
    assert line == (body if len(body) <= max_len else body[:max_len] + "…")


@given(
    st.lists(plain_line, min_size=2, max_size=6),
    st.lists(st.sampled_from(["\r\n", "\r", "\n"]), min_size=5, max_size=5),
)
def test_every_line_break_becomes_one_mark(segments, breaks):
    body = segments[0] + "".join(b + s for b, s in zip(breaks, segments[1:]))
    line = render_preview(5, 6, TS, body, 10_000).split("\n")[1]
    assert line == "⏎".join(segments)


@given(
    st.integers(min_value=1, max_value=2**53),
    st.integers(min_value=1, max_value=2**53),
    st.from_regex(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", fullmatch=True),
)
def test_header_is_exact(message_id, sender, created_at):
    header = render_preview(message_id, sender, created_at, "x", 5).split("\n")[0]
    assert header == f"[cafleet msg {message_id} from {sender} {created_at}]"


@given(
    st.text(alphabet=st.characters(exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), max_size=20),
    st.sampled_from(
        [
            "\x1b[0m",
            "\x1b[38;2;1;2;3m",
            "\x1b[?2004h",
            "\x1b]0;title\x07",
            "\x1b]52;c;ZXZpbA==\x1b\\",
            "\x1bP+q544e\x1b\\",
            "\x1b(0",
            "\x1b#8",
            "\x1bM",
            "\x9b2J",
            "\x9d2;t\x9c",
        ]
    ),
    st.text(alphabet=st.characters(exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), max_size=20),
)
def test_sequences_vanish_whole(before, sequence, after):
    assert sanitise(before + sequence + after) == before + after
