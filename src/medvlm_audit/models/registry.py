"""Model backends by name: ``BACKENDS`` maps a backend name to a factory ``(name, params, context) -> Model``.

The core registers the general backends (OpenAI-compatible HTTP, transformers, Gemma from PyPI); a suite
registers its own models (the grounding suite: its reference panel and the paper's vision-only probe) when it is loaded (see :func:`medvlm_audit.suites.get_suite`).
Factories import their module lazily, so the core install stays light; a missing optional dependency is one
line naming the extra to install.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from typing import Any

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Model, TextOnly
from medvlm_audit.registry import Registry, did_you_mean

BACKENDS = Registry("backend")

#: the extra that provides each backend's optional dependencies
BACKEND_EXTRAS: dict[str, str] = {"hf": "hf", "gemma": "gemma", "vision_probe": "hf"}


def register_backend(name: str, factory: Any, *, replace: bool = False, extra: str | None = None) -> None:
    """Register a backend: ``factory`` is ``"module:function"`` or a callable ``(name, params, context) -> Model``."""
    BACKENDS.register(name, factory, replace=replace)
    if extra:
        BACKEND_EXTRAS[name] = extra


def backend_names() -> list[str]:
    return BACKENDS.names()


#: the callable whose signature lists a backend's parameters ("did you mean" for a misspelt key before any
#: model is built); a backend not named here is checked when it is built
BACKEND_SIGNATURES: dict[str, str] = {
    "openai": "medvlm_audit.models.openai_compat:OpenAIChatModel",
    "hf": "medvlm_audit.models.hf:HFModel",
    "gemma": "medvlm_audit.models.gemma:gemma3_270m",
}

_UNEXPECTED = re.compile(r"unexpected keyword argument '([^']+)'")
_PARALLEL_KEYS = ("max_concurrency", "concurrency", "workers", "batch_size")


def backend_parameters(backend: str) -> list[str] | None:
    """The parameter names a backend takes (None when unknown or it takes any keyword)."""
    target = BACKEND_SIGNATURES.get(backend)
    if target is None:
        return None
    module, _, attr = target.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
        sig = inspect.signature(fn)
    except (ImportError, AttributeError, ValueError, TypeError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        if backend == "gemma":  # gemma3_270m passes the rest on to HFModel
            rest = backend_parameters("hf")
            return None if rest is None else sorted({*sig.parameters, *rest} - {"kw", "self"})
        return None
    names = set(sig.parameters) - {"self"}
    if backend == "openai":  # `batch: true` and its `batch_*` options (medvlm_audit.batch.cycle.BatchModel)
        from medvlm_audit.batch.cycle import BatchModel

        names |= {"batch"} | {f"batch_{p}" for p in inspect.signature(BatchModel.__init__).parameters
                              if p not in ("self", "inner", "run_dir", "log")}
    return sorted(names)


def _check_number(where: str, key: str, v: Any) -> None:
    from medvlm_audit.config import MAX_PARALLEL, MAX_WAIT_S

    if isinstance(v, dict):
        for k2, v2 in v.items():
            _check_number(where, f"{key}.{k2}", v2)
        return
    if isinstance(v, (list, tuple)):
        for i, v2 in enumerate(v):
            _check_number(where, f"{key}[{i}]", v2)
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return
    leaf = key.rsplit(".", 1)[-1]
    if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(f"{where}: key {key!r} = {v}: must be a finite number")
    if "timeout" in leaf and not 0 < v <= MAX_WAIT_S:
        raise ConfigError(f"{where}: key {key!r} = {v}: a timeout must be > 0 and at most {MAX_WAIT_S:g} s")
    if leaf.endswith("_s") and not 0 <= v <= MAX_WAIT_S:
        raise ConfigError(f"{where}: key {key!r} = {v}: seconds must be in [0, {MAX_WAIT_S:g}]")
    if any(k in leaf for k in _PARALLEL_KEYS) and not (v == int(v) and 1 <= v <= MAX_PARALLEL):
        raise ConfigError(f"{where}: key {key!r} = {v}: must be a whole number in [1, {MAX_PARALLEL}]")
    if leaf == "max_retries" and not (v == int(v) and 0 <= v <= 1000):
        raise ConfigError(f"{where}: key {key!r} = {v}: must be a whole number in [0, 1000]")


def check_model_spec(spec: Any) -> None:
    """A model entry's parameters, checked before anything is built or written: finite numbers, timeouts and
    parallelism in range, and every key known to the backend (with "did you mean" for a misspelt one)."""
    where = f"model {spec.name!r} (backend {spec.backend})"
    BACKENDS.load(spec.backend, where=f"model {spec.name!r}")
    params = spec.params()
    for k, v in params.items():
        _check_number(where, k, v)
    known = backend_parameters(spec.backend)
    if known is not None:
        for k in params:
            if k not in known:
                raise ConfigError(f"{where}: unknown key {k!r}{did_you_mean(k, known)}; known: {', '.join(known)}")


def load_model(spec: Any, *, context: dict[str, Any] | None = None) -> Model:
    """Instantiate one model from a :class:`~medvlm_audit.config.ModelSpec`. ``context`` carries shared objects (e.g. a fitted reference panel cache)."""
    params = spec.params()
    check_model_spec(spec)
    factory = BACKENDS.load(spec.backend, where=f"model {spec.name!r}")
    try:
        model = factory(spec.name, params, context if context is not None else {})
    except TypeError as e:
        m = _UNEXPECTED.search(str(e))
        if m:
            k = m.group(1)
            known = backend_parameters(spec.backend) or []
            raise ConfigError(f"model {spec.name!r} (backend {spec.backend}): unknown key {k!r}"
                              f"{did_you_mean(k, known)}") from None
        raise ConfigError(f"model {spec.name!r} (backend {spec.backend}): bad parameters: {e}") from e
    except ImportError as e:  # an optional extra is not installed: one line naming it, no traceback
        from medvlm_audit.extras import MissingExtraError, extra_for_missing

        missing = extra_for_missing(spec.backend, e.__cause__ if isinstance(e.__cause__, ImportError) else e)
        if missing is None:
            raise
        raise MissingExtraError(f"model {spec.name!r}: {missing}") from None
    if spec.text_only and model.modality != "text_only":
        model = TextOnly(model, name=spec.name)
    return model


def _openai(name: str, params: dict[str, Any], context: dict[str, Any]) -> Model:
    from medvlm_audit.models.openai_compat import OpenAIChatModel

    batch = {k: params.pop(k) for k in list(params) if k == "batch" or k.startswith("batch_")}
    model = OpenAIChatModel(name=name, **params)
    if batch.pop("batch", False):  # asked through the provider's batch API (medvlm_audit.batch)
        from medvlm_audit.batch.cycle import batch_factory

        return batch_factory(model, batch, context)
    return model


def _hf(name: str, params: dict[str, Any], context: dict[str, Any]) -> Model:
    from medvlm_audit.models.hf import HFModel

    return HFModel(name=name, **params)


def _gemma(name: str, params: dict[str, Any], context: dict[str, Any]) -> Model:
    from medvlm_audit.models.gemma import gemma3_270m

    return gemma3_270m(name=name, **params)


register_backend("openai", _openai)
register_backend("hf", _hf)
register_backend("gemma", _gemma)
