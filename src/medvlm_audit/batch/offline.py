"""``batch export`` and ``batch ingest``: a run's missing inputs out as batch JSONL, the provider's (or vLLM
``run_batch``'s) output back into the same store.

Both plan the run exactly as ``run`` does (the same suite stages, the same keying of the same prepared inputs),
from the run directory's recorded config or from a config file. Export reads the store only to leave out what
it holds; nothing is written to it. Ingest checks every line first (an unknown or repeated ``custom_id`` refuses
the whole ingest, with the count, before anything is written), then commits the answers through ``run`` itself
with a model that answers from the files: the same trials, keys, stored rows and report as an online run.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvlm_audit.batch.lines import (
    MAX_BYTES,
    MAX_LINES,
    BatchError,
    check_size,
    part_paths,
    read_output,
    request_line,
    served_model,
)
from medvlm_audit.config import RunConfig, load_config, validate_config
from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.models.base import NOT_ASKED, ErrorInfo, Model, ModelInput, Response, input_key
from medvlm_audit.store import STORE_FILE, RunStore


def run_config(run: str | Path | RunConfig) -> RunConfig:
    """The config of a run directory (as recorded in its store; its run_dir is this directory) or a config file."""
    if isinstance(run, RunConfig):
        return run
    p = Path(run)
    if p.is_dir():
        if not (p / STORE_FILE).exists():
            raise AuditError(f"{p}: no run store ({STORE_FILE}); give the run's config file instead")
        with RunStore.open_dir(p, readonly=True) as store:
            recorded = store.meta().get("config")
        if not isinstance(recorded, dict):
            raise AuditError(f"{p}: the run store holds no recorded config; give the run's config file instead")
        return validate_config({**recorded, "run_dir": str(p)}, source=f"config recorded in {p / STORE_FILE}")
    if p.is_file():
        return load_config(p)
    raise AuditError(f"{p}: neither a run directory nor a config file")


@dataclass
class Planned:
    """One model's share of a run: all its keys, and the inputs the store does not hold yet."""

    model: Model
    keys: set[str] = field(default_factory=set)
    pending: list[tuple[str, ModelInput]] = field(default_factory=list)
    images: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (height, width) of its first image


def _build(spec: Any, run_dir: Path) -> Model:
    from medvlm_audit.models.registry import load_model

    model = load_model(spec, context={"run_dir": run_dir})
    return model


def plan_models(cfg: RunConfig, names: Collection[str] | None = None, *, retry_errors: bool = False,
                render_pending: bool = True) -> dict[str, Planned]:
    """Plan every stage of the run for the named models (all when None) without writing anything: their keys
    and their pending inputs (images rendered lazily), keyed exactly as the runner keys them."""
    from medvlm_audit.api import resolve_config
    from medvlm_audit.images import SourceCache
    from medvlm_audit.plan import StageContext
    from medvlm_audit.runner import (
        ModelWork,
        TrialIndex,
        _materialise,
        check_sources,
        group_by_source,
        render_sources,
    )

    cfg, suite, opts = resolve_config(cfg)
    run_dir = Path(cfg.run_dir)
    store = RunStore.open_dir(run_dir, readonly=True) if (run_dir / STORE_FILE).exists() else None
    out: dict[str, Planned] = {}
    try:
        answered: set[str] = set()
        known: dict[str, str] = {}
        if store is not None:
            lp = "retry-partial" if retry_errors else "keep"
            answered = store.answered_keys(include_errors=not retry_errors, missing_logprobs=lp)
            known = store.image_hashes()
        ctx = StageContext(cfg, opts, run_dir)
        cache = SourceCache(64)
        for i, stage in enumerate(suite.stages()):
            if i > 0:
                if store is None:
                    break  # a later stage reads earlier answers: nothing to plan before they exist
                ctx.store = store
            specs = [s for s in stage.models(ctx) if names is None or s.name in names]
            if not specs:
                continue
            plan = stage.plan(ctx)
            if not plan.trials:
                continue
            keys = check_sources(TrialIndex(plan.trials))
            hashes = {r: known[ck] for r, ck in keys.items() if ck in known}
            todo = [r for r in keys if r not in hashes]
            for r, h, _, _ in render_sources(group_by_source(todo), want_pixels=False, cache=cache):
                if isinstance(h, Exception):
                    raise h
                hashes[r] = h
            for spec in specs:
                model = _build(spec, run_dir)
                dec = spec.decoding or cfg.decoding
                work = ModelWork(model, dec, answered)
                _, _, new = work.admit(plan.trials, hashes)
                p = out.setdefault(spec.name, Planned(model))
                p.keys |= work.key_hexes()
                for key, inp, recipes in new:
                    p.pending.append((key, _materialise(inp, recipes, cache) if render_pending else inp))
                    if recipes:
                        size = recipes[0].resolution
                        if size:
                            p.images[key] = (int(size), int(size))
    finally:
        if store is not None:
            store.close()
    missing = sorted(set(names or ()) - set(out))
    if missing:
        raise ConfigError(f"model(s) {', '.join(missing)} not in this run (models: "
                          f"{', '.join(m.name for m in cfg.models)})")
    return out


# -- export ------------------------------------------------------------------------------------------
def estimate_tokens(inp: ModelInput, image_hw: tuple[int, int] | None) -> int:
    """A rough prompt-token estimate for cost planning: ~4 characters per text token plus OpenAI's image
    formula (85 + 170 per 512-px tile after fitting within 2048 and scaling the short side to 768)."""
    text = sum(len(m.content) for m in inp.messages)
    tokens = math.ceil(text / 4) + 4 * len(inp.messages)
    for _ in inp.images:
        h, w = image_hw or (512, 512)
        s = min(1.0, 2048 / max(h, w))
        h, w = h * s, w * s
        s = min(1.0, 768 / min(h, w))
        h, w = h * s, w * s
        tokens += 85 + 170 * math.ceil(h / 512) * math.ceil(w / 512)
    return tokens


def dry_run(run: str | Path | RunConfig, models: Sequence[str] | None = None, *, retry_errors: bool = False) -> list[dict]:
    """Per model: inputs the store does not hold yet, prompt tokens estimated and the output-token ceiling."""
    cfg = run_config(run)
    rows = []
    for name, p in plan_models(cfg, models, retry_errors=retry_errors, render_pending=False).items():
        prompt = sum(estimate_tokens(inp, p.images.get(k)) for k, inp in p.pending)
        out_max = sum(inp.decoding.max_new_tokens for _, inp in p.pending)
        rows.append({"model": name, "inputs": len(p.keys), "missing": len(p.pending), "prompt_tokens_est": prompt,
                     "max_output_tokens": out_max})
    return rows


def export(run: str | Path, model: str, out: str | Path, *, retry_errors: bool = False,
           max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> tuple[list[Path], int]:
    """Write the model's missing inputs as batch request files within the limits; return (files, requests).

    Each file is written to a temporary name and renamed when complete; nothing is written to the store."""
    cfg = run_config(run)
    planned = plan_models(cfg, [model], retry_errors=retry_errors)[model]
    served_model(planned.model)  # an OpenAI-compatible backend, or one line saying so
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = ((k, request_line(planned.model, k, inp)) for k, inp in planned.pending)
    return write_parts(lines, out, max_lines, max_bytes)


def write_parts(lines: Iterable[tuple[str, bytes]], out: Path, max_lines: int = MAX_LINES,
                max_bytes: int = MAX_BYTES) -> tuple[list[Path], int]:
    """Stream request lines into files within the limits (one line in memory at a time); each file is written
    under a temporary name and renamed once all are complete. Returns (files, lines)."""
    if max_lines < 1 or max_bytes < 1:
        raise ConfigError("batch limits must be positive (max_lines >= 1, max_bytes >= 1)")
    tmp: list[Path] = []
    f = None
    count = size = n = 0
    try:
        for key, line in lines:
            check_size(key, line, max_bytes)
            if f is None or count >= max_lines or size + len(line) > max_bytes:
                if f is not None:
                    f.close()
                tmp.append(out.with_name(f".{out.name}.part{len(tmp) + 1:03d}.tmp"))
                f = open(tmp[-1], "wb")  # noqa: SIM115  closed when the part is full or below
                count = size = 0
            f.write(line)
            count, size, n = count + 1, size + len(line), n + 1
        if f is not None:
            f.close()
            f = None
        paths = part_paths(out, len(tmp)) if tmp else []
        for t, p in zip(tmp, paths):
            os.replace(t, p)
        return paths, n
    finally:
        if f is not None:
            f.close()
        for t in tmp:
            t.unlink(missing_ok=True)


# -- ingest ------------------------------------------------------------------------------------------
class FileAnswers(Model):
    """Answers read from batch output files, by content key: what ``ingest`` hands the runner in place of
    the model (same name, identity and preparation, so the same trials and keys); an input with no line is
    not asked (not stored)."""

    batch_size = 2**62
    max_concurrency = 1

    def __init__(self, served: Model, answers: dict[str, Response]) -> None:
        self.served = served  # not ``inner``: the runner must not check this model's endpoint or credentials
        self.name = served.name
        self.modality = served.modality
        self.answers = answers
        self.used: set[str] = set()

    def identity(self) -> dict[str, Any]:
        return self.served.identity()

    def prepare(self, inp: ModelInput) -> ModelInput:
        return self.served.prepare(inp)

    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        ident = self.identity()
        out = []
        for inp in inputs:
            k = input_key(ident, inp)
            r = self.answers.get(k)
            if r is None:
                out.append(Response(None, error=ErrorInfo(NOT_ASKED, "not in the ingested files", 1, True)))
            else:
                self.used.add(k)
                out.append(r)
        return out


@dataclass
class IngestResult:
    lines: int
    committed: dict[str, int]
    already: int
    errors: dict[str, int]


def read_files(files: Sequence[str | Path]) -> dict[str, Response]:
    """Every line of the output / error files by custom_id; a repeated id refuses the files, with the count."""
    seen: Counter[str] = Counter()
    answers: dict[str, Response] = {}
    for f in files:
        p = Path(f)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise BatchError(f"{p}: cannot read ({e.strerror or e})") from None
        for cid, resp in read_output(data, str(p)):
            seen[cid] += 1
            answers[cid] = resp
    dup = {k: n for k, n in seen.items() if n > 1}
    if dup:
        raise BatchError(f"{len(dup):,} custom_id(s) appear more than once in the files given (e.g. {next(iter(dup))}); "
                         "nothing was ingested: give each batch's output once")
    return answers


def ingest(run: str | Path, files: Sequence[str | Path], *, models: Sequence[str] | None = None,
           retry_errors: bool = False, progress: bool = False) -> IngestResult:
    """Commit batch output lines to the run store as the named OpenAI-compatible models' answers (all of the
    run's when None). Ingesting the same files again changes no answer."""
    from medvlm_audit import api

    cfg = run_config(run)
    answers = read_files(files)
    if not answers:
        raise BatchError("the files given hold no batch output lines; nothing was ingested")
    names = models or [m.name for m in cfg.models if m.backend == "openai"]
    if not names:
        raise ConfigError("this run has no openai model to ingest answers for (name one with --model)")
    planned = plan_models(cfg, names, retry_errors=True, render_pending=False)
    known = set().union(*(p.keys for p in planned.values()))
    unknown = [k for k in answers if k not in known]
    if unknown:
        raise BatchError(f"{len(unknown):,} of {len(answers):,} custom_ids are not inputs of model(s) "
                         f"{', '.join(names)} in this run (e.g. {unknown[0][:16]}); nothing was ingested")
    replay = [FileAnswers(p.model, answers) for p in planned.values()]
    api.run(cfg, models=replay, only_models=[m.name for m in replay], retry_errors=retry_errors, progress=progress)
    committed = {m.name: len(m.used) for m in replay}
    used = set().union(*(m.used for m in replay))
    errors = Counter(r.error.kind for k, r in answers.items() if k in used and r.error is not None)
    return IngestResult(len(answers), committed, len(answers) - len(used), dict(errors))


def dry_run_lines(rows: list[dict]) -> list[str]:
    """The ``--dry-run`` report, one line per model."""
    return [f"{r['model']}: {r['missing']:,} of {r['inputs']:,} inputs missing; ~{r['prompt_tokens_est']:,} prompt "
            f"tokens (estimated), at most {r['max_output_tokens']:,} output tokens" for r in rows]
