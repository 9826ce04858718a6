"""The one error policy for NVML answers, whichever backend gives them.

- NotSupported (and NoPermission, and any other per-call error): the value is absent (None).
- FunctionNotFound (an older driver): absent, logged once per function per process.
- GpuIsLost: `DeviceLost` for that device; the caller marks it lost and goes on with the others.
- LibraryNotFound / DriverNotLoaded: `NoDriverError`, a node without a usable NVIDIA driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pynvml

from stagelens.probes.errors import NoDriverError
from stagelens.probes.nvml_backend import NVML_FUNCTION, NvmlBackend, error_name

log = logging.getLogger(__name__)

_NO_DRIVER = (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded)
_missing_logged: set[str] = set()


class DeviceLost(Exception):  # noqa: N818 - a state, not a failure of ours
    def __init__(self, index: int) -> None:
        super().__init__(f"GPU {index} is lost (NVML GpuIsLost)")
        self.index = index


def no_driver_error(exc: pynvml.NVMLError, source: str) -> NoDriverError:
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        why = "the NVML library (libnvidia-ml.so.1) could not be loaded"
    else:
        why = "the NVIDIA kernel driver is not loaded"
    message = f"no NVIDIA driver found: {why} (NVML {error_name(exc)})"
    if source != "NVIDIA driver":
        message += f", as replayed from {source}"
    return NoDriverError(message)


class NvmlReader:
    """Calls backend methods under the error policy; remembers what failed, per device, for the
    sample."""

    def __init__(self, backend: NvmlBackend) -> None:
        self.backend = backend
        # device (None: system) -> function -> error
        self.errors: dict[int | None, dict[str, str]] = {}

    def clear(self) -> None:
        self.errors = {}

    def get(self, method: str, *args: Any) -> Any:
        device = args[0] if args and method not in ("driver_version", "cuda_driver_version") else None
        return self.call(device, method, getattr(self.backend, method), *args)

    def call(self, device: int | None, method: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            return self.handle(device, method, exc)

    def handle(self, device: int | None, method: str, exc: pynvml.NVMLError) -> None:
        """Apply the policy to one error: raise for lost device / no driver, else record and
        return None."""
        function = NVML_FUNCTION.get(method, method)
        if isinstance(exc, _NO_DRIVER):
            raise no_driver_error(exc, self.backend.source) from exc
        if isinstance(exc, pynvml.NVMLError_GpuIsLost) and device is not None:
            raise DeviceLost(device) from exc
        if isinstance(exc, pynvml.NVMLError_FunctionNotFound) and function not in _missing_logged:
            _missing_logged.add(function)
            log.warning("NVML function %s not found in this driver; its values are absent", function)
        self.errors.setdefault(device, {})[function] = error_name(exc)
        return None

    def device_errors(self, device: int) -> dict[str, str]:
        """Failures of this device's calls other than NotSupported (which is just an absent
        value)."""
        return {f: e for f, e in self.errors.get(device, {}).items() if e != "NotSupported"}

    def unsupported(self, device: int) -> list[str]:
        return sorted(f for f, e in self.errors.get(device, {}).items() if e == "NotSupported")
