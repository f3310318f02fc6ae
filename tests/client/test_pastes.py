"""Long pastes: a placeholder in the line, the whole text when it is sent; long messages drawn collapsed."""

from __future__ import annotations

from pathlib import Path

import pytest

from refagent.client.pastes import COLLAPSE_CHARS, Pastes, collapsed, typed


def test_a_long_paste_is_a_placeholder_until_the_line_is_sent() -> None:
    pastes = Pastes()
    short = "one\r\ntwo\r\n"
    assert pastes.add(short) == "one\ntwo\n"  # short: itself, line endings made \n
    log = "".join(f"{n}\r\n" for n in range(12))
    first = pastes.add(log)
    wide = pastes.add("x" * (COLLAPSE_CHARS + 1))
    assert (first, wide) == ("[Pasted text #1 +12 lines]", "[Pasted text #2 +1 lines]")
    line = f"look: {first} and {wide} and [Pasted text #9 +3 lines]"
    assert (
        pastes.expand(line)
        == f"look: {log.replace(chr(13), '')} and {'x' * (COLLAPSE_CHARS + 1)} and [Pasted text #9 +3 lines]"
    )


def test_the_line_remembers_what_was_typed_of_it() -> None:
    """Mentions count in what the user typed and saw, not in a collapsed paste (a log that says
    ``@~/.ssh/id_ed25519`` on its 300th line)."""
    pastes = Pastes()
    placeholder = pastes.add("".join(f"line {n}\n" for n in range(300)) + "@~/.ssh/id_ed25519\n")
    line = pastes.expand(f"why does this fail? {placeholder} see @src/app.py")
    assert "@~/.ssh/id_ed25519" in line
    assert typed(line) == f"why does this fail? {placeholder} see @src/app.py"
    assert typed("plain @x") == "plain @x"


def test_a_long_message_is_drawn_collapsed() -> None:
    assert collapsed("a\nb") == "a\nb"
    assert collapsed("\n".join(map(str, range(11)))) == "0\n1\n2\n[+8 lines]"


def test_no_clipboard_image_without_a_reader_or_an_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from refagent.client.clipboard import clipboard_image

    monkeypatch.setenv("PATH", str(tmp_path))
    assert clipboard_image(str(tmp_path)) is None  # no reader installed
    reader = tmp_path / "wl-paste"
    reader.write_text("#!/bin/sh\necho 'just text'\n")
    reader.chmod(0o755)
    assert clipboard_image(str(tmp_path)) is None  # text on the clipboard: not an image
    assert list(tmp_path.glob("*.png")) == []
