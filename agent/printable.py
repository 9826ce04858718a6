"""Text that came from another process, made safe to show on a terminal.

Label values from Prometheus, an engine's model name, an HTTP reason phrase, a server's `error`
field: any of them can hold terminal escapes (OSC 52 writes the user's clipboard, OSC 0 the window
title, CSI 2J clears the screen). Every place such text is shown passes it through `printable`,
which swaps each character that is not printable for one visible character of its own, so the text
keeps its length (a span of styled text stays where it was) and the user still sees that something
odd was sent: a C0 control for its Unicode control picture (ESC -> "␛"), anything else not printable
(DEL, C1 controls, bidi overrides, line separators) for "�".
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


# no document stagelens reads nests past a dozen levels; past this it is refused, not walked
MAX_DEPTH = 64


class TooDeep(ValueError):
    """JSON data nested past MAX_DEPTH."""


def printable_data(value):
    """JSON data (what json.loads returns) with every string in it, keys too, made printable: the
    data itself when nothing needs it (the common case, checked without copying), else a copy.
    TooDeep past MAX_DEPTH levels, so that whoever walks the data next does not recurse past
    Python's limit."""
    kind = type(value)
    if kind is str:
        return printable(value)
    if (kind is not list and kind is not dict) or _is_printable(value, 0):
        return value
    return _printable_copy(value, 0)


def _is_printable(value, depth: int) -> bool:
    """Whether every string in `value` (a list or an object) is printable; scalars are looked at
    inline, not by a call each (most of a frame is lists of numbers)."""
    if depth >= MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
    is_dict = type(value) is dict
    for item in value.values() if is_dict else value:
        kind = type(item)
        if kind is str:
            if not item.isprintable():
                return False
        elif (kind is list or kind is dict) and not _is_printable(item, depth + 1):
            return False
    return not is_dict or all(type(k) is not str or k.isprintable() for k in value)


def _printable_copy(value, depth: int):
    kind = type(value)
    if kind is str:
        return printable(value)
    if kind is not list and kind is not dict:
        return value
    if depth >= MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
    if kind is list:
        return [_printable_copy(item, depth + 1) for item in value]
    return {printable(k) if type(k) is str else k: _printable_copy(v, depth + 1) for k, v in value.items()}
