"""Run configuration: what the user asks for (probe sets, models, conditions, decoding), from YAML/TOML or flags.

Every run records its fully resolved config, the package version and the seeds in its store.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding
from medvlm_audit.registry import did_you_mean

#: bounds of the run's numbers (a typo such as ``workers: 1e20`` is one named line, not a traceback)
MAX_PARALLEL = 4096  # workers, a model's max_concurrency
MAX_REPEATS = 100_000
MAX_WAIT_S = 7 * 86_400.0  # any timeout or wait: finite, positive, at most a week


class ModelSpec(BaseModel):
    """One model: a backend name plus that backend's parameters (extra keys are passed to the backend)."""

    model_config = ConfigDict(extra="allow")

    name: str
    #: decoding for this model only (e.g. a reasoning model's longer max_new_tokens); default: the run's
    decoding: Decoding | None = None
    #: a name in the model-backend registry (checked when the run's suite is loaded)
    backend: str
    text_only: bool = False

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def default_render_workers(cores: int | None = None) -> int:
    """Image render workers when a run config names none: one per core this process may use beyond the first
    (the event loop's), at least 2 and at most 8. Two workers rendered 2,001 images more slowly than a 20 ms
    server answered them on an idle 16-core machine (0.67x the bare loop end to end, rendering done at 1.7 s
    of 2.1); under the runner's backpressure an idle worker costs nothing.

    >>> default_render_workers(2), default_render_workers(4), default_render_workers(16), default_render_workers(64)
    (2, 3, 8, 8)
    """
    if cores is None:
        from medvlm_audit.cpus import usable_cpus

        cores = usable_cpus()  # the cores this process may run on (a container's share)
    return max(2, min(8, cores - 1))


#: the fields every suite shares; every other key of a run config is the suite's option (see ``Suite.Options``)
SHARED_FIELDS: tuple[str, ...] = ("suite", "run_dir", "probe_sets", "models", "decoding", "repeats", "seed",
                                  "workers", "render_in", "store_lock_wait_s", "options")


class RunConfig(BaseModel):
    """What every suite shares; the suite's own options (conditions, resolutions, judges, ...) are in
    ``options`` (given flat at the top level of a config file or under ``options:``) and validated by the
    suite's ``Options`` model when the config is validated."""

    model_config = ConfigDict(extra="forbid")

    #: the audit to run (a registered suite); required: no suite is the default
    suite: str
    run_dir: str = "runs/run"
    #: probe sets or item sources (folders, item files, ``phantom``, ``<benchmark>:<folder>``)
    probe_sets: list[str] = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    decoding: Decoding = Decoding()
    repeats: int = Field(default=1, ge=1, le=MAX_REPEATS)
    seed: int = Field(default=42, ge=0, lt=2**63)
    #: image render workers (threads or processes); default: one per core beyond the first, 2 to 8
    #: (:func:`default_render_workers`), recorded as the number used
    workers: int = Field(default_factory=lambda: default_render_workers(), ge=1, le=MAX_PARALLEL)
    #: where images are rendered during a run: worker processes when every image model takes encoded
    #: bytes (HTTP backends) and there are 64+ images, else threads ("auto"), or as named
    render_in: Literal["auto", "threads", "processes"] = "auto"
    #: how long a write to the run store waits (retrying with backoff) while another process holds its write
    #: lock; past this the run stops with an error (every committed answer kept) instead of dropping answers
    store_lock_wait_s: float = Field(default=60.0, ge=0, le=MAX_WAIT_S, allow_inf_nan=False)
    #: the suite's options, as validated by its ``Options`` model
    options: dict[str, Any] = {}
    #: where the config came from (a file, flags, an embedded default), named in error messages
    _source: str = PrivateAttr("config")

    @model_validator(mode="before")
    @classmethod
    def _collect_options(cls, data: Any) -> Any:
        """Keys that are not shared fields are the suite's options (flat configs stay valid)."""
        if not isinstance(data, dict):
            return data
        extra = {k: v for k, v in data.items() if k not in SHARED_FIELDS}
        if not extra:
            return data
        out = {k: v for k, v in data.items() if k in SHARED_FIELDS}
        out["options"] = {**extra, **dict(data.get("options") or {})}
        return out

    @field_validator("models")
    @classmethod
    def _unique_names(cls, v: list[ModelSpec]) -> list[ModelSpec]:
        names = [m.name for m in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"model names must be unique; repeated: {dup}")
        return v

    def recorded(self) -> dict[str, Any]:
        """The config as recorded in the run store: shared fields and the suite's options, flat, with every
        credential-bearing URL redacted."""
        data = json.loads(self.model_dump_json(exclude={"options"}))
        data.update(self.options)
        return redact_urls(data)


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
    if isinstance(data.get("probe_sets"), list):  # flag values arrive resolved against the working directory
        data["probe_sets"] = [_resolve_entry(str(x), base) for x in data["probe_sets"]]
    return validate_config(data, source=str(p))


def resolved_path_text(path: str | Path) -> str:
    """A path named in a config option, as an error shows it: as written, with the absolute path it resolved to
    when it was relative (a config's probe_sets resolve against the config file's folder; run_dir and every other
    path in it, e.g. a suite option's file, against the current folder).

    >>> import os
    >>> resolved_path_text("/data/ref.jsonl")
    '/data/ref.jsonl'
    >>> resolved_path_text("ref.jsonl") == f"ref.jsonl (resolved against the current folder: {os.getcwd()}/ref.jsonl)"
    True
    """
    p = Path(path).expanduser()
    if p.is_absolute():
        return str(path)
    return f"{path} (resolved against the current folder: {Path.cwd() / p})"


_NAMED_SOURCE = re.compile(r"^[A-Za-z][\w.-]+:")  # ``vqa-rad:/data/VQA_RAD`` (not a drive letter ``C:``)


def _resolve_entry(entry: str, base: Path) -> str:
    """A probe_sets entry as a path against ``base``; ``phantom`` and ``<benchmark>:<folder>`` stay as given."""
    if entry == "phantom" or _NAMED_SOURCE.match(entry) or Path(entry).expanduser().is_absolute():
        return str(Path(entry).expanduser()) if entry.startswith("~") else entry
    return str(base / entry)


def parse_model_flag(text: str) -> dict[str, Any]:
    """One ``--model`` entry: comma-separated ``key=value`` pairs, values read as YAML scalars.

    ``name=vlm,backend=openai,model=Qwen/Qwen2.5-VL-7B-Instruct,base_urls=http://127.0.0.1:8000/v1``; a value
    with ``;`` is a list (``base_urls=http://a/v1;http://b/v1``). ``backend`` alone names the model after it.
    """
    entry: dict[str, Any] = {}
    for part in (p for p in text.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"--model {text!r}: expected comma-separated key=value pairs, got {part!r}")
        if key in entry:
            raise ConfigError(f"--model {text!r}: {key!r} given twice")
        items = [_scalar(v) for v in value.split(";")] if ";" in value else _scalar(value)
        entry[key] = items
    if "backend" not in entry:
        raise ConfigError(f"--model {text!r}: names no backend (e.g. backend=openai)")
    entry.setdefault("name", str(entry["backend"]))
    return entry


def _scalar(value: str) -> Any:
    value = value.strip()
    try:
        v = yaml.safe_load(value) if value else ""
    except yaml.YAMLError:
        return value
    return v if isinstance(v, (str, int, float, bool)) or v is None else value


def load_models_file(path: str | Path) -> list[dict[str, Any]]:
    """``--models-yaml``: a YAML (or TOML) file holding a list of model entries, or a mapping with ``models``."""
    p = Path(path)
    try:
        text = p.read_text()
        data = tomllib.loads(text) if p.suffix == ".toml" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"models file {p} is unreadable: {e}") from e
    if isinstance(data, dict):
        data = data.get("models")
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise ConfigError(f"models file {p}: expected a list of model entries (or a 'models:' list)")
    return data


def flag_overrides(
    *,
    suite: str | None = None,
    run_dir: str | Path | None = None,
    probe_sets: list[str | Path] | None = None,
    models: list[str] | None = None,
    models_file: str | Path | None = None,
    conditions: list[str] | None = None,
    resolutions: list[str] | None = None,
    prompt_variants: list[str] | None = None,
    repeats: int | None = None,
    workers: int | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """Run-config values given as command-line flags (only those given); they override a config file's values.

    Probe-set paths are resolved against the working directory; list flags take repeated or comma-separated
    values; ``--model`` entries (:func:`parse_model_flag`) come after those of ``--models-yaml``.
    """

    def split(values: list[str] | None) -> list[str] | None:
        out = [v.strip() for x in values or () for v in str(x).split(",") if v.strip()]
        return out or None

    out: dict[str, Any] = {"suite": suite, "run_dir": None if run_dir is None else str(run_dir)}
    if probe_sets:
        out["probe_sets"] = [_resolve_entry(str(p), Path.cwd()) for p in probe_sets]
    entries = (load_models_file(models_file) if models_file is not None else []) + [parse_model_flag(m) for m in models or ()]
    if entries:
        out["models"] = entries
    out["conditions"] = split(conditions)
    res = split(resolutions)
    if res is not None:
        try:
            out["resolutions"] = [int(r) for r in res]
        except ValueError:
            raise ConfigError(f"--resolutions: expected integers, got {res}") from None
    out["prompt_variants"] = split(prompt_variants)
    out.update(repeats=repeats, workers=workers, seed=seed)
    return {k: v for k, v in out.items() if v is not None}


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

        from medvlm_audit.models.openai_compat import redact_url

        try:
            parts = urlsplit(obj.strip())
        except ValueError:
            return obj
        if parts.scheme and parts.netloc and ("@" in parts.netloc or parts.query or parts.fragment):
            return redact_url(obj.strip())
    return obj


def validate_config(data: dict[str, Any], source: str = "config") -> RunConfig:
    """Validate the shared fields of a run config (errors name the source, the key and the nearest valid key).

    The suite's options and the models' backends are checked against the registries by
    :func:`medvlm_audit.api.resolve_config`, which every run goes through."""
    if isinstance(data, dict) and "suite" not in data:
        raise ConfigError(f"{source}: key 'suite' is missing: name the audit to run, e.g. 'suite: stress' "
                          "(`medvlm-audit run --suite ?` lists the registered suites)")
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as e:
        known = [*SHARED_FIELDS, *Decoding.__slots__, *ModelSpec.model_fields]
        raise ConfigError(f"{source}: invalid run config:\n  " + "\n  ".join(_error_lines(e, known))) from None
    cfg._source = source
    return cfg


def _error_lines(e: ValidationError, known: Any) -> list[str]:
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        unknown = err["type"] in ("extra_forbidden", "unexpected_keyword_argument")
        hint = did_you_mean(str(err["loc"][-1]), known) if unknown and err["loc"] else ""
        msg = "unknown key" if unknown else err["msg"]
        lines.append(f"key {loc!r}: {msg}{hint}{_quote_hint(err)}")
    return lines


def _quote_hint(err: Any) -> str:
    """Why a value meant as text is not: YAML reads unquoted ``yes``/``no``/``on``/``off``/``true``/``false``
    as booleans and ``1.0``/``123`` as numbers (the config file and ``--model name=VALUE`` flags alike).

    >>> _quote_hint({"type": "string_type", "loc": ("models", 0, "name"), "input": True})
    '; YAML read the unquoted value as the boolean true (as it reads yes, no, on, off, true, false): quote it, e.g. name: "yes"'
    >>> _quote_hint({"type": "string_type", "loc": ("models", 0, "name"), "input": 1.5})
    '; YAML read the unquoted value as the number 1.5: quote it, e.g. name: "1.5"'
    >>> _quote_hint({"type": "int_parsing", "loc": ("repeats",), "input": "many"})
    ''
    """
    inp, kind = err.get("input"), str(err.get("type", ""))
    key = str(err["loc"][-1]) if err.get("loc") else "key"
    if isinstance(inp, bool) and not kind.startswith("bool"):
        return (f"; YAML read the unquoted value as the boolean {str(inp).lower()} (as it reads yes, no, on, off, "
                f'true, false): quote it, e.g. {key}: "{"yes" if inp else "no"}"')
    if kind == "string_type" and isinstance(inp, int | float):
        return f'; YAML read the unquoted value as the number {inp!r}: quote it, e.g. {key}: "{inp}"'
    return ""
