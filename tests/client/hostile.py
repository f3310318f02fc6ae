"""Text an agent could send to make a terminal obey it, and how a test tells that a client showed it instead.

:data:`HOSTILE` holds one of each: a clipboard write (OSC 52), a window title (OSC 0, ended by ST), a cleared
screen, a forged line drawn over the real one (a carriage return, an erased line), a one-byte C1 CSI,
backspaces and DEL, concealed text. :data:`SHOWN` is how a client must draw it: each control character
as its escape (:func:`refagent.acp.text.visible`), written out here by hand so that the test does not
lean on the code it checks. A test wraps the text in :data:`BEGIN` and :data:`END` and looks at what was
drawn between them (:func:`drawn_between`): nothing there a terminal would obey (:func:`obeyed`), other
than the client's own colours (SGR, ``ESC [ ... m``) and line breaks.
"""

from __future__ import annotations

import re

HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07"
    "\x1b]0;pwned\x1b\\"
    " \x1b[2J\x1b[H"
    " \r\x1b[2K? Permission requested: Run ls"
    " \x9b31m"
    " abc\x08\x08\x08\x7f"
    " \x1b[8mhidden"
)
SHOWN = (
    "\\x1b]52;c;cm0gLXJmIH4=\\x07"
    "\\x1b]0;pwned\\x1b\\"
    " \\x1b[2J\\x1b[H"
    " \\r\\x1b[2K? Permission requested: Run ls"
    " \\x9b31m"
    " abc\\x08\\x08\\x08\\x7f"
    " \\x1b[8mhidden"
)
BEGIN, END = "<<", ">>"
MARKUP = "[bold red]not bold[/bold red] [link=https://evil.example]not a link[/link]"
"""Rich markup: a client must show these characters, not style or link by them."""

SGR = re.compile(r"\x1b\[[0-9;]*m")
OBEYED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal acts on, but for line breaks and tabs (a CRLF counts as a line break: a pty's own)."""


def obeyed(raw: str) -> list[str]:
    """The characters in ``raw`` a terminal would act on, once the colours and line breaks are set aside."""
    return OBEYED.findall(SGR.sub("", raw.replace("\r\n", "\n")))


def drawn_between(raw: str, begin: str = BEGIN, end: str = END) -> list[str]:
    """Each stretch of ``raw`` between ``begin`` and the next ``end`` with no other ``begin`` in it, as it was
    written (colours and all). A live region taller than the terminal is cropped, and a crop can cut a stretch
    after its ``begin``: the next ``end`` belongs to a later stretch, not to that one (whose ``begin`` would
    otherwise take in all the client drew between them, its own cursor moves included)."""
    return re.findall(re.escape(begin) + f"((?:(?!{re.escape(begin)}).)*?)" + re.escape(end), raw, re.DOTALL)


def plain(raw: str) -> str:
    """``raw`` without its colours (SGR) and with the pty's CRLF as a line break."""
    return SGR.sub("", raw.replace("\r\n", "\n"))
