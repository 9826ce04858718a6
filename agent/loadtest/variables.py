"""The settings a sweep can vary, one at a time, each given on the command line as a comma list."""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.errors import UserError
from stagelens.lab.flag_values import FLAG_VALUES
from stagelens.lab.settings import BOUNDS


@dataclass(frozen=True)
class Variable:
    name: str            # the EngineConfig / WorkloadConfig field
    # raising it is raising load (or capacity): the throughput-gain rule of the knee applies
    load: bool
    engine: bool         # an engine setting (only on the bundled engine); else a workload setting

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse_one(self, text: str):
        """One value, read by the flag's own entry (agent/lab/flag_values.py): refused in the words
        `lab` and what-if's `--set` use for the same value."""
        return FLAG_VALUES[self.name].checked(self.flag, text.strip())

    def parse(self, text: str) -> list:
        values = [self.parse_one(part) for part in str(text).split(",") if part.strip()]
        if not values:
            raise UserError(f"{self.flag}: give one value or a comma list, got {text!r}")
        if len(set(values)) != len(values):
            raise UserError(f"{self.flag}: a value is listed twice in {text!r}")
        return values


def label(value) -> str:
    """A value as it is printed in tables and on the plot."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


VARIABLES: dict[str, Variable] = {v.name: v for v in (
    Variable("max_num_seqs", load=True, engine=True),
    Variable("max_num_batched_tokens", load=True, engine=True),
    Variable("block_size", load=False, engine=True),
    Variable("enable_chunked_prefill", load=False, engine=True),
    Variable("allocator", load=False, engine=True),
    Variable("policy", load=False, engine=True),
    Variable("rate", load=True, engine=False),
    Variable("concurrency", load=True, engine=False),
)}

# What `bench stress` may raise in 10% steps.
STRESSABLE = ("rate", "concurrency", "max_num_seqs", "max_num_batched_tokens")


def next_load(variable: Variable, value, step: float):
    """The load one step up: +step, and for whole numbers at least +1."""
    if BOUNDS[variable.name].integer:
        return max(int(value) + 1, round(value * (1 + step)))
    return round(value * (1 + step), 6)


def pick_swept(given: dict[str, str | None]) -> tuple[Variable, list, dict]:
    """From the comma-list flags the user gave: the one swept variable, its values, and the fixed
    ones."""
    parsed = {name: VARIABLES[name].parse(text) for name, text in given.items() if text is not None}
    swept = [name for name, values in parsed.items() if len(values) > 1]
    if len(swept) != 1:
        flags = ", ".join(VARIABLES[n].flag for n in VARIABLES)
        if not swept:
            raise UserError(f"bench sweep: give one variable as a comma list of two or more values ({flags})")
        raise UserError("bench sweep: change one variable at a time; got lists for "
                        + " and ".join(VARIABLES[n].flag for n in swept))
    name = swept[0]
    fixed = {n: values[0] for n, values in parsed.items() if n != name}
    return VARIABLES[name], parsed[name], fixed
