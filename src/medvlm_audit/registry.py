"""Lazy name registries (name -> ``"module:attribute"``), used for suites, model backends and image operations.

Nothing is imported until a name is looked up, so ``import medvlm_audit`` stays fast and a heavy optional
dependency is only needed by the user who names it. An unknown name is a :class:`~medvlm_audit.errors.ConfigError`
listing the registered names and suggesting the nearest one.

>>> r = Registry("colour")
>>> r.register("json-dumps", "json:dumps")
>>> r.load("json-dumps")({"a": 1})
'{"a": 1}'
>>> did_you_mean("max_concurency", ["max_concurrency", "timeout"])
' (did you mean max_concurrency?)'
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any

from medvlm_audit.errors import ConfigError


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest choice, or an empty string when none is close."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_known(what: str, values: Iterable[str], known: Iterable[str], *, listed_as: str = "known",
                where: str = "", exc: type[Exception] = ValueError) -> None:
    """Raise ``exc("WHERE unknown WHAT 'x' (did you mean y?); known: a, b, ...")`` for the first value not in ``known``:
    the one message every name check gives (conditions, strategies, metrics, backends, ...).

    >>> check_known("condition", ["original"], ["original", "swap"])
    >>> check_known("condition", ["swapp"], ["original", "swap"])
    Traceback (most recent call last):
    ...
    ValueError: unknown condition 'swapp' (did you mean swap?); known: original, swap
    """
    choices = [str(k) for k in known]
    for v in values:
        if v not in choices:
            raise exc(f"{where}unknown {what} {v!r}{did_you_mean(v, choices)}; {listed_as}: {', '.join(choices)}")


def load_target(target: Any) -> Any:
    """A ``"module:attr"`` string's object (importing the module); anything else as it is."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


class Registry:
    """Name -> target, where a target is ``"package.module:attribute"`` (imported on first use) or an object."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._targets: dict[str, Any] = {}
        self._loaded: dict[str, Any] = {}

    def register(self, name: str, target: Any, *, replace: bool = False) -> None:
        if not replace and name in self._targets and self._targets[name] != target:
            raise ValueError(f"{self.kind} {name!r} is already registered as {self._targets[name]!r}")
        self._targets[name] = target
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        self._targets.pop(name, None)
        self._loaded.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._targets)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def check(self, name: str, where: str = "") -> None:
        """Raise a ConfigError naming the registered names when ``name`` is not one of them."""
        if name not in self._targets:
            at = f"{where}: " if where else ""
            raise ConfigError(f"{at}unknown {self.kind} {name!r}{did_you_mean(name, self._targets)}; "
                              f"registered: {', '.join(self.names())}")

    def load(self, name: str, where: str = "") -> Any:
        """The registered object (importing its module on first use)."""
        self.check(name, where)
        if name not in self._loaded:
            target = self._targets[name]
            self._loaded[name] = load_target(target)
        return self._loaded[name]


def lazy_exports(module_name: str, names: dict[str, str]) -> tuple[Any, Any]:
    """``__getattr__`` and ``__dir__`` for a package whose public names (name -> defining module) are imported on
    first use, so importing the package stays light: ``__getattr__, __dir__ = lazy_exports(__name__, _LAZY)``."""

    def __getattr__(name: str) -> Any:  # noqa: N807
        if name not in names:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return getattr(importlib.import_module(names[name]), name)

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(names)

    return __getattr__, __dir__
