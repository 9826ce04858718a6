"""How the value of each engine and workload flag is read, one entry a flag. `lab`'s flags (and
every command that takes them: agent/commands/flags.py) and what-if's `--set FLAG=VALUE` and
`--today` read a value through the same entry, so the same bad value is refused in the same words on
every command.

The bounds are the engine's and the workload's own (agent/lab/settings.py `BOUNDS`); their configs
check them again for settings built other ways (scenarios, `--fixed`, the API, bench sweeps)."""

from __future__ import annotations

import click

from stagelens.engine_hooks.shared.quoting import shown
from stagelens.lab.bundled_engine import CHOICES, read_size, refused_choice
from stagelens.lab.settings import BOUNDS
from stagelens.numbers import CheckedType, Number


class OneOf(CheckedType, click.Choice):
    """One of the names an engine setting takes, refused in the engine's own words
    (engine_hooks/engine/config.py `refused_choice`)."""

    def __init__(self, setting: str) -> None:
        super().__init__(CHOICES[setting])
        self.setting = setting

    def read(self, value) -> tuple[str | None, object]:
        return refused_choice(self.setting, value), value


class Size(CheckedType):
    """A size in bytes: 268435456, 256MiB, 1GB."""
    name = "size"

    def read(self, value) -> tuple[str | None, object]:
        return read_size(value)


# the words for on and off, wherever a switch is given a value (bench sweeps it as `on,off`)
SWITCH_WORDS = {"true": True, "false": False, "on": True, "off": False, "1": True, "0": False,
                "yes": True, "no": False}


class Switch(CheckedType):
    """On or off, given as a value (`--set enable-chunked-prefill=false`)."""
    name = "boolean"

    def read(self, value) -> tuple[str | None, object]:
        if isinstance(value, bool):
            return None, value
        word = str(value).strip().lower()
        if word not in SWITCH_WORDS:
            return f"must be true or false, got {shown(value)}", value
        return None, SWITCH_WORDS[word]


FLAG_VALUES: dict[str, CheckedType] = {
    **{name: Number(min=b.low, max=b.high, integer=b.integer, unit=b.unit, min_open=b.low_open)
       for name, b in BOUNDS.items()},
    "model": OneOf("model"),
    "allocator": OneOf("allocator"),
    "policy": OneOf("policy"),
    "dtype": OneOf("dtype"),
    "kv_cache_memory": Size(),
    # `lab` spells this one as a pair of switches (--enable-chunked-prefill / --no-...): read here
    # where it comes with a value
    "enable_chunked_prefill": Switch(),
}

