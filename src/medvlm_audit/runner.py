"""The runner: plan -> keyed model inputs -> concurrent execution, each answer committed as it arrives.

Every (model, input) is asked once: inputs are keyed by a content hash of the model identity and the exact
ModelInput (pixel hashes after all transforms, messages, decoding, sample index). A text-only model therefore
answers once per question whatever the image condition, and a rerun of the same config asks nothing.
All images are rendered and hashed while planning, so a corrupt or missing file fails before any model call.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from medvlm_audit.errors import ImageError
from medvlm_audit.images import ImageRecipe, PixelCache, SourceCache
from medvlm_audit.models.base import (
    Decoding,
    ErrorInfo,
    ImageData,
    Model,
    ModelInput,
    Response,
    input_key,
    pixel_sha256,
)
from medvlm_audit.store import RunStore
from medvlm_audit.suites.base import Plan, Trial

_PLACEHOLDER = np.zeros((0, 0), dtype=np.uint8)


@dataclass
class ModelWork:
    """One model's share of a run: its distinct pending inputs (without pixels) and their recipes."""

    model: Model
    n_trials: int = 0
    n_keys: int = 0
    pending: dict[str, tuple[ModelInput, tuple[ImageRecipe, ...]]] = field(default_factory=dict)


@dataclass
class RunSummary:
    n_trials: int
    n_skipped: int
    per_model: dict[str, dict[str, int]]
    elapsed_s: float
    plan_s: float = 0.0  # render + hash every image, key every trial, record the plan

    def as_dict(self) -> dict[str, Any]:
        return {
            "n_trials": self.n_trials,
            "n_skipped": self.n_skipped,
            "per_model": self.per_model,
            "elapsed_s": round(self.elapsed_s, 3),
            "plan_s": round(self.plan_s, 3),
        }


def hash_images(
    store: RunStore,
    trials: Sequence[Trial],
    cache: SourceCache,
    workers: int = 2,
    pixels: PixelCache | None = None,
) -> dict[ImageRecipe, str]:
    """Pixel sha256 of every distinct recipe; cached in the store so a resumed run does not re-render.

    Rendered pixels are kept in ``pixels`` (bounded) so execution need not render them again."""
    recipes: dict[ImageRecipe, Trial] = {}
    for t in trials:
        for r in t.images:
            recipes.setdefault(r, t)
    known = store.image_hashes()
    out: dict[ImageRecipe, str] = {}
    todo: list[tuple[ImageRecipe, str]] = []
    for r, t in recipes.items():
        try:
            ck = r.cache_key()
        except ImageError as e:
            raise ImageError(f"case {t.case_id!r} ({t.probe_set}), condition {t.condition}: {e}") from None
        if ck in known:
            out[r] = known[ck]
        else:
            todo.append((r, ck))

    def one_source(items: list[tuple[ImageRecipe, str]]) -> list[tuple[ImageRecipe, str, str]]:
        out_: list[tuple[ImageRecipe, str, str]] = []
        for r, ck in items:
            try:
                px = r.render(cache)
            except ImageError as e:
                t = recipes[r]
                raise ImageError(f"case {t.case_id!r} ({t.probe_set}), condition {t.condition}: {e}") from None
            if pixels is not None:
                pixels.put(r, px)
            out_.append((r, ck, pixel_sha256(px)))
        return out_

    # one task per source file, so its conditions share one decode and one resize (no two threads race on it)
    by_source: dict[str, list[tuple[ImageRecipe, str]]] = {}
    for r, ck in todo:
        by_source.setdefault(r.source, []).append((r, ck))
    new: list[tuple[str, str]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for group in pool.map(one_source, by_source.values()):
            for r, ck, h in group:
                out[r] = h
                new.append((ck, h))
    if new:
        store.add_image_hashes(new)
    return out


def plan_model(
    store: RunStore,
    model: Model,
    trials: Sequence[Trial],
    hashes: dict[ImageRecipe, str],
    decoding: Decoding,
    retry_errors: bool,
    answered: set[str] | None = None,
) -> ModelWork:
    """Key every trial for one model, record trials and requests, and collect the inputs still to ask."""
    identity = model.identity()
    store.add_model(model.name, model.modality, identity)
    work = ModelWork(model)
    rows: list[tuple] = []
    requests: dict[str, str] = {}
    keyed: dict[tuple, tuple[str, ModelInput, tuple[ImageRecipe, ...]]] = {}
    for t in trials:
        dec = decoding
        if t.decoding:
            dec = replace(dec, **dict(t.decoding))
        if dec.seed is not None and t.sample_index:
            dec = replace(dec, seed=dec.seed + t.sample_index)
        sig = (t.messages, t.images, t.sample_index, t.decoding)
        hit = keyed.get(sig)
        if hit is None:
            images = tuple(ImageData(_PLACEHOLDER, hashes[r]) for r in t.images)
            inp = model.prepare(ModelInput(t.messages, images, dec, t.sample_index))
            desc = inp.describe()
            key = input_key(identity, inp, desc)
            recipes = t.images if inp.images else ()
            hit = keyed[sig] = (key, inp, recipes)
            if key not in requests:
                requests[key] = json.dumps(desc, sort_keys=True)
        key, inp, recipes = hit
        img_hash = inp.images[0].sha256 if inp.images else None
        rows.append(
            (model.name, t.probe_set, t.case_id, t.condition, t.sample_index, key, img_hash,
             json.dumps(t.payload, sort_keys=True) if t.payload else None)
        )
        if key not in work.pending:
            work.pending[key] = (inp, recipes)
    store.add_trials(rows)
    store.add_requests((k, model.name, v) for k, v in requests.items())
    done = answered if answered is not None else store.answered_keys(include_errors=not retry_errors)
    work.n_trials = len(rows)
    work.n_keys = len(work.pending)
    work.pending = {k: v for k, v in work.pending.items() if k not in done}
    return work


def _materialise(
    inp: ModelInput, recipes: tuple[ImageRecipe, ...], cache: SourceCache, pixels: PixelCache | None = None
) -> ModelInput:
    if not recipes:
        return inp
    images = []
    for r, placeholder in zip(recipes, inp.images):
        px = pixels.get(r) if pixels is not None else None
        if px is None:
            px = r.render(cache)
        images.append(ImageData(px, placeholder.sha256))
    return ModelInput(inp.messages, tuple(images), inp.decoding, inp.sample_index)


async def _run_model(
    store: RunStore, work: ModelWork, cache: SourceCache, pixels: PixelCache, on_done: Any
) -> dict[str, int]:
    model = work.model
    items = list(work.pending.items())
    bs = max(1, model.batch_size)
    batches = [items[i : i + bs] for i in range(0, len(items), bs)]
    sem = asyncio.Semaphore(max(1, model.max_concurrency))
    stats = {"asked": 0, "errors": 0}

    def cached(recipes: tuple[ImageRecipe, ...]) -> bool:
        return all(pixels.get(r) is not None for r in recipes)

    async def one(batch: list[tuple[str, tuple[ModelInput, tuple[ImageRecipe, ...]]]]) -> None:
        async with sem:
            try:
                if all(cached(r) for _, (_, r) in batch):
                    inputs = [_materialise(i, r, cache, pixels) for _, (i, r) in batch]
                else:  # decoding and resizing release the GIL: keep the event loop free for I/O
                    inputs = await asyncio.to_thread(lambda: [_materialise(i, r, cache, pixels) for _, (i, r) in batch])
                responses = await model.generate(inputs)
                if len(responses) != len(inputs):
                    raise RuntimeError(f"model returned {len(responses)} responses for {len(inputs)} inputs")
            except Exception as e:  # an adapter bug or a failing local model: recorded per input, run goes on
                msg = f"{type(e).__name__}: {e}"[:500]
                responses = [Response(None, error=ErrorInfo("model", msg, 1, False)) for _ in batch]
            for (key, _), resp in zip(batch, responses):
                store.put_response(key, resp)
                stats["asked"] += 1
                stats["errors"] += resp.error is not None
            on_done(model.name, len(batch))

    await asyncio.gather(*(one(b) for b in batches))
    return stats


def check_models(models: Sequence[Model]) -> None:
    """Fail fast, before any model call, on unique-name violations or e.g. a missing API-key variable."""
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be unique, got {names}")
    for m in models:
        check = getattr(m, "check_credentials", None)
        if callable(check):
            check()


async def execute(
    store: RunStore,
    plan: Plan,
    models: Sequence[Model],
    decoding: Decoding | None = None,
    *,
    retry_errors: bool = False,
    progress: bool = True,
    workers: int = 2,
    pixel_cache_mb: int = 512,
    model_decoding: dict[str, Decoding] | None = None,
) -> RunSummary:
    """Plan every model, then ask all pending inputs concurrently (models side by side), committing each answer.

    ``model_decoding`` overrides ``decoding`` for the named models."""
    t0 = time.perf_counter()
    decoding = decoding or Decoding()
    check_models(models)
    for src in plan.sources:
        store.add_probe_set(src.name, src.path, src.content_hash, src.rows, src.provenance)
    store.add_skipped([(s.probe_set, s.case_id, s.condition, s.reason) for s in plan.skipped])
    cache = SourceCache(256)
    pixels = PixelCache(pixel_cache_mb * 2**20)
    hashes = hash_images(store, plan.trials, cache, workers, pixels)
    answered = store.answered_keys(include_errors=not retry_errors)
    per_dec = model_decoding or {}
    works = [plan_model(store, m, plan.trials, hashes, per_dec.get(m.name, decoding), retry_errors, answered)
             for m in models]
    per_model: dict[str, dict[str, int]] = {
        w.model.name: {"trials": w.n_trials, "distinct_inputs": w.n_keys, "pending": len(w.pending)} for w in works
    }
    pending_total = sum(len(w.pending) for w in works)
    plan_s = time.perf_counter() - t0
    if pending_total:
        with _progress(progress, works) as advance:
            results = await asyncio.gather(*(_run_model(store, w, cache, pixels, advance) for w in works))
        for w, r in zip(works, results):
            per_model[w.model.name].update(r)
    for m in models:
        await m.aclose()
    return RunSummary(len(plan.trials), len(plan.skipped), per_model, time.perf_counter() - t0, plan_s)


class _progress:
    """A rich progress bar per model (rate and ETA), or a no-op."""

    def __init__(self, enabled: bool, works: Sequence[ModelWork]) -> None:
        self.enabled = enabled
        self.works = works
        self.tasks: dict[str, Any] = {}
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return lambda name, n: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[progress.percentage]{task.percentage:>3.0f}%"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            transient=False,
        )
        self.bar.__enter__()
        self.start = time.perf_counter()
        for w in self.works:
            if w.pending:
                self.tasks[w.model.name] = self.bar.add_task(w.model.name, total=len(w.pending), rate="")
        done: dict[str, int] = defaultdict(int)

        def advance(name: str, n: int) -> None:
            done[name] += n
            el = max(time.perf_counter() - self.start, 1e-9)
            self.bar.update(self.tasks[name], advance=n, rate=f"{done[name] / el:,.0f} answers/s")

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
