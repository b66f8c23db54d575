"""The runner: plan -> keyed model inputs -> concurrent execution, each answer committed as it arrives.

Every (model, input) is asked once: inputs are keyed by a content hash of the model identity and the exact
ModelInput (pixel hashes after all transforms, messages, decoding, sample index). A text-only model therefore
answers once per question whatever the image condition, a byte-identical request of two models (a text-only
wrapper and its served model under ``no_image``) is asked once, and a rerun of the same config asks nothing.

Before any model call every source file is checked (exists, header decodes, PNG CRCs); then images are
rendered, hashed and (for HTTP models) encoded by workers while the models already answer the inputs keyed
so far, so the image work overlaps the model time. Workers are processes when every image model takes
encoded bytes (they then run beside the event loop, which threads cannot: they share its GIL), else threads.
An input is queued once its image is ready, so the event loop never renders. Answers and the plan's rows
are committed by one writer thread, beside the event loop. A source whose pixel data
fails to decode later stops the run with an error naming the case; every answer committed until then stays
in the store and a rerun resumes.

Backpressure: rendering runs only a few batches ahead of the slowest model (render tasks are submitted while
every model's queue holds fewer image inputs than its cap), and an encoded image is kept only until the last
queued input needing it is handed over, so peak memory depends on concurrency and image size, not on the
number of trials.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import hashlib
import json
import multiprocessing as mp
import os
import queue
import re
import signal
import sys
import threading
import time
from array import array
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Container, Iterable, Iterator, MutableMapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring_ascii as _json_string  # json.dumps' own escaping (ensure_ascii)
from queue import Empty
from typing import Any, Literal, Self

import numpy as np

from medvlm_audit.aio import run_sync
from medvlm_audit.config import default_render_workers
from medvlm_audit.errors import EndpointError, ImageError, StoreError
from medvlm_audit.images import ImageRecipe, PixelCache, SourceCache, check_image_header
from medvlm_audit.models.base import (
    NOT_ASKED,
    Decoding,
    ErrorInfo,
    ImageData,
    Message,
    Model,
    ModelInput,
    Response,
    pixel_sha256,
)
from medvlm_audit.plan import Plan, Trial
from medvlm_audit.store import RunStore

_PLACEHOLDER = np.zeros((0, 0), dtype=np.uint8)
_DONE = object()  # end-of-work marker in a model's queue

Pending = tuple[str, ModelInput, tuple[ImageRecipe, ...]]  # key, input without pixels, recipes to render


@dataclass
class RunSummary:
    n_trials: int
    n_skipped: int
    per_model: dict[str, dict[str, Any]]  # trials, distinct_inputs, pending, asked, errors, not_asked, error_kinds,
    # stored (the plan's errors as the store holds them: what the run is judged on, medvlm_audit.health)
    elapsed_s: float
    plan_s: float = 0.0  # until every image was hashed and every trial keyed (overlaps the asking)
    first_input_s: float | None = None  # until the first input was queued for a model
    max_error_rate: float = 0.05  # a model whose error share exceeds this fails the run (medvlm_audit.health)
    store: dict[str, dict[str, Any]] = field(default_factory=dict)  # per model: the store's totals (all runs)
    #: skipped conditions by "condition: reason" (a condition that does not apply to a case, e.g. a mask on a
    #: case without a box), with their counts
    skipped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "n_trials": self.n_trials,
            "n_skipped": self.n_skipped,
            "skipped_by": dict(self.skipped),
            "per_model": self.per_model,
            "elapsed_s": round(self.elapsed_s, 3),
            "plan_s": round(self.plan_s, 3),
            "first_input_s": None if self.first_input_s is None else round(self.first_input_s, 3),
            "max_error_rate": self.max_error_rate,
        }


class TrialIndex:
    """The distinct image recipes of a plan, which trials wait on each, and the trial to name in errors.

    Compact for large plans: a recipe that one trial waits on (most) maps to that trial's index, one that
    several wait on to a list of them; there is no second table of first trials (an error, the only reader,
    finds the trial again)."""

    def __init__(self, trials: Sequence[Trial]) -> None:
        self.trials = trials
        #: recipe -> the trial index waiting on it, or a list of them; insertion order is the plan's
        self.waiting: dict[ImageRecipe, int | list[int]] = {}
        #: per trial, how many of its distinct images are not hashed yet (4 bytes per trial)
        self.missing = array("I", bytes(4 * len(trials)))
        #: the images of multi-image trials: recipe -> how many such trials show it
        self.multi: Counter[ImageRecipe] = Counter()
        waiting, missing, multi = self.waiting, self.missing, self.multi
        # one pass over the images only (a compact plan hands them over without building its trials)
        fast = getattr(trials, "image_tuples", None)
        for i, images in enumerate(fast() if fast is not None else (t.images for t in trials)):
            if not images:
                continue
            if len(images) > 1:
                images = tuple(dict.fromkeys(images))
                multi.update(images)
            for r in images:
                w = waiting.get(r)
                if w is None:
                    waiting[r] = i
                elif type(w) is int:
                    waiting[r] = [w, i]
                else:
                    w.append(i)
                missing[i] += 1

    @property
    def first(self) -> Iterable[ImageRecipe]:
        """The distinct recipes not yet resolved, in plan order (before :meth:`resolve`: every recipe)."""
        return self.waiting.keys()

    def named(self, r: ImageRecipe, e: Exception) -> ImageError:
        w = self.waiting.get(r)
        if w is None:  # resolved already: find its first trial again (an error path only)
            t = next(t for t in self.trials if r in t.images)
        else:
            t = self.trials[w if type(w) is int else w[0]]
        return ImageError(f"case {t.case_id!r} ({t.probe_set}), condition {t.condition}: {e}")

    def ready_without_images(self) -> list[int]:
        return [i for i, m in enumerate(self.missing) if m == 0]

    def resolve(self, recipes: Iterable[ImageRecipe]) -> list[int]:
        """Mark recipes as hashed; return the trials that have become ready (all their images hashed)."""
        ready = []
        missing = self.missing
        for r in recipes:
            w = self.waiting.pop(r, None)
            if w is None:
                continue
            for i in (w,) if type(w) is int else w:
                missing[i] -= 1
                if missing[i] == 0:
                    ready.append(i)
        return ready


class SourceKeys(MutableMapping[ImageRecipe, str]):
    """Each recipe's cache key (:meth:`ImageRecipe.cache_key`), built when read from one stat per source file:
    a large plan holds a (size, mtime) pair per file and an entry per recipe, not a ~200-byte key per recipe
    (40,000 recipes: 8 MB). Iterates in the order recipes were added; ``del``/``pop`` drop a recipe."""

    def __init__(self) -> None:
        #: source -> its (size, mtime_ns) as one int, mtime_ns * 2**64 + size (~45 bytes, a tuple of two ~120)
        self._stats: dict[str, int] = {}
        self._recipes: dict[ImageRecipe, None] = {}

    def add(self, r: ImageRecipe) -> None:
        """Take a recipe, its file stat once per source (ImageError naming a missing file)."""
        if r.source not in self._stats:
            size, mtime_ns = r.file_stat()
            self._stats[r.source] = mtime_ns * 2**64 + size
        self._recipes[r] = None

    def __getitem__(self, r: ImageRecipe) -> str:
        if r not in self._recipes:
            raise KeyError(r)
        mtime_ns, size = divmod(self._stats[r.source], 2**64)
        return r.cache_key((size, mtime_ns))

    def __setitem__(self, r: ImageRecipe, key: str) -> None:
        raise TypeError("SourceKeys are built from the files: use add()")

    def __delitem__(self, r: ImageRecipe) -> None:
        del self._recipes[r]

    def __contains__(self, r: object) -> bool:
        return r in self._recipes

    def __iter__(self) -> Iterator[ImageRecipe]:
        return iter(self._recipes)

    def __len__(self) -> int:
        return len(self._recipes)


def check_sources(index: TrialIndex, known: Container[str] = ()) -> SourceKeys:
    """Check every source file once (exists, header decodes, PNG CRCs) and return each recipe's cache key.

    Runs before any model call, so a missing or unreadable file fails the run with the case named. ``known``:
    recipe cache keys already hashed in the run store (``RunStore.image_hashes``); a key names the file's
    path, size and mtime, so a source with a known key was fully decoded by an earlier invocation and is
    unchanged since: it is not read again (a resumed or extended run checks only new or changed files)."""
    keys = SourceKeys()
    proven: set[str] = set()
    for r in index.first:
        try:
            keys.add(r)
        except ImageError as e:
            raise index.named(r, e) from None
        if known and keys[r] in known:
            proven.add(r.source)
    checked: dict[str, Exception | None] = {}
    for r in index.first:
        if r.source in proven:
            continue
        if r.source not in checked:
            try:
                check_image_header(r.source)
                checked[r.source] = None
            except ImageError as e:
                checked[r.source] = e
        err = checked[r.source]
        if err is not None:
            raise index.named(r, err) from None
    return keys


Rendered = tuple["ImageRecipe | int", "str | Exception", "np.ndarray | None", tuple[bytes, ...]]

_WORKER_CACHE: SourceCache | None = None


def render_sources(
    groups: Sequence[Sequence[ImageRecipe]],
    encoders: Sequence[Callable[[np.ndarray], bytes]] = (),
    want_pixels: bool = True,
    cache: SourceCache | None = None,
    positions: bool = False,
) -> list[Rendered]:
    """Render, hash and encode (for each model encoder) the recipes of some source files, one decode and one
    resize per file: (recipe, sha256 or the ImageError, pixels when ``want_pixels``, encoded bytes).

    ``positions``: each result names its recipe by its position in ``groups`` (flattened) instead of the
    recipe itself, so a worker process does not ship recipes back (the parent keeps its own; unpickled
    copies would be held again by every dict that the parent keys by recipe).

    In a worker process (no ``cache`` given) it keeps its own source cache and runs at a lower priority:
    the request path (event loop, a local server) comes first, rendering only has to stay ahead of it."""
    global _WORKER_CACHE
    if cache is None:
        if _WORKER_CACHE is None:
            _WORKER_CACHE = SourceCache(16)
            if hasattr(os, "nice"):
                os.nice(10)
        cache = _WORKER_CACHE
    out: list[Rendered] = []
    i = 0
    for group in groups:
        for j, r in enumerate(group):
            name: Any = i + j if positions else r
            try:
                px = r.render(cache)
            except ImageError as e:
                out.append((name, e, None, ()))
                break
            out.append((name, pixel_sha256(px), px if want_pixels else None, tuple(enc(px) for enc in encoders)))
        i += len(group)
    return out


def _render_worker_init(parent_pid: int) -> None:
    """Set up a render worker process: it ignores Ctrl-C (the parent handles it and ends the pool; a worker
    printing its own KeyboardInterrupt traceback helps nobody) and dies with its parent, even one killed by
    SIGKILL: the kernel's parent-death signal on Linux, a watchdog thread on the parent's pid elsewhere."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    armed = False
    if sys.platform == "linux":
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watchdog", daemon=True).start()


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _watch_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval_s)
    os._exit(1)


def group_by_source(recipes: Iterable[ImageRecipe]) -> list[list[ImageRecipe]]:
    """One task per source file, so its conditions share one decode and one resize."""
    by_source: dict[str, list[ImageRecipe]] = {}
    for r in recipes:
        by_source.setdefault(r.source, []).append(r)
    return list(by_source.values())


def hash_images(
    store: RunStore,
    trials: Sequence[Trial],
    cache: SourceCache,
    workers: int | None = None,
    pixels: PixelCache | None = None,
) -> dict[ImageRecipe, str]:
    """Pixel sha256 of every distinct recipe, all at once (the streaming runner does this incrementally);
    cached in the store so a resumed run does not re-render."""
    workers = workers or default_render_workers()
    index = TrialIndex(trials)
    keys = check_sources(index)
    known = store.image_hashes()
    out = {r: known[ck] for r, ck in keys.items() if ck in known}
    todo = [r for r in keys if r not in out]
    new: list[tuple[str, str]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for group in pool.map(lambda g: render_sources([g], cache=cache), group_by_source(todo)):
            for r, h, px, _ in group:
                if isinstance(h, Exception):
                    raise index.named(r, h) from None
                if pixels is not None:
                    pixels.put(r, px)
                out[r] = h
                new.append((keys[r], h))
    if new:
        store.add_image_hashes(new)
    return out


_SLOT = "@medvlm-image-slot-"


def _split_slots(text: str, n: int) -> tuple[str, ...]:
    """``text`` split at its n image-hash slots (the JSON of an input whose image hashes are slots)."""
    pieces: list[str] = []
    for i in range(n):
        before, found, text = text.partition(f"{_SLOT}{i}")
        if not found:
            raise AssertionError("image slot lost in JSON encoding")
        pieces.append(before)
    return (*pieces, text)


_TEXT_SLOT = "@medvlm-text-slot-"
_SLOTS = re.compile(rf'"{_TEXT_SLOT}(\d+)"|{_SLOT}(\d+)')


def _skeleton_parts(text: str, n_texts: int, n_images: int) -> tuple[tuple[int, Any], ...]:
    """The JSON of an input whose message texts and image hashes are slots, as parts: (0, literal JSON),
    (1, message index: its text goes here, quotes included), (2, image index: a split point)."""
    parts: list[tuple[int, Any]] = []
    texts, images, pos = [], [], 0
    for m in _SLOTS.finditer(text):
        parts.append((0, text[pos:m.start()]))
        if m.group(1) is not None:
            texts.append(int(m.group(1)))
            parts.append((1, texts[-1]))
        else:
            images.append(int(m.group(2)))
            parts.append((2, images[-1]))
        pos = m.end()
    parts.append((0, text[pos:]))
    if sorted(texts) != list(range(n_texts)) or images != list(range(n_images)):
        raise AssertionError("slot lost in JSON encoding")
    return tuple(parts)


def _fill_texts(parts: tuple[tuple[int, Any], ...], texts: Sequence[str]) -> tuple[str, ...]:
    """A skeleton's parts with the (JSON-escaped) texts filled in, split at its image slots."""
    pieces: list[str] = []
    cur: list[str] = []
    for kind, v in parts:
        if kind == 0:
            cur.append(v)
        elif kind == 1:
            cur.append(texts[v])
        else:
            pieces.append("".join(cur))
            cur = []
    pieces.append("".join(cur))
    return tuple(pieces)


@dataclass(frozen=True, slots=True)
class _KeyTemplate:
    """A prepared input with image slots and its serialised key payload / request description, split at
    the slots: keying a trial is then string joins and one sha256 (same bytes as :func:`input_key`)."""

    input: ModelInput
    key_pieces: tuple[str, ...]
    request_pieces: tuple[str, ...]
    #: 1 where the request asks for log-probabilities (its description's ``decoding.logprobs`` is true), else 0
    logprobs: int

    @staticmethod
    def _fill(pieces: tuple[str, ...], shas: Sequence[str]) -> str:
        if not shas:
            return pieces[0]
        return "".join(p + h for p, h in zip(pieces, shas)) + pieces[-1]

    def key_json(self, shas: Sequence[str]) -> str:
        return self._fill(self.key_pieces, shas)

    def request_json(self, shas: Sequence[str]) -> str:
        return self._fill(self.request_pieces, shas)


@dataclass
class ModelWork:
    """One model's share of a run: keys its trials as their images are hashed, queues the inputs to ask.

    ``claimed`` is shared by every model of a run: a key another model already queued (a byte-identical
    request, e.g. a text-only wrapper's question that its served model also asks under ``no_image``) is not
    queued again; its answer is stored once under that key and serves both models' trials. ``None``: no other
    model shares the run (its own ``keys`` already say what it queued; a second set of a large plan's keys is
    ~2 MB per 30,000).

    ``keys`` and ``claimed`` hold each key as its 32-byte SHA-256 digest (the store, ``answered`` and the queued
    inputs have the hex string, ``digest.hex()``): a set of a large plan's keys costs half as much
    (:meth:`key_hexes` gives them as the store writes them)."""

    model: Model
    decoding: Decoding
    answered: set[str]
    claimed: set[bytes] | None = field(default_factory=set)
    n_trials: int = 0
    identity: dict[str, Any] = field(default_factory=dict)
    keys: set[bytes] = field(default_factory=set)
    #: inputs queued to ask in this run (their count; the inputs themselves go to the queue, not kept here)
    n_pending: int = 0
    _templates: dict[tuple, _KeyTemplate] = field(default_factory=dict)
    _skeletons: dict[tuple, tuple] = field(default_factory=dict)
    _decodings: dict[tuple, Decoding] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.identity = self.model.identity()

    @property
    def n_keys(self) -> int:
        return len(self.keys)

    def key_hexes(self) -> set[str]:
        """The keys of the trials admitted so far, as the store writes them (hex)."""
        return {d.hex() for d in self.keys}

    def admit(
        self, trials: Iterable[Trial], hashes: dict[ImageRecipe, str]
    ) -> tuple[list[tuple], list[tuple[str, str, str, int]], list[Pending]]:
        """Key trials whose images are hashed: (trial rows, new request rows, newly pending inputs)."""
        model = self.model
        rows: list[tuple] = []
        requests: list[tuple[str, str, str, int]] = []
        new: list[Pending] = []
        for t in trials:
            tpl = self._template(t)
            n = len(tpl.input.images)
            shas = [hashes[r] for r in t.images][:n] if n else []
            digest = hashlib.sha256(tpl.key_json(shas).encode()).digest()
            key = digest.hex()  # what the store holds: the hex digest
            if digest not in self.keys:
                self.keys.add(digest)
                requests.append((key, model.name, tpl.request_json(shas), tpl.logprobs))
                claimed = self.claimed
                if key not in self.answered and (claimed is None or digest not in claimed):
                    if claimed is not None:
                        claimed.add(digest)
                    self.n_pending += 1
                    inp = tpl.input
                    if shas:
                        inp = ModelInput(inp.messages, tuple(ImageData(_PLACEHOLDER, h) for h in shas), inp.decoding,
                                         inp.sample_index)
                    new.append((key, inp, t.images if n else ()))
            rows.append(
                (model.name, t.probe_set, t.case_id, t.condition, t.sample_index, key, shas[0] if shas else None,
                 json.dumps(t.payload, sort_keys=True) if t.payload else None)
            )
        self.n_trials += len(rows)
        return rows, requests, new

    def _template(self, t: Trial) -> _KeyTemplate:
        """The model's prepared input and its key / request JSON for this trial's question, decoding and
        sample, with the image hashes left as slots (many trials differ only in their images)."""
        tsig = (t.messages, len(t.images), t.sample_index, t.decoding)
        tpl = self._templates.get(tsig)
        if tpl is None:
            dsig = (t.decoding, t.sample_index)
            dec = self._decodings.get(dsig)
            if dec is None:  # a few distinct decodings per run, validated once each
                dec = self.decoding
                if t.decoding:
                    dec = replace(dec, **dict(t.decoding))
                if dec.seed is not None and t.sample_index:
                    dec = replace(dec, seed=dec.seed + t.sample_index)
                if len(self._decodings) >= 4096:
                    self._decodings.clear()
                self._decodings[dsig] = dec
            slots = tuple(ImageData(_PLACEHOLDER, f"{_SLOT}{i}") for i in range(len(t.images)))
            inp = self.model.prepare(ModelInput(t.messages, slots, dec, t.sample_index))
            if len(self._templates) >= 4096:  # bounded: a judge stage has one distinct prompt per trial
                self._templates.clear()
            tpl = self._templates[tsig] = _KeyTemplate(inp, *self._serialised(inp))
        return tpl

    def _serialised(self, inp: ModelInput) -> tuple[tuple[str, ...], tuple[str, ...], int]:
        """The key payload and the request description of a prepared input (image hashes as slots), split at
        the image slots. Each message text is JSON-escaped once and spliced into a skeleton serialised once per
        (roles, image count, decoding, sample): the same bytes as serialising the whole input, without encoding
        every distinct prompt twice (a judge stage has one per trial)."""
        msgs, n = inp.messages, len(inp.images)
        # a subclass may describe itself otherwise, a content may not be plain text: serialise those whole
        if type(inp) is not ModelInput or not all(type(m.content) is str for m in msgs):
            desc = inp.describe()
            key_json = json.dumps({"model": self.identity, "input": desc}, sort_keys=True, separators=(",", ":"))
            dec = desc.get("decoding")
            lp = int(isinstance(dec, dict) and dec.get("logprobs") == 1)
            return _split_slots(key_json, n), _split_slots(json.dumps(desc, sort_keys=True), n), lp
        ssig = (tuple(m.role for m in msgs), n, inp.decoding, inp.sample_index)
        sk = self._skeletons.get(ssig)
        if sk is None:
            marked = replace(inp, messages=tuple(Message(m.role, f"{_TEXT_SLOT}{i}") for i, m in enumerate(msgs)))
            desc = marked.describe()
            key_json = json.dumps({"model": self.identity, "input": desc}, sort_keys=True, separators=(",", ":"))
            if len(self._skeletons) >= 256:
                self._skeletons.clear()
            dec = desc.get("decoding")
            sk = self._skeletons[ssig] = (_skeleton_parts(key_json, len(msgs), n),
                                          _skeleton_parts(json.dumps(desc, sort_keys=True), len(msgs), n),
                                          int(isinstance(dec, dict) and dec.get("logprobs") == 1))
        texts = [_json_string(m.content) for m in msgs]
        return _fill_texts(sk[0], texts), _fill_texts(sk[1], texts), sk[2]


def record_model(store: RunStore, model: Model) -> None:
    """Record a model's modality and identity (its cache-key part) and, for a reference model, the behaviour
    it was built to show (``model.designed``, kept out of the identity so it never changes a key)."""
    store.add_model(model.name, model.modality, model.identity())
    designed = getattr(model, "designed", None)
    if designed:
        store.set_meta(**{f"designed:{model.name}": str(designed)})


def plan_model(
    store: RunStore,
    model: Model,
    trials: Sequence[Trial],
    hashes: dict[ImageRecipe, str],
    decoding: Decoding,
    retry_errors: bool,
    answered: set[str] | None = None,
) -> ModelWork:
    """Key every trial for one model at once, record trials and requests, and collect the inputs to ask."""
    record_model(store, model)
    done = answered if answered is not None else store.answered_keys(include_errors=not retry_errors)
    work = ModelWork(model, decoding, done)
    rows, requests, _ = work.admit(trials, hashes)
    with store.transaction():
        store.add_trials(rows)
        store.add_requests(requests)
    return work


def _materialise(
    inp: ModelInput, recipes: tuple[ImageRecipe, ...], cache: SourceCache, pixels: PixelCache | None = None
) -> ModelInput:
    """The input with its images' pixels: from the pixel cache, else rendered on first access (a model that
    was handed the encoded image never touches them)."""
    if not recipes:
        return inp
    images = []
    for r, placeholder in zip(recipes, inp.images):
        px = pixels.get(r) if pixels is not None else None
        if px is not None:
            images.append(ImageData(px, placeholder.sha256))
        else:
            images.append(ImageData(None, placeholder.sha256, functools.partial(r.render, cache)))
    return ModelInput(inp.messages, tuple(images), inp.decoding, inp.sample_index)


async def _render_stream(
    recipes: Sequence[ImageRecipe],
    workers: int,
    cache: SourceCache,
    pixels: PixelCache,
    encoders: Sequence[Callable[[np.ndarray], bytes]],
    processes: bool = False,
    want_pixels: bool = True,
    room: _Room | None = None,
) -> AsyncIterator[list[tuple[ImageRecipe, str | Exception, tuple[bytes, ...]]]]:
    """Render + hash the recipes in worker threads or worker processes (a few source files per task); yields
    the results of every task finished since the last yield: (recipe, sha256 or the error, encoded bytes per
    encoder), with pixels put in ``pixels`` when ``want_pixels``.

    Backpressure: at most two tasks per worker are in flight, and a new one is submitted only while ``room``
    says the models' queues have room, so rendering never runs further ahead of the requests than a few
    batches: memory depends on the models' concurrency and the image size, not on the number of trials.
    Threads share the event loop's GIL, so this image work does not run beside the loop; processes do,
    and send back only hashes and encoded bytes (pixels too when ``want_pixels``)."""
    if not recipes:
        return
    loop = asyncio.get_running_loop()
    finished: asyncio.Queue = asyncio.Queue()
    groups = group_by_source(recipes)
    # the first task is one source file, so the first inputs are ready at once; then 8 files per task
    chunks = iter([groups[:1]] + [groups[i : i + 8] for i in range(1, len(groups), 8)])
    max_inflight = 2 * max(1, workers)
    pool: Executor
    if processes:
        method = "fork" if sys.platform == "linux" else "spawn"
        pool = ProcessPoolExecutor(max(1, workers), mp_context=mp.get_context(method),
                                   initializer=_render_worker_init, initargs=(os.getpid(),))
        args: tuple = (encoders, want_pixels, None, True)
    else:
        pool = ThreadPoolExecutor(max(1, workers))
        args = (encoders, True, cache, True)
    inflight: dict[asyncio.Future, list[ImageRecipe]] = {}  # a task -> its recipes, in order
    # with worker processes, the first task (one source file) is rendered in a thread of this process, and the
    # processes are forked once it is back: the first requests go out while the pool starts, not after
    hold = processes
    if processes:
        first = next(chunks)
        f = loop.run_in_executor(None, render_sources, first, encoders, True, cache, True)
        f.add_done_callback(finished.put_nowait)
        inflight[f] = [r for g in first for r in g]
    with pool:
        try:
            more = True
            while True:
                while more and not hold and len(inflight) < max_inflight and (room is None or room.free()):
                    chunk = next(chunks, None)
                    if chunk is None:
                        more = False
                        break
                    f = loop.run_in_executor(pool, render_sources, chunk, *args)
                    f.add_done_callback(finished.put_nowait)
                    inflight[f] = [r for g in chunk for r in g]
                if not inflight:
                    if not more:
                        break
                    assert room is not None
                    await room.wait()
                    continue
                done = [await finished.get()]
                while not finished.empty():
                    done.append(finished.get_nowait())
                hold = False
                out: list[tuple[ImageRecipe, str | Exception, tuple[bytes, ...]]] = []
                for f in done:
                    named = inflight.pop(f)
                    for i, h, px, encoded in f.result():
                        r = named[i]
                        if px is not None and want_pixels:
                            pixels.put(r, px)
                        out.append((r, h, encoded))
                del done, f, named
                yield out
                del out
        finally:
            for f in inflight:
                f.cancel()


class _Room:
    """How many image-bearing inputs wait in each model's queue; rendering pauses while any queue holds
    ``cap`` or more (the slowest model sets the pace of the image work, so encoded images never pile up)."""

    def __init__(self, caps: Sequence[int]) -> None:
        self.caps = list(caps)
        self.waiting = [0] * len(caps)
        self._event = asyncio.Event()
        self._event.set()

    def free(self) -> bool:
        return all(w < c for w, c in zip(self.waiting, self.caps))

    def queued(self, qi: int, n: int = 1) -> None:
        self.waiting[qi] += n
        if not self.free():
            self._event.clear()

    def taken(self, qi: int, n: int) -> None:
        self.waiting[qi] -= n
        if self.free():
            self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


class _Encoded:
    """The encoded images (as each model sends them, e.g. a PNG's data URL) render workers made for the models'
    encoders, each kept until the last queued input that needs it was handed to its model: (recipe, encoder
    index) -> bytes, with use counts."""

    def __init__(self) -> None:
        self.data: dict[tuple[ImageRecipe, int], bytes] = {}
        self.uses: Counter[tuple[ImageRecipe, int]] = Counter()
        #: images of multi-image trials not yet keyed (such a trial waits for its other images): recipe ->
        #: trials still to come; their bytes are kept for them (single-image trials are keyed at render time)
        self.need: Counter[ImageRecipe] = Counter()

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.data.values())

    def put(self, r: ImageRecipe, encoded: Sequence[bytes]) -> None:
        for j, b in enumerate(encoded):
            self.data[(r, j)] = b

    def want(self, recipes: Iterable[ImageRecipe], j: int) -> None:
        for r in recipes:
            self.uses[(r, j)] += 1

    def take(self, r: ImageRecipe, j: int) -> bytes | None:
        """The bytes for one use; dropped after the last use."""
        k = (r, j)
        n = self.uses[k] - 1
        if n > 0:
            self.uses[k] = n
            return self.data.get(k)
        self.uses.pop(k, None)
        return self.data.pop(k, None) if r not in self.need else self.data.get(k)

    def admitted(self, trials: Iterable[Trial], n_encoders: int) -> None:
        """Trials keyed: a multi-image trial's images are no longer kept for it."""
        for t in trials:
            if len(t.images) > 1:
                for r in dict.fromkeys(t.images):
                    self.need[r] -= 1
                    if self.need[r] <= 0:
                        del self.need[r]
                        self.unwanted((r,), n_encoders)

    def unwanted(self, recipes: Iterable[ImageRecipe], n_encoders: int) -> None:
        """Drop what no queued input needs (a recipe whose inputs were all deduplicated or answered)."""
        for r in recipes:
            if r in self.need:
                continue
            for j in range(n_encoders):
                if (r, j) not in self.uses:
                    self.data.pop((r, j), None)


def _distinct_encoders(models: Sequence[Model]) -> tuple[list[Callable[[np.ndarray], bytes]], list[int | None]]:
    """The distinct image encoders of the models (equal ones run once) and each model's index into them."""
    encoders: list[Callable[[np.ndarray], bytes]] = []
    seen: dict[str, int] = {}
    of: list[int | None] = []
    for m in models:
        enc = m.image_encoder() if m.modality != "text_only" else None
        if enc is None:
            of.append(None)
            continue
        ident = repr(enc)  # equal partials (same function, same settings) print the same
        if ident not in seen:
            seen[ident] = len(encoders)
            encoders.append(enc)
        of.append(seen[ident])
    return encoders, of


class _Either:
    """Membership in either of two containers (a view: neither is copied)."""

    __slots__ = ("a", "b")

    def __init__(self, a: Container, b: Container) -> None:
        self.a, self.b = a, b

    def __contains__(self, x: object) -> bool:
        return x in self.a or x in self.b


class _Feed:
    """Hands keyed inputs to their model's queue once the images they need are rendered in this run, so
    models never wait on the event loop to render; inputs needing no image, or an image nobody is rendering,
    go at once. ``unrendered`` (the images scheduled for rendering in this run and not rendered yet) is None
    until the render list is known: until then every image waits.

    It counts the image-bearing inputs in each queue (``room``, which paces the rendering) and the queued
    uses of each encoded image (``encoded``, which drops an image after its last use)."""

    def __init__(self, queues: Sequence[asyncio.Queue], encoder_of: Sequence[int | None] = (),
                 caps: Sequence[int] | None = None, pixels: PixelCache | None = None) -> None:
        self.queues = queues
        self.encoder_of = list(encoder_of) or [None] * len(queues)
        #: rendered pixels for the models that take pixels (local models), each dropped after its last queued use
        self.pixels = pixels
        self.pixel_uses: Counter[ImageRecipe] = Counter()
        self.room = _Room(caps if caps is not None else [2**62] * len(queues))
        self.encoded = _Encoded()
        self.unrendered: Container[ImageRecipe] | None = None
        self.parked: dict[ImageRecipe, list[list]] = defaultdict(list)  # recipe -> [[missing, queue, item]]

    def offer(self, qi: int, item: Pending) -> None:
        if item[2]:
            j = self.encoder_of[qi]
            if j is not None:
                self.encoded.want(item[2], j)
            else:
                self.pixel_uses.update(set(item[2]))
        unrendered = self.unrendered
        missing = list(item[2]) if unrendered is None else [r for r in item[2] if r in unrendered]
        if not missing:
            self._queue(qi, item)
            return
        slot = [len(missing), qi, item]
        for r in missing:
            self.parked[r].append(slot)

    def _queue(self, qi: int, item: Pending) -> None:
        self.queues[qi].put_nowait(item)
        if item[2]:
            self.room.queued(qi)

    def rendered(self, recipes: Iterable[ImageRecipe]) -> None:
        """Images rendered (already out of ``unrendered``): queue the inputs that waited only for them."""
        for r in recipes:
            for slot in self.parked.pop(r, ()):
                slot[0] -= 1
                if slot[0] == 0:
                    self._queue(slot[1], slot[2])

    def materialised(self, qi: int, batch: Sequence[Pending]) -> None:
        """A pixel model's batch holds its pixels now: drop those no queued input needs any more."""
        if self.encoder_of[qi] is not None or self.pixels is None:
            return
        for item in batch:
            for r in dict.fromkeys(item[2]):
                n = self.pixel_uses[r] - 1
                if n > 0:
                    self.pixel_uses[r] = n
                    continue
                del self.pixel_uses[r]
                if r not in self.encoded.need:
                    self.pixels.discard(r)

    def unwanted_pixels(self, recipes: Iterable[ImageRecipe]) -> None:
        """Drop rendered pixels no queued input needs (all their inputs deduplicated or answered)."""
        if self.pixels is None:
            return
        for r in recipes:
            if r not in self.pixel_uses and r not in self.encoded.need:
                self.pixels.discard(r)

    def taken(self, qi: int, batch: Sequence[Pending]) -> list[list[bytes | None]]:
        """A model took ``batch`` from its queue: free its room and hand over its encoded images (None for
        an image rendered by nobody in this run: the model then encodes it itself)."""
        n = sum(1 for item in batch if item[2])
        if n:
            self.room.taken(qi, n)
        j = self.encoder_of[qi]
        if j is None:
            return [[] for _ in batch]
        return [[self.encoded.take(r, j) for r in item[2]] for item in batch]


class _PlanRows:
    """Trial, request and image-hash rows, handed to ``sink`` (the run's :class:`_GroupCommit`, whose writer thread
    commits them) in large batches. They are derivable from the plan (a resumed run writes them again), so unlike
    answers they need not be committed one by one."""

    def __init__(self, sink: Callable[[dict[str, list[tuple]]], None], max_rows: int = 5_000) -> None:
        self.sink = sink
        self.max_rows = max_rows
        self.rows: dict[str, list[tuple]] = {"trials": [], "requests": [], "image_hashes": []}
        self.n = 0

    def add(self, **rows: list[tuple]) -> None:
        for table, new in rows.items():
            self.rows[table].extend(new)
            self.n += len(new)
        if self.n >= self.max_rows:
            self.flush()

    def flush(self) -> None:
        if self.n:
            rows, self.rows, self.n = self.rows, {k: [] for k in self.rows}, 0
            self.sink(rows)


_STOP = object()


class _GroupCommit:
    """Commits the run's writes from one writer thread: each answer is handed over as it arrives and committed
    at once, with every answer that arrived while the previous commit ran, in one transaction (nothing waits
    for a timer or a batch size). The plan's rows (:class:`_PlanRows`) go through the same thread, so during a
    run only this thread uses the store's connection. SQLite runs without the GIL, so commits proceed beside
    the event loop instead of between its turns.

    While another process holds the store's write lock a commit is retried with backoff (in this thread) for up
    to the store's ``lock_wait_s``; a commit that still fails (locked too long, disk full, read-only file) sets
    ``error`` and resolves ``failed`` on the loop, which stops the run at once; nothing more is committed.
    Answers are never dropped without being counted in ``unsaved``. :meth:`close` (from
    the loop's thread, after the last answer) waits until everything handed over is committed."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.added = 0
        self.saved = 0
        self.error: StoreError | None = None
        self._loop = asyncio.get_running_loop()
        self.failed: asyncio.Future = self._loop.create_future()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = threading.Thread(target=self._write, name="medvlm-store-writer",
                                                                 daemon=True)
        self._thread.start()

    @property
    def unsaved(self) -> int:
        return self.added - self.saved

    def add(self, key: str, resp: Response) -> None:
        self.added += 1
        self._queue.put((key, resp))

    def add_plan(self, rows: dict[str, list[tuple]]) -> None:
        self._queue.put(rows)

    def _write(self) -> None:
        q = self._queue
        stop = False
        while not stop:
            items = [q.get()]
            while True:  # everything handed over meanwhile joins this transaction
                try:
                    items.append(q.get_nowait())
                except Empty:
                    break
            stop = any(i is _STOP for i in items)
            answers = [i for i in items if type(i) is tuple]
            try:
                # the plan's rows first, in their own transaction: a failing answer commit does not take them along
                for rows in (i for i in items if type(i) is dict):
                    self.store.add_plan_rows(rows["image_hashes"], rows["trials"], rows["requests"])
                if answers:
                    self.store.put_responses(answers)  # one transaction, retried while another process holds the lock
            except StoreError as e:
                self._fail(e)
                return
            except BaseException as e:  # noqa: BLE001  never die silently: the run must stop
                self._fail(StoreError(f"cannot save answers to the run store {self.store.path}: {e}", str(e)))
                return
            self.saved += len(answers)

    def close(self) -> None:
        """Wait until every write handed over is committed (or has failed), then end the writer thread."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join()
        self._thread = None

    def _fail(self, e: StoreError) -> None:
        self.error = e

        def resolve() -> None:
            if not self.failed.done():
                self.failed.set_result(None)

        try:
            self._loop.call_soon_threadsafe(resolve)
        except RuntimeError:  # the loop has closed: the final flush reads ``error``
            pass

    def stopped_error(self) -> StoreError:
        """The one-line error of a run stopped by a failed commit: cause, what is kept, how to resume."""
        assert self.error is not None
        n = self.unsaved
        try:
            kept = f" ({self.store.db.execute('SELECT COUNT(*) FROM responses').fetchone()[0]} in the store)"
        except Exception:  # noqa: BLE001  the count is informative only
            kept = ""
        lost = (f"{n} answer{'s' if n != 1 else ''} received just before the failure could not be saved and will "
                "be asked again; " if n else "")
        return type(self.error)(
            f"cannot save answers to the run store {self.store.path}: {self.error.cause}. The run stopped; "
            f"{lost}every answer committed before is kept{kept}. "
            + _RESUME_HINT,
            self.error.cause,
        )


async def _take_batch(queue: asyncio.Queue, size: int) -> list[Pending]:
    """Up to ``size`` pending inputs; waits for a full batch unless the producer has finished."""
    batch: list[Pending] = []
    while len(batch) < size:
        item = await queue.get()
        if item is _DONE:
            queue.put_nowait(_DONE)  # leave the marker for the model's other workers
            break
        batch.append(item)
    return batch


async def _ask(
    commit: _GroupCommit,
    work: ModelWork,
    queue: asyncio.Queue,
    cache: SourceCache,
    pixels: PixelCache,
    on_done: Callable[[str, int], None],
    feed: _Feed | None = None,
    qi: int = 0,
) -> dict[str, int]:
    """A model's workers: take batches from its queue, ask, commit each answer as it arrives."""
    model = work.model
    bs = max(1, model.batch_size)
    stats: dict[str, Any] = {"asked": 0, "errors": 0, "not_asked": 0, "error_kinds": {}, "missing_logprobs": 0}

    async def worker() -> None:
        while batch := await _take_batch(queue, bs):
            encoded = feed.taken(qi, batch) if feed is not None else [[] for _ in batch]
            try:
                inputs = [_materialise(i, r, cache, pixels) for _, i, r in batch]
                if feed is not None:
                    feed.materialised(qi, batch)
                for datas, inp in zip(encoded, inputs):  # bytes a render worker encoded for this model
                    for data, im in zip(datas, inp.images):
                        if data is not None:
                            model.prime_image(im.sha256, data)
                del encoded
                responses = await model.generate(inputs)
                if len(responses) != len(inputs):
                    raise RuntimeError(f"model returned {len(responses)} responses for {len(inputs)} inputs")
            except ImageError:
                raise
            except Exception as e:  # noqa: BLE001  an adapter bug or a failing local model: recorded per input, run goes on
                msg = f"{type(e).__name__}: {e}"[:500]
                responses = [Response(None, error=ErrorInfo("model", msg, 1, False)) for _ in batch]
            for (key, inp, _), resp in zip(batch, responses):
                if resp.error is not None:
                    kinds = stats["error_kinds"].setdefault(resp.error.kind, {"n": 0, "sample": resp.error.message})
                    kinds["n"] += 1
                    if resp.error.kind == NOT_ASKED:  # never sent: not stored, so a rerun asks it
                        stats["not_asked"] += 1
                        continue
                    stats["errors"] += 1
                commit.add(key, resp)
                stats["asked"] += 1
                # a success without the log-probabilities asked for has no confidence: counted, re-askable
                stats["missing_logprobs"] += (resp.error is None and inp.decoding.logprobs
                                              and not resp.top_logprobs)
            on_done(model.name, len(batch))

    await asyncio.gather(*(worker() for _ in range(max(1, model.max_concurrency))))
    return stats


def check_endpoints(models: Sequence[Model], warn: Callable[[str], Any] | None = None) -> None:
    """Ask every HTTP model's base URLs a cheap request before anything is planned or stored; raise
    :class:`~medvlm_audit.errors.EndpointError` naming each dead or refusing URL (status and server message).

    Transient trouble (a timeout, 429, 5xx) is only warned about: the run's retries handle it."""
    checks = [c for m in models if callable(c := getattr(getattr(m, "inner", m), "check_endpoints", None))]
    if not checks:
        return

    async def ask() -> list[tuple[list[str], list[str]]]:
        return list(await asyncio.gather(*(c() for c in checks)))

    problems: list[str] = []
    for p, w in run_sync(ask()):
        problems += p
        for line in w:
            (warn or _stderr)(f"warning: {line}")
    if problems:
        raise EndpointError("model endpoint check failed, nothing was asked:\n  " + "\n  ".join(problems))


def identify_servers(models: Sequence[Model], warn: Callable[[str], Any] | None = None) -> None:
    """For HTTP models with ``server: auto``: identify each engine before the run (so its requests carry every
    field of the decoding contract where that engine reads it), and warn when one cannot be identified (only
    the fields every engine takes are then sent, and a decoding needing an extension is refused)."""
    pending = [m for m in {id(x): x for x in (getattr(m, "inner", m) for m in models)}.values()
               if callable(getattr(m, "identify_server", None)) and getattr(m, "server", None) == "auto"]
    if not pending:
        return

    async def ask() -> list[str]:
        return list(await asyncio.gather(*(m.identify_server() for m in pending)))

    for m, flavour in zip(pending, run_sync(ask())):
        if flavour == "unknown":
            (warn or _stderr)(
                f"warning: model {m.name!r}: server: auto could not identify the engine; only the OpenAI fields are "
                "sent, so top_k, min_p and repetition penalty are left to the server's defaults (set server: to "
                "pin them)")


def check_decodings(models: Sequence[Model], decodings: dict[str, Decoding], default: Decoding) -> None:
    """Refuse, before anything is written, a model whose backend cannot run its decoding (``check_decoding``)."""
    for m in models:
        check = getattr(m, "check_decoding", None) or getattr(getattr(m, "inner", None), "check_decoding", None)
        if callable(check):
            check(decodings.get(m.name, default))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def check_models(models: Sequence[Model]) -> None:
    """Fail fast, before any model call, on unique-name violations or e.g. a missing API-key variable."""
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be unique, got {names}")
    for m in models:
        check = getattr(getattr(m, "inner", m), "check_credentials", None)
        if callable(check):
            check()


_RESUME_HINT = "Fix the cause, then run the same command again to resume."


def _digest_keys(by_hex: dict[str, Any]) -> dict[bytes, Any]:
    """A table keyed by hex keys, keyed by their digests (as :class:`ModelWork` holds keys); a key that is not
    a hex digest (no plan has it) is left out.

    >>> _digest_keys({"0aff": 1, "zz": 2})
    {b'\\n\\xff': 1}
    """
    out = {}
    for k, v in by_hex.items():
        try:
            out[bytes.fromhex(k)] = v
        except ValueError:
            continue
    return out


def _stored_health(keys: set[Any], stored_errors: dict[Any, tuple[str, str]], asked_now: dict[str, Any]
                   ) -> dict[str, Any]:
    """A model's errors over the whole plan as the store holds them after this invocation (errors an earlier
    invocation stored count too; those re-asked with success do not), with this invocation's inputs not asked:
    ``{"inputs": distinct inputs of the plan, "errors": n, "error_kinds": {kind: {"n", "sample"}}}``. A rerun of a
    failing run is judged on these (:mod:`medvlm_audit.health`), not only on what it asked itself.

    >>> _stored_health({"a", "b", "c"}, {"a": ("empty", "empty answer"), "z": ("timeout", "t")}, {})
    {'inputs': 3, 'errors': 1, 'error_kinds': {'empty': {'n': 1, 'sample': 'empty answer'}}}
    """
    kinds: dict[str, dict[str, Any]] = {}
    found = (k for k in stored_errors if k in keys) if len(stored_errors) < len(keys) else \
        (k for k in keys if k in stored_errors)
    n = 0
    for k in found:
        kind, msg = stored_errors[k]
        d = kinds.setdefault(kind, {"n": 0, "sample": msg})
        d["n"] += 1
        n += 1
    for kind, d in (asked_now.get("error_kinds") or {}).items():
        if kind == NOT_ASKED:  # never sent, so not in the store
            kinds[kind] = dict(d)
    return {"inputs": len(keys), "errors": n, "error_kinds": kinds}


async def execute(store: RunStore, plan: Plan, models: Sequence[Model], decoding: Decoding | None = None,
                  **kw: Any) -> RunSummary:
    """See :func:`_execute`. A store that cannot be written stops the run with a :class:`StoreError` that
    names the cause and how to resume; everything committed until then is kept."""
    try:
        return await _execute(store, plan, models, decoding, **kw)
    except StoreError as e:
        if _RESUME_HINT in str(e):
            raise
        raise type(e)(f"{e}. The run stopped; every answer committed before is kept. {_RESUME_HINT}",
                      e.cause) from None


async def _execute(
    store: RunStore,
    plan: Plan,
    models: Sequence[Model],
    decoding: Decoding | None = None,
    *,
    retry_errors: bool = False,
    retry_missing_logprobs: bool = False,
    progress: bool = True,
    workers: int | None = None,
    pixel_cache_mb: int = 512,
    model_decoding: dict[str, Decoding] | None = None,
    source_keys: MutableMapping[ImageRecipe, str] | None = None,
    render_in: Literal["auto", "threads", "processes"] = "auto",
    store_totals: bool = True,
) -> RunSummary:
    """Check every source, then render and hash images in worker threads while the models (side by side)
    answer the inputs keyed so far; each answer is committed as it arrives.

    ``store_totals=False`` leaves the summary's ``store`` (the whole store's totals, a query over every trial)
    empty, for a caller that runs several stages and reads the totals once after the last.

    ``model_decoding`` overrides ``decoding`` for the named models; ``source_keys`` passes the result of
    :func:`check_sources` when the caller has already checked the sources (it is consumed: emptied as the
    image hashes are written). ``render_in``: "auto" renders in worker processes when no model needs pixels
    in this process (HTTP models take encoded bytes) and there are at least 64 images to render, else in
    threads."""
    t0 = time.perf_counter()
    decoding = decoding or Decoding()
    workers = workers or default_render_workers()
    check_models(models)
    index = TrialIndex(plan.trials)
    keys = source_keys if source_keys is not None else check_sources(index, store.image_hashes())  # before writing
    for src in plan.sources:
        store.add_probe_set(src.name, src.path, src.content_hash, src.rows, src.provenance, also=src.earlier_hashes)
    store.add_skipped([(s.probe_set, s.case_id, s.condition, s.reason) for s in plan.skipped])
    cache = SourceCache(256)
    pixels = PixelCache(pixel_cache_mb * 2**20)
    # --retry-errors also re-asks answers that lack requested log-probabilities, for models that return them
    lp = "retry" if retry_missing_logprobs else "retry-partial" if retry_errors else "keep"
    answered = store.answered_keys(include_errors=not retry_errors, missing_logprobs=lp)
    per_dec = model_decoding or {}
    works = []
    # keys (digests) queued by any model: a byte-identical request is asked once per run
    claimed: set[bytes] | None = set() if len(models) > 1 else None
    for m in models:
        record_model(store, m)
        works.append(ModelWork(m, per_dec.get(m.name, decoding), answered, claimed))
    queues: list[asyncio.Queue] = [asyncio.Queue() for _ in works]
    encoders, encoder_of = _distinct_encoders(models)
    # pixels are needed in this process only by image models that take no encoded bytes (local models)
    want_pixels = any(m.modality != "text_only" and e is None for m, e in zip(models, encoder_of))
    known = store.image_hashes()
    hashes = {r: known[ck] for r, ck in keys.items() if ck in known} if known else {}
    todo = [r for r in keys if r not in hashes]
    for r in hashes:  # stored already; the others' keys are dropped once written (``source_keys`` is consumed)
        del keys[r]
    timing: dict[str, float] = {}

    with _progress(progress, works) as bar:

        # the plan's rows go through the commit's writer thread (made below, beside the models' workers)
        planned = _PlanRows(lambda rows: commit.add_plan(rows))

        # rendering pauses while a model has this many image inputs queued: a few batches per worker
        caps = [max(64, 4 * max(1, m.max_concurrency) * max(1, m.batch_size)) for m in models]
        feed = _Feed(queues, encoder_of, caps, pixels if want_pixels else None)
        feed.encoded.need.update(index.multi)

        def admit(trial_ids: list[int]) -> None:
            if not trial_ids:
                return
            trials = [plan.trials[i] for i in trial_ids]
            for qi, w in enumerate(works):
                rows, requests, new = w.admit(trials, hashes)
                planned.add(trials=rows, requests=requests)
                for item in new:
                    feed.offer(qi, item)
                if new:
                    timing.setdefault("first_input_s", time.perf_counter() - t0)
                    bar.grow(w.model.name, len(new))
            if feed.encoded.need:
                feed.encoded.admitted(trials, len(encoders))

        async def produce() -> None:
            """Key the trials each batch of rendered images completes and queue their inputs."""
            try:
                admit(index.ready_without_images() + index.resolve(hashes))  # hashes known from an earlier run
                # images already hashed but needed by inputs still to ask are rendered too, before those are asked
                again = {r for r in feed.parked if r not in keys}
                render = todo + list(again)
                # not rendered yet: a new image while its cache key is in ``keys`` (popped when its hash is
                # written), an image rendered again while in ``again`` (no set of every recipe is built)
                feed.unrendered = _Either(keys, again)
                processes = render_in == "processes" or (render_in == "auto" and not want_pixels and len(render) >= 64)
                stream_ = _render_stream(render, workers, cache, pixels, encoders, processes, want_pixels, feed.room)
                async with aclosing(stream_) as stream:
                    async for rendered in stream:
                        for r, h, encoded in rendered:
                            if isinstance(h, Exception):
                                raise index.named(r, h) from None
                            if r not in keys and h != hashes[r]:
                                raise index.named(r, ImageError(f"image file {r.source} changed since it was hashed"))
                            hashes[r] = h
                            feed.encoded.put(r, encoded)
                        # a recipe's cache key is written with its hash, then dropped (keys of a large plan
                        # are ~200 bytes each; the memory they free takes the hashes that follow)
                        new = [r for r, _, _ in rendered if r in keys]
                        planned.add(image_hashes=[(keys.pop(r), hashes[r]) for r in new])
                        again.difference_update(r for r, _, _ in rendered)
                        feed.rendered(r for r, _, _ in rendered)
                        admit(index.resolve(new))
                        # every trial on a new image is keyed now: its hash is dropped unless a multi-image
                        # trial still waits for its other images (the hash table stays as small as the backlog)
                        need = feed.encoded.need
                        for r in new:
                            if r not in need:
                                del hashes[r]
                        del new
                        # an image whose inputs were all deduplicated or answered is not kept
                        feed.encoded.unwanted((r for r, _, _ in rendered), len(encoders))
                        feed.unwanted_pixels(r for r, _, _ in rendered)
                        del rendered
                timing["plan_s"] = time.perf_counter() - t0
            finally:
                planned.flush()
                for q in queues:
                    q.put_nowait(_DONE)

        commit = _GroupCommit(store)
        tasks = [asyncio.ensure_future(_ask(commit, w, q, cache, pixels, bar.advance, feed, i))
                 for i, (w, q) in enumerate(zip(works, queues))]

        async def body() -> list[dict[str, int]]:
            # side by side: the producer waits for room in the queues, which only the models' workers make
            _, *out = await asyncio.gather(produce(), *tasks)
            return out

        main = asyncio.ensure_future(body())
        try:
            # a failed commit stops the run at once: nothing more is asked while answers cannot be saved
            await asyncio.wait([main, commit.failed], return_when=asyncio.FIRST_COMPLETED)
            if commit.error is not None:
                raise commit.stopped_error()
            results = main.result()
        except BaseException as e:
            for t in (main, *tasks):
                t.cancel()
            await asyncio.gather(main, *tasks, return_exceptions=True)
            commit.close()  # answers that arrived before the error are kept
            if commit.error is not None and not isinstance(e, StoreError):
                raise commit.stopped_error() from e  # answers lost outrank the error that stopped the run
            raise
        finally:
            for m in models:
                await m.aclose()
        commit.close()
        if commit.error is not None:  # the last answers could not be saved
            raise commit.stopped_error()
    per_model: dict[str, dict[str, Any]] = {}
    stored_errors = _digest_keys(store.stored_errors())
    for w, r in zip(works, results):
        per_model[w.model.name] = {"trials": w.n_trials, "distinct_inputs": w.n_keys, "pending": w.n_pending, **r,
                                   "stored": _stored_health(w.keys, stored_errors, r)}
    skipped = Counter(f"{sk.condition}: {sk.reason}" for sk in plan.skipped)
    return RunSummary(len(plan.trials), len(plan.skipped), per_model, time.perf_counter() - t0,
                      timing.get("plan_s", 0.0), timing.get("first_input_s"),
                      store=store.model_totals() if store_totals else {},
                      skipped=dict(sorted(skipped.items())))


def skipped_lines(summary: dict[str, Any]) -> list[str]:
    """What the skipped conditions were: conditions that do not apply to their case (the suite names why, e.g.
    a grounding mask on a case without a box), counted by condition and reason. The head line is the same for
    every suite; the examples are the suite's own reasons, listed below it.

    >>> skipped_lines({"n_skipped": 2, "skipped_by": {"swap: no partner": 2}})
    ['2 skipped conditions: conditions that do not apply to their case, asked of no model', '  swap: no partner: 2']
    """
    by = summary.get("skipped_by") or {}
    if not summary.get("n_skipped"):
        return []
    head = f"{summary['n_skipped']:,} skipped conditions: conditions that do not apply to their case, asked of no model"
    return [head, *(f"  {k}: {v:,}" for k, v in by.items())]


def summary_table(summary: dict[str, Any]) -> Any:
    """The end-of-run table: per model, this invocation (asked now, errors, answers without the requested
    log-probabilities) and the store's totals over every invocation (answers, errors by kind, not asked yet,
    confidence coverage), so a resume that asked nothing still shows what is missing."""
    from rich.table import Table

    t = Table(title=f"{summary['n_trials']:,} trials, {summary['n_skipped']:,} skipped conditions")
    for col in ("model", "trials", "distinct inputs", "asked now", "errors now", "no logprobs now",
                "answers (store)", "errors (store)", "not asked (store)", "confidence coverage (store)"):
        t.add_column(col)
    totals = summary.get("store") or {}
    for name, m in summary["per_model"].items():
        s = totals.get(name, {})
        errs = s.get("errors") or {}
        cov = s.get("confidence_coverage")
        t.add_row(
            name, str(m["trials"]), str(m["distinct_inputs"]), str(m.get("asked", 0)), str(m.get("errors", 0)),
            str(m.get("missing_logprobs", 0)), str(s.get("answered", "")),
            ", ".join(f"{k} {v}" for k, v in errs.items()) + (f" (total {sum(errs.values())})" if errs else "0"),
            str(s.get("not_asked", "")),
            # nothing to say (no request wanted them, or the model never returns them): n/a, not "0.0%"
            "n/a" if cov is None else "n/a (none returned)" if cov == 0
            else f"{100 * cov:.1f}% ({s.get('logprobs_missing', 0)} missing)",
        )
    return t


class _progress:
    """A rich progress bar per model (answers, rate and ETA; totals grow as inputs are keyed), or a no-op."""

    def __init__(self, enabled: bool, works: Sequence[ModelWork]) -> None:
        self.enabled = enabled
        self.names = [w.model.name for w in works]
        self.tasks: dict[str, Any] = {}
        self.done: dict[str, int] = defaultdict(int)
        self.total: dict[str, int] = defaultdict(int)
        self.bar: Any = None
        self.start = time.perf_counter()

    #: without a terminal: one plain line per model at most every this many seconds (and at the end)
    PLAIN_EVERY_S = 5.0

    def __enter__(self) -> Self:
        if not self.enabled:
            return self
        self.plain = not sys.stderr.isatty()
        self.last_line: dict[str, float] = {}
        if self.plain:  # a log file or a pipe: readable lines, never a redrawn bar with truncated counts
            self.bar = "plain"
            self.start = time.perf_counter()
            return self
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
        return self

    def _line(self, name: str, final: bool = False) -> None:
        now = time.perf_counter()
        if not final and now - self.last_line.get(name, 0.0) < self.PLAIN_EVERY_S:
            return
        self.last_line[name] = now
        done, total = self.done[name], self.total[name]
        pct = f" ({100 * done / total:.0f}%)" if total else ""
        rate = done / max(now - self.start, 1e-9)
        print(f"{name}: {done:,} of {total:,} answers{pct}, {rate:,.0f} answers/s, {now - self.start:.0f} s",
              file=sys.stderr, flush=True)

    def grow(self, name: str, n: int) -> None:
        """n more inputs to ask for this model (keying runs while earlier inputs are being answered)."""
        if self.bar is None:
            return
        if self.bar == "plain":
            self.total[name] += n
            return
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=0, rate="")
        self.total[name] += n
        self.bar.update(self.tasks[name], total=self.total[name])

    def advance(self, name: str, n: int) -> None:
        if self.bar is None:
            return
        self.done[name] += n
        if self.bar == "plain":
            self._line(name, final=self.done[name] >= self.total[name])
            return
        el = max(time.perf_counter() - self.start, 1e-9)
        self.bar.update(self.tasks[name], advance=n, rate=f"{self.done[name] / el:,.0f} answers/s")

    def __exit__(self, *exc: object) -> None:
        if self.bar == "plain":
            for name in self.total:
                if self.done[name] < self.total[name]:
                    self._line(name, final=True)
        elif self.bar is not None:
            self.bar.__exit__(*exc)
