"""The options of a suite's embedded default (``demo --set KEY=VALUE``), declared by the suite and checked here.

A suite lists its demo options as ``embedded_options = {"n_items": DemoOption(int, 36, "phantom VQA items",
minimum=1)}``; :func:`check_demo_options` refuses a bad key or value in one line naming the key the user typed
and listing the valid keys, before any file is written, and returns the values converted (a whole number, a
boolean) for the suite's ``embedded_config``.

>>> spec = {"n_images": DemoOption(int, 40, "phantom images", minimum=2), "fast": DemoOption(bool, False, "skip")}
>>> check_demo_options("reports", {"n_images": 12.0, "fast": True}, spec)
{'n_images': 12, 'fast': True}
>>> check_demo_options("reports", {"n_images": 2.9}, spec)
Traceback (most recent call last):
...
medvlm_audit.errors.ConfigError: demo --set n_images=2.9: the reports default's n_images must be a whole number >= 2 (phantom images; default 40)
>>> check_demo_options("reports", {"log": 1}, spec)
Traceback (most recent call last):
...
medvlm_audit.errors.ConfigError: demo --set log: the reports default has no option 'log'; its options: n_images (phantom images; whole number >= 2, default 40), fast (skip; true or false, default false)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from medvlm_audit.errors import ConfigError


@dataclass(frozen=True)
class DemoOption:
    """One option of an embedded default: its type (``int`` or ``bool``), default, a few words of help and, for a
    whole number, its smallest and largest accepted value."""

    kind: type
    default: Any
    help: str
    minimum: int | None = None
    maximum: int | None = None

    def describe(self) -> str:
        """``'whole number >= 2, default 40'`` / ``'true or false, default false'``."""
        if self.kind is bool:
            return f"true or false, default {str(self.default).lower()}"
        return f"{self._range()}, default {self.default}"

    def _range(self) -> str:
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return f"whole number in {lo}..{hi}"
        if lo is not None:
            return f"whole number >= {lo}"
        return f"whole number <= {hi}" if hi is not None else "whole number"


def describe_options(spec: Mapping[str, DemoOption]) -> str:
    """The valid keys of ``spec`` in one line (``"none"`` when the default takes no option)."""
    return ", ".join(f"{k} ({o.help}; {o.describe()})" for k, o in spec.items()) or "none (it takes no option)"


def _convert(value: Any, opt: DemoOption) -> Any:
    """``value`` as ``opt.kind``, or None when it is not one (2.9, 'abc', a list for a whole number)."""
    if opt.kind is bool:
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        n = int(value)
    else:
        return None
    if (opt.minimum is not None and n < opt.minimum) or (opt.maximum is not None and n > opt.maximum):
        return None
    return n


def check_demo_options(suite: str, given: Mapping[str, Any], spec: Mapping[str, DemoOption]) -> dict[str, Any]:
    """``given`` checked against ``spec`` and converted; one :class:`ConfigError` line for the first bad key."""
    out: dict[str, Any] = {}
    for key, value in given.items():
        opt = spec.get(key)
        if opt is None:
            raise ConfigError(f"demo --set {key}: the {suite} default has no option {key!r}; its options: "
                              f"{describe_options(spec)}")
        conv = _convert(value, opt)
        if conv is None:
            want = "true or false" if opt.kind is bool else f"a {opt._range()}"
            raise ConfigError(f"demo --set {key}={value}: the {suite} default's {key} must be {want} "
                              f"({opt.help}; default {str(opt.default).lower() if opt.kind is bool else opt.default})")
        out[key] = conv
    return out
