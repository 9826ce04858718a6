"""The engine flags the bench scripts share (`--device`, `--model-dir`, `--smoke`) and timing that waits for
the device: a CUDA kernel returns before it has run, so a timer stops only after a synchronise."""

from __future__ import annotations

import argparse

import torch

from stagelens.engine_hooks.engine import EngineConfig
from stagelens.engine_hooks.engine.config import ConfigError


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto: where the engine and tensors run "
                                                        "[cpu]")
    parser.add_argument("--model-dir", help="where weight files are kept [a per-user cache]")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and the tiny model: that the script runs, "
                                                             "not figures")


def checked_device(parser: argparse.ArgumentParser, args: argparse.Namespace) -> torch.device:
    """The device `--device` names (`auto` resolved), refused in one line (exit 2) where this machine has none."""
    try:
        config = EngineConfig(model="tiny", device=args.device)   # validates the device as the engine will
    except ConfigError as exc:
        parser.error(str(exc))
    return torch.device(config.resolved_device())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
