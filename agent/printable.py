"""Text that came from another process, made safe to show on a terminal.

Label values from Prometheus, an engine's model name, an HTTP reason phrase, a server's `error` field: any of
them can hold terminal escapes (OSC 52 writes the user's clipboard, OSC 0 the window title, CSI 2J clears the
screen). Every place such text is shown passes it through `printable`, which swaps each character that is not
printable for one visible character of its own, so the text keeps its length (a span of styled text stays
where it was) and the user still sees that something odd was sent: a C0 control for its Unicode control
picture (ESC -> "␛"), anything else not printable (DEL, C1 controls, bidi overrides, line separators) for "�".
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"
_PICTURES = {code: chr(0x2400 + code) for code in range(0x20)} | {0x7F: "\u2421"}


def _shown(char: str) -> str:
    if char.isprintable():
        return char
    return _PICTURES.get(ord(char), REPLACEMENT)


def printable(text: str) -> str:
    """`text` with every character that is not printable swapped for a visible one, one for one."""
    if text.isprintable():
        return text
    return "".join(map(_shown, text))


def printable_lines(text: str) -> str:
    """`text` made printable line by line: its newlines kept, every other control swapped."""
    return "\n".join(map(printable, text.split("\n")))
