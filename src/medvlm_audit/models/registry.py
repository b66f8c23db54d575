"""Model backends by name: ``BACKENDS`` maps a backend name to a factory ``(name, params, context) -> Model``.

The core registers the general backends (OpenAI-compatible HTTP, transformers, Gemma from PyPI); a suite
registers its own models (the grounding suite: its reference panel and the paper's vision-only probe) when it is loaded (see :func:`medvlm_audit.suites.get_suite`).
Factories import their module lazily, so the core install stays light; a missing optional dependency is one
line naming the extra to install.
"""

from __future__ import annotations

from typing import Any

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Model, TextOnly
from medvlm_audit.registry import Registry

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


def load_model(spec: Any, *, context: dict[str, Any] | None = None) -> Model:
    """Instantiate one model from a :class:`~medvlm_audit.config.ModelSpec`. ``context`` carries shared objects (e.g. a fitted reference panel cache)."""
    params = spec.params()
    factory = BACKENDS.load(spec.backend, where=f"model {spec.name!r}")
    try:
        model = factory(spec.name, params, context if context is not None else {})
    except TypeError as e:
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
