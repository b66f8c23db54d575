"""Build models from ModelSpecs. Backends import lazily so the core install stays light."""

from __future__ import annotations

from typing import Any

from medvlm_audit.config import ModelSpec
from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Model, TextOnly


def load_model(spec: ModelSpec, *, context: dict[str, Any] | None = None) -> Model:
    """Instantiate one model. ``context`` carries shared objects (e.g. a fitted reference panel cache)."""
    params = spec.params()
    try:
        model = _build(spec.backend, spec.name, params, context or {})
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


def _build(backend: str, name: str, params: dict[str, Any], context: dict[str, Any]) -> Model:
    if backend == "openai":
        from medvlm_audit.models.openai_compat import OpenAIChatModel

        return OpenAIChatModel(name=name, **params)
    if backend == "hf":
        from medvlm_audit.models.hf import HFModel

        return HFModel(name=name, **params)
    if backend == "gemma":
        from medvlm_audit.models.gemma import gemma3_270m

        return gemma3_270m(name=name, **params)
    if backend == "reference":
        from medvlm_audit.models.reference import make_reference_model
        from medvlm_audit.probeset import ProbeSet

        train_path = params.pop("train", None)
        kind = params.pop("kind", None)
        if train_path is None or kind is None:
            raise ConfigError(f"model {name!r}: backend 'reference' needs 'kind' and 'train' (a training probe set)")
        cache = context.setdefault("train_sets", {})
        train = cache.get(train_path) or cache.setdefault(train_path, ProbeSet.load(train_path))
        model = make_reference_model(kind, train, **params)
        model.name = name
        return model
    if backend == "vision_probe":
        return _vision_probe(name, params)
    if backend == "stress_reference":
        from medvlm_audit.suites.stress import reference as sref

        kinds = {"first_option": sref.FirstOptionAnswerer, "text_prior": sref.TextPriorAnswerer,
                 "image_reader": sref.PhantomImageReader}
        kind = params.pop("kind", None)
        if kind not in kinds:
            raise ConfigError(f"model {name!r}: backend 'stress_reference' needs kind in {sorted(kinds)}")
        model = kinds[kind](**params)
        model.name = name
        return model
    raise ConfigError(f"model {name!r}: unknown backend {backend!r}")


def _vision_probe(name: str, params: dict[str, Any]) -> Model:
    """``train``: one training probe-set folder, a list of them (fitted together), or a mapping
    source -> folder(s) for per-source heads (e.g. ``{mimic: [...], chexpert: [...]}``, routed by a source
    classifier on the same features). Other keys go to :meth:`VisionProbe.fit` (``encoder_path``,
    ``cache_dir``, ``findings``, ``C``, ``device``, ``splits``, ``max_iter``, ``workers``)."""
    from medvlm_audit.models.vision_probe import RoutedVisionProbe, VisionProbe
    from medvlm_audit.probeset import ProbeSet

    train = params.pop("train", None)
    if train is None or params.get("encoder_path") is None:
        raise ConfigError(f"model {name!r}: backend 'vision_probe' needs 'train' (training probe set folder(s)) "
                          "and 'encoder_path' (a local image-encoder folder, e.g. microsoft/rad-dino)")

    def sets(value: Any, where: str) -> list[ProbeSet]:
        paths = [value] if isinstance(value, str) else list(value or [])
        if not paths or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"model {name!r}: {where} must be a probe-set folder or a list of them, got {value!r}")
        # fit() checks every image it reads; the row-by-row file check of a 200k-study training set is skipped
        return [ProbeSet.load(p, validate=False) for p in paths]

    if isinstance(train, dict):
        model: Model = RoutedVisionProbe.fit({str(k): sets(v, f"train.{k}") for k, v in train.items()},
                                             name=name, **params)
    else:
        model = VisionProbe.fit(sets(train, "train"), name=name, **params)
    model.name = name
    return model
