"""Numbers that enter from the command line and from config files: finite, whole where they count
things, in range, and refused in one line that names where they came from, the bounds and the unit.

`checked_number` is for values a reader already holds (TOML, JSON, the text after `--threshold S=`);
`Number` is the same rule as a click parameter type. Engine and workload bounds are not here: the
engine's configs hold those (engine_hooks/engine/config.py), this only makes sure they get numbers.
"""

from __future__ import annotations

import math
import re
import sys

import click

from stagelens.engine_hooks.shared.quoting import shown
from stagelens.errors import UserError


def checked_number(where: str, value, *, min: float | None = None, max: float | None = None,
                   integer: bool = False, unit: str = "", min_open: bool = False) -> int | float:
    """`value` (a number, or its text) as an int or float; UserError starting with `where`
    otherwise."""
    return Number(min, max, integer=integer, unit=unit, min_open=min_open).checked(where, value)


class CheckedType(click.ParamType):
    """A click parameter type that refuses a value in one line, `FLAG: what is wrong`. `read` says
    what is wrong without naming the flag, for a reader that names it its own way (what-if's
    `--set`), so that the same value is refused in the same words wherever it is typed."""

    def read(self, value) -> tuple[str | None, object]:
        """(what is wrong or None, the value read)."""
        raise NotImplementedError

    def checked(self, where: str, value):
        """The value read; UserError starting with `where` where it is refused."""
        problem, read = self.read(value)
        if problem:
            raise UserError(f"{where}: {problem}")
        return read

    def convert(self, value, param, ctx):
        problem, read = self.read(value)
        if problem:
            flag = param.opts[0] if param is not None and param.opts else "value"
            raise click.UsageError(f"{flag}: {problem}", ctx)
        return read


class Number(CheckedType):
    """A click parameter type: `checked_number` for a flag's value."""

    def __init__(self, min: float | None = None, max: float | None = None, *,
                 integer: bool = False, unit: str = "", min_open: bool = False) -> None:
        self.min, self.max, self.integer, self.unit, self.min_open = min, max, integer, unit, min_open
        self.name = "integer" if integer else "number"

    def read(self, value) -> tuple[str | None, int | float]:
        return _check(value, self.min, self.max, self.integer, self.unit, self.min_open)


def _check(value, low, high, integer: bool, unit: str, low_open: bool) -> tuple[str | None, int | float]:
    """(what is wrong or None, the number)."""
    wanted = _describe(low, high, integer, unit, low_open)
    number = value
    if isinstance(value, str):
        number = number_of_text(value, integer)
        if number is None:
            return f"must be {wanted}, got {shown(value)}", value
    if isinstance(number, bool) or not isinstance(number, int if integer else int | float):
        return f"must be {wanted}, got {shown(value)}", value
    if isinstance(number, float) and not math.isfinite(number):
        return f"must be {wanted.replace('a number', 'a finite number', 1)}, got {number}", number
    if (low is not None and (number <= low if low_open else number < low)) or (high is not None and number > high):
        return f"must be {wanted}, got {_text(number)}", number
    return None, number


_INTEGER = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE)


def number_of_text(text: str, integer: bool = False) -> int | float | None:
    """The number `text` writes with ASCII digits (a sign, a point, an exponent; inf and nan by
    name, for the caller to refuse in its own words), or None. int() and float() read more than
    that: another script's digits (`٣` is 3) and underscores (`1_0` is 10), which no flag or
    setting of ours means."""
    text = text.strip()
    if not (_INTEGER if integer else _REAL).fullmatch(text):
        return None
    try:
        return int(text) if integer else float(text)
    except ValueError:      # an integer past int()'s 4,300 digits
        return None


def _describe(low, high, integer: bool, unit: str, low_open: bool) -> str:
    """'a whole number in [1, 64] models', 'a number (ratio)': the words engine_hooks' Bound uses
    too."""
    number = "a whole number" if integer else "a number"
    if low is not None and high is not None:
        return f"{number} in {'(' if low_open else '['}{_text(low)}, {_text(high)}]{' ' + unit if unit else ''}"
    if low is not None:
        number += f" {'>' if low_open else '>='} {_text(low)}"
    elif high is not None:
        number += f" <= {_text(high)}"
    return f"{number} ({unit})" if unit else number


def _text(x) -> str:
    if isinstance(x, int):
        return str(x) if x.bit_length() <= 80 else f"a {x.bit_length()}-bit number"
    return f"{x:g}"


def is_finite_number(value) -> bool:
    """A number arithmetic can use: not a boolean, not NaN or an infinity (Python's json reads
    both), not a whole number too large for a float (10**400: the comparison, unlike
    `math.isfinite`, does not overflow)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return -sys.float_info.max <= value <= sys.float_info.max
