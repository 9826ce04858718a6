"""JSON that another process sent (a `stagelens serve` answering `--connect`, Prometheus answering
the fleet): one checked, bounded parse.

A byte cap alone does not bound what the parse costs: `{},` is 3 bytes and ~70 bytes of Python
objects, so 200 MiB of it took `tui --connect` past 3 GB. Before json.loads, the items the text can
make are counted at the speed of bytes.count: every `{`, `[` and `,` (one per object, list and
element after the first; one inside a string counts too, so the count errs high). Past the caller's
limit the answer is refused unparsed. An item costs ~85 bytes at most once parsed (measured: objects
each holding an empty object; `{},` 36, real frames 55), so the limit bounds the memory. Then every
string, keys too, is made printable (agent.printable) and nesting is bounded, so no terminal escape
and no recursion past Python's limit reaches whoever reads the data next.
"""

from __future__ import annotations

import json

from stagelens.printable import TooDeep, printable_data

# An answer's items at most: real answers average ~18 bytes an item, so a 16 MiB one (the cap of
# agent/http_client.py) holds some 900,000 of them; a thousand nodes' fleet answer ~200,000.
# Parsed, ~85 MB at most.
MAX_ITEMS = 1_000_000


class AnswerRefused(ValueError):
    """JSON that is not, or is larger in items or deeper than allowed; the message says which, as
    words that follow "the answer" ("is not JSON")."""


class NotJson(AnswerRefused):
    """Text json.loads does not read (a caller may know better words for it: an HTML page, an
    error)."""


def count_items(body: bytes | bytearray) -> int:
    """An upper bound on the objects, lists and elements `body` can parse into (see the module's
    doc)."""
    return body.count(b"{") + body.count(b"[") + body.count(b",")


def parse_answer(body: bytes | bytearray, max_items: int = MAX_ITEMS):
    """The JSON data in `body`, every string in it printable; AnswerRefused when it is not JSON,
    would make more than `max_items` items, or nests too deeply."""
    if count_items(body) > max_items:
        raise AnswerRefused(f"holds more than {max_items:,} JSON items (objects, lists and their elements): "
                            "refused unparsed")
    try:
        data = json.loads(body)
    # UnicodeDecodeError is a ValueError; deep nesting recurses
    except (ValueError, RecursionError):
        raise NotJson("is not JSON") from None
    try:
        return printable_data(data)
    except TooDeep as exc:
        raise AnswerRefused(f"is JSON {exc}") from None
