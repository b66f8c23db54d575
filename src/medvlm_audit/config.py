"""Run configuration: what the user asks for (probe sets, models, conditions, decoding), from YAML/TOML or flags.

Every run records its fully resolved config, the package version and the seeds in its store.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medvlm_audit.errors import ConfigError


class DecodingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    num_beams: int = 1
    seed: int | None = None
    logprobs: bool = True
    top_logprobs: int = 20


class ModelSpec(BaseModel):
    """One model: a backend name plus that backend's parameters (extra keys are passed to the backend)."""

    model_config = ConfigDict(extra="allow")

    name: str
    #: decoding for this model only (e.g. a reasoning model's longer max_new_tokens); default: the run's
    decoding: DecodingSpec | None = None
    backend: Literal["openai", "hf", "reference", "gemma", "vision_probe", "stress_reference"]
    text_only: bool = False

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    suite: Literal["grounding", "stress"] = "grounding"
    run_dir: str = "runs/run"
    probe_sets: list[str] = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    conditions: list[str] = ["original", "swap", "target_mask", "irrelevant_mask", "no_image"]
    resolutions: list[int] = [224]
    prompt_variants: list[str] = ["default"]
    #: the non-default prompt variants run on this many finding- and label-balanced cases (0 = all cases)
    prompt_subsample: int = 100
    #: the 512 resolution probe runs on boxed cases only (as in the paper) unless false
    res512_boxed_only: bool = True
    repeats: int = 1
    decoding: DecodingSpec = DecodingSpec()
    seed: int = 42
    workers: int = 2

    @field_validator("models")
    @classmethod
    def _unique_names(cls, v: list[ModelSpec]) -> list[ModelSpec]:
        names = [m.name for m in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"model names must be unique; repeated: {dup}")
        return v


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a YAML or TOML run config; errors name the file and the field."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    try:
        text = p.read_text()
        data = tomllib.loads(text) if p.suffix == ".toml" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {p} is unreadable: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p}: expected a mapping at the top level, got {type(data).__name__}")
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    base = p.parent
    for key in ("probe_sets",):
        if key in data and isinstance(data[key], list):
            data[key] = [str(x) if Path(str(x)).is_absolute() else str(base / str(x)) for x in data[key]]
    return validate_config(data, source=str(p))


def redact_urls(obj: Any) -> Any:
    """A copy of a config (dicts, lists, strings) with every URL that carries user info or a query redacted.

    Base URLs may hold credentials (``http://user:password@host/v1``, ``...?api-key=...``); the recorded config
    keeps scheme, host, port and path only, with the same redaction the OpenAI client applies to its messages.
    """
    if isinstance(obj, dict):
        return {k: redact_urls(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_urls(v) for v in obj]
    if isinstance(obj, str) and "://" in obj:
        from urllib.parse import urlsplit

        from medvlm_audit.models.openai_compat import _redact_url

        try:
            parts = urlsplit(obj.strip())
        except ValueError:
            return obj
        if parts.scheme and parts.netloc and ("@" in parts.netloc or parts.query or parts.fragment):
            return _redact_url(obj.strip())
    return obj


def validate_config(data: dict[str, Any], source: str = "config") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            lines.append(f"field {loc!r}: {err['msg']}")
        raise ConfigError(f"{source}: invalid run config:\n  " + "\n  ".join(lines)) from None
