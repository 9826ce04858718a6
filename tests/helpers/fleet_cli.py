"""`stagelens fleet ...` run in-process, for the fleet's end-to-end and hostile tests."""

from __future__ import annotations

import pytest

from stagelens.cli import main


def fleet(capsys, *argv: str) -> tuple[int, str, str]:
    """`stagelens fleet ...` in-process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["fleet", *argv])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err
