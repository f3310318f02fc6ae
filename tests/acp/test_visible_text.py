"""Text harmless to a terminal (refagent.acp.text): :func:`visible`, :func:`one_line`, :func:`visible_strings`.

What a terminal obeys (C0, DEL, C1, the bidirectional overrides) is shown as the escape ``repr()`` writes
for it; everything else is left exactly as it was.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refagent.acp.text import one_line, visible, visible_strings

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
OBEYED = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | set(BIDI)
"""Every character :func:`visible` must not let through (``\\n`` and ``\\t`` only as layout)."""


def obeyed(text: str, layout: bool = False) -> set[str]:
    return {c for c in text if c in OBEYED and not (layout and c in "\n\t")}


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        ("\x1b]52;c;cm0gLXJmIH4=\x07", "\\x1b]52;c;cm0gLXJmIH4=\\x07"),  # a clipboard write (OSC 52)
        ("\x1b]0;pwned\x1b\\", "\\x1b]0;pwned\\x1b\\"),  # a window title, ended by ST
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # the screen cleared
        ("rm -rf ~\r\x1b[2KRun ls", "rm -rf ~\\r\\x1b[2KRun ls"),  # a line drawn over
        ("\x9b31m", "\\x9b31m"),  # the one-byte CSI (C1)
        ("abc\x08\x08\x08\x7f", "abc\\x08\\x08\\x08\\x7f"),
        ("a\nb\tc", "a\\nb\\tc"),  # not layout: one line
        ("\x00\x85", "\\x00\\x85"),
        ("file\u202eexe.txt", "file\\u202eexe.txt"),  # Trojan Source
    ],
)
def test_what_a_terminal_obeys_is_shown_as_its_escape(sent: str, shown: str) -> None:
    assert visible(sent) == shown


def test_other_text_is_left_as_it_is() -> None:
    text = r"C:\temp\new [bold red]x[/] `code` *em* café 日本語 🙂 \x1b" + "\u00a0\u200b\u2028"
    assert visible(text) == text
    assert visible(text, layout=True) == text


def test_layout_keeps_line_breaks_and_tabs_and_reads_crlf_as_a_line_break() -> None:
    assert visible("one\r\ntwo\tthree\n", layout=True) == "one\ntwo\tthree\n"
    # A lone carriage return would draw over its line: it is shown, as is one before a CRLF.
    assert visible("50%\r100%\r\r\n", layout=True) == "50%\\r100%\\r\n"
    assert visible("\x1b[31mred\x1b[0m\n", layout=True) == "\\x1b[31mred\\x1b[0m\n"


def test_one_line_joins_blanks_and_shows_the_rest() -> None:
    assert one_line("  Run  `ls`\n\t-la \r\n") == "Run `ls` -la"
    assert one_line("rm -rf /\rRun ls") == "rm -rf /\\rRun ls"
    assert one_line("a\x0bb\x0cc") == "a\\x0bb\\x0cc"
    assert one_line(" \n ") == ""


def test_visible_strings_reaches_every_string_but_not_the_keys() -> None:
    value = {"title": "a\x1b[2J", "n": 3, "ok": True, "none": None, "list": ["x\r\ny", {"\x1b": "\x07"}]}
    assert visible_strings(value) == {
        "title": "a\\x1b[2J",
        "n": 3,
        "ok": True,
        "none": None,
        "list": ["x\ny", {"\x1b": "\\x07"}],
    }


@given(st.text())
def test_nothing_obeyed_gets_through(text: str) -> None:
    assert not obeyed(visible(text))
    assert not obeyed(visible(text, layout=True), layout=True)
    assert not obeyed(one_line(text))
    assert "\n" not in one_line(text)
    assert not any(unicodedata.category(c) == "Cc" for c in one_line(text))


@given(st.text(st.characters(blacklist_characters=sorted(OBEYED))))
def test_text_without_controls_is_unchanged(text: str) -> None:
    assert visible(text) == text
