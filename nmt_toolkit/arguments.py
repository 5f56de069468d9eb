"""Checks of command-line values shared by the library and the scripts: a number or a device name
that would reach PyTorch or transformers as nonsense (a zero beam, a NaN penalty, "gpu") is refused
at once, naming the flag.

- `check_positive_int`, `check_finite_number`: for values read into dataclasses (HfArgumentParser)
  or passed to the library;
- `positive_int`, `non_negative_int`, `finite_float`: argparse `type=` converters, so a bad value is
  a one-line usage error before any work;
- `check_device`: a device name that PyTorch knows and that this machine has.
"""

import argparse
import math

import torch


def check_positive_int(value, flag: str, allow_none: bool = False) -> None:
    """Refuse anything but an integer >= 1 (or None with `allow_none`)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{flag} must be a positive integer, got {value!r}.")


def check_finite_number(
    value, flag: str, minimum: float | None = None, positive: bool = False
) -> None:
    """Refuse NaN, infinities, non-numbers and values below `minimum` (or not above 0, with
    `positive`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{flag} must be a finite number, got {value!r}.")
    if positive and value <= 0:
        raise ValueError(f"{flag} must be a positive number, got {value!r}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"{flag} must be at least {minimum}, got {value!r}.")


def positive_int(text: str) -> int:
    """argparse `type=` for counts (beams, steps, sentences, threads): an integer >= 1."""
    value = _parse(int, text, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """argparse `type=` for counts that may be zero (warm-up steps)."""
    value = _parse(int, text, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or a positive integer, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """argparse `type=` for rates and penalties: a finite number (not nan or inf)."""
    value = _parse(float, text, "a number")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _parse(kind, text: str, what: str):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def check_device(name: str, flag: str = "--device") -> str:
    """`name` if PyTorch knows the device type and this machine has the device; a ValueError saying
    what to use otherwise (PyTorch's own errors come late, deep in `.to()`, or list every device
    type it was built for)."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"{flag} {name!r} is not a device name: use cpu, cuda, cuda:1, mps, ..."
        ) from None
    available, count = _device_availability(device.type)
    if not available:
        raise ValueError(
            f"{flag} {name}: PyTorch sees no {device.type} device on this machine "
            f"(torch.{device.type}.is_available() is False); use {flag} cpu."
        )
    if device.index is not None and count is not None and device.index >= count:
        raise ValueError(
            f"{flag} {name}: this machine has {count} {device.type} device(s), numbered from 0."
        )
    return name


def _device_availability(device_type: str) -> tuple[bool, int | None]:
    """(is it available, how many) for the device types worth checking; other types are left to
    PyTorch."""
    if device_type == "cuda":
        available = torch.cuda.is_available()
        return available, torch.cuda.device_count() if available else 0
    if device_type == "mps":
        return torch.backends.mps.is_available(), None
    module = getattr(torch, device_type, None)
    if device_type != "cpu" and hasattr(module, "is_available"):
        return bool(module.is_available()), None
    return True, None


__all__ = [
    "check_positive_int",
    "check_finite_number",
    "positive_int",
    "non_negative_int",
    "finite_float",
    "check_device",
]
