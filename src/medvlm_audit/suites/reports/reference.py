"""The reference report generator of the embedded default: a small language model fitted at run time on real
report text (the IU X-ray reports inside the installed ``torchxrayvision`` package, never copied into the project)
and conditioned on what it reads from the pixels.

Two parts, both fitted when the model is built, both seeing nothing but what a ModelInput holds:

* :class:`PixelReader`: one L2 logistic regression per phantom finding on the cell means and standard deviations
  of a 64 x 64 area-averaged grid (16 x 16 cells), trained on phantom studies rendered for it
  (:func:`medvlm_audit.phantom.render_study`; a fixed seed, its own training draw, never the run's images).
  At run time it reads the image's pixels only: its most probable finding (when its probability reaches 0.5;
  otherwise ``normal``) is the generator's condition, so the model writes about one finding, as small report
  generators tend to.
* :class:`ReportLM`: an interpolated Witten-Bell n-gram model (order 4) over report tokens (lowercase words and
  ``.``/``,``; ``</s>`` ends a report). The global model is fitted on every IU report; a class model per finding
  (and ``normal``: reports that assert no finding) is fitted on the reports that assert that finding (a
  sentence naming it without a negation cue) and backs off to the global model's prediction for the same
  context. The next-token distribution for a set of findings is the mean of their class models (the reader
  passes one).

Decoding acts on that next-token distribution only, as ``Decoding``'s fields say (a strategy's name never reaches
the model): temperature 0 and one beam = argmax at every step (greedy); temperature 0 and ``num_beams`` B = beam
search of width B with length-normalised scores (length penalty 1, as ``transformers``); temperature T > 0 =
p^(1/T) renormalised, then top-k (the k most probable tokens), then top-p (the smallest set whose probability
reaches p, as ``transformers``' nucleus filter), then one draw from a generator seeded by the decoding seed, the
sample index and the image's pixel hash. So the deterministic strategies give one report per finding set (the
distribution's mode: template collapse), and sampling spreads over the IU vocabulary because it samples.

The phantom's case metadata holds the patient's sex; the generator never sees it (pixels and prompt only). Sex
can reach its reports only through the pixels (the phantom draws breast shadows over female bases, and males
carry more cardiomegaly), as it could for a real model.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from PIL import Image

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding, LocalModel, Modality, ModelInput, Response

REFERENCE_VERSION = "2"  # 2: conditioned on the most probable finding only
BOS, EOS = "<s>", "</s>"
NORMAL = "normal"
_TOKEN = re.compile(r"[a-z0-9]+(?:['\-/][a-z0-9]+)*|[.,]")

#: what asserts a phantom finding in a report sentence (IU wording)
FINDING_TERMS: dict[str, str] = {
    "cardiomegaly": r"cardiomegaly|enlarged (?:heart|cardiac)|(?:heart|cardiac silhouette|cardiac|heart size)\b[^.]*"
                    r"\b(?:enlarged|enlargement)",
    "pleural_effusion": r"effusion",
    "pneumothorax": r"pneumothora",
    "consolidation": r"consolidation|airspace (?:disease|opacit)",
    "pneumonia": r"pneumonia",
    "edema": r"edema",
    "atelectasis": r"atelecta",
    "lung_opacity": r"opacit",
    "nodule": r"nodul|\bmass\b",
}
_NEGATION = re.compile(r"\b(?:no|not|without|negative|resolved|free of|clear of|removed|normal)\b")
_SENTENCE = re.compile(r"[^.]+")


# ------------------------------------------------------------------------------------------------ text


def tokenize(text: str) -> list[str]:
    """Lowercase words (inner hyphens, apostrophes, slashes kept), numbers and ``.``/``,``."""
    return _TOKEN.findall(text.lower())


def detokenize(tokens: Iterable[str]) -> str:
    """Tokens back to report text: no space before punctuation, each sentence capitalised."""
    out: list[str] = []
    cap = True
    for t in tokens:
        if t in (".", ","):
            if out:
                out[-1] += t
            cap = t == "."
            continue
        out.append(t[:1].upper() + t[1:] if cap else t)
        cap = False
    return " ".join(out)


def asserted_findings(text: str) -> set[str]:
    """Phantom findings a report asserts: a sentence names the finding and holds no negation cue before it."""
    found: set[str] = set()
    for sent in _SENTENCE.findall(text.lower()):
        for f, pat in FINDING_TERMS.items():
            m = re.search(pat, sent)
            if m and not _NEGATION.search(sent[: m.start()]):
                found.add(f)
    return found


# ------------------------------------------------------------------------------------------------ the language model


class _Table:
    """Counts of the next token after each context of one length: context -> (token ids, counts, total, types)."""

    __slots__ = ("rows",)

    def __init__(self, counts: dict[tuple[int, ...], Counter[int]]) -> None:
        self.rows: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, float, float]] = {}
        for ctx, c in counts.items():
            ids = np.fromiter(c.keys(), dtype=np.int64, count=len(c))
            cnt = np.fromiter(c.values(), dtype=np.float64, count=len(c))
            self.rows[ctx] = (ids, cnt, float(cnt.sum()), float(len(c)))

    def step(self, p: np.ndarray, ctx: tuple[int, ...]) -> np.ndarray:
        """Witten-Bell interpolation: (c(ctx, w) + T(ctx) p(w)) / (N(ctx) + T(ctx)); unseen context: p."""
        row = self.rows.get(ctx)
        if row is None:
            return p
        ids, cnt, n, t = row
        q = p * t
        q[ids] += cnt
        q /= n + t
        return q


def _count(seqs: Iterable[list[int]], order: int, lengths: Iterable[int]) -> list[_Table]:
    tables = []
    lens = list(lengths)
    counts: dict[int, dict[tuple[int, ...], Counter[int]]] = {k: {} for k in lens}
    pad = [0] * (order - 1)  # id 0 is BOS
    for s in seqs:
        full = pad + s
        for i in range(order - 1, len(full)):
            for k in lens:
                ctx = tuple(full[i - k:i]) if k else ()
                counts[k].setdefault(ctx, Counter())[full[i]] += 1
    for k in lens:
        tables.append(_Table(counts[k]))
    return tables


class ReportLM:
    """A class-conditional interpolated n-gram model of report text (see the module docstring).

    ``fit(texts)`` learns the vocabulary, the global tables (context lengths 0 .. order-1) and one set of
    class tables (context lengths 1 .. order-1) per class found by :func:`asserted_findings`.
    """

    def __init__(self, order: int = 4, min_class_reports: int = 5, no_repeat_ngram: int = 4) -> None:
        if order < 2:
            raise ConfigError(f"the report LM needs order >= 2, got {order}")
        self.order = order
        self.min_class_reports = min_class_reports
        self.no_repeat_ngram = no_repeat_ngram

    def fit(self, texts: Sequence[str]) -> ReportLM:
        toks = [tokenize(t) for t in texts]
        keep = [i for i, t in enumerate(toks) if t]
        if not keep:
            raise ConfigError("the report LM got no report text to fit on")
        vocab = [BOS, EOS, *sorted({w for i in keep for w in toks[i]})]
        self.vocab_ = vocab
        self.index_ = {w: i for i, w in enumerate(vocab)}
        seqs = [[self.index_[w] for w in toks[i]] + [1] for i in keep]
        self.n_reports_ = len(seqs)
        self.global_ = _count(seqs, self.order, range(self.order))
        classes: dict[str, list[int]] = {}
        for j, i in enumerate(keep):
            fs = asserted_findings(texts[i]) or {NORMAL}
            for f in fs:
                classes.setdefault(f, []).append(j)
        self.class_sizes_ = {c: len(v) for c, v in sorted(classes.items())}
        self.classes_ = {c: _count([seqs[j] for j in v], self.order, range(1, self.order))
                         for c, v in classes.items() if len(v) >= self.min_class_reports}
        base = np.ones(len(vocab))
        base[0] = 0.0  # BOS is never predicted
        self.base_ = base / base.sum()
        self.digest_ = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
        return self

    def next_distribution(self, history: Sequence[int], classes: Sequence[str]) -> np.ndarray:
        """P(next token | the last order-1 tokens of ``history``, the finding classes) over the vocabulary."""
        h = [0] * (self.order - 1) + list(history)
        ctxs = [tuple(h[len(h) - k:]) if k else () for k in range(self.order)]
        p = self.base_.copy()
        for k, tab in enumerate(self.global_):
            p = tab.step(p, ctxs[k])
        used = [c for c in classes if c in self.classes_]
        if not used:
            return p
        mix = np.zeros_like(p)
        for c in used:
            q = p.copy()
            for k, tab in enumerate(self.classes_[c], start=1):
                q = tab.step(q, ctxs[k])
            mix += q
        return mix / len(used)

    def step_distribution(self, history: Sequence[int], classes: Sequence[str]) -> np.ndarray:
        """:meth:`next_distribution` with every token that would repeat an n-gram of ``history`` removed
        (n = ``no_repeat_ngram``; ``transformers``' ``no_repeat_ngram_size``), renormalised. Every decoding
        uses it, so an order-4 model cannot loop on a sentence (the end token is never removed)."""
        p = self.next_distribution(history, classes)
        n = self.no_repeat_ngram
        if n and len(history) >= n:
            prefix = tuple(history[len(history) - n + 1:])
            banned = {history[i + n - 1] for i in range(len(history) - n + 1)
                      if tuple(history[i:i + n - 1]) == prefix}
            banned.discard(1)
            if banned:
                p = p.copy()
                p[list(banned)] = 0.0
                p /= p.sum()
        return p

    # -- decoding: operations on step_distribution ------------------------------------------------------
    def greedy(self, classes: Sequence[str], max_tokens: int) -> list[int]:
        out: list[int] = []
        while len(out) < max_tokens:
            w = int(np.argmax(self.step_distribution(out, classes)))
            if w == 1:
                break
            out.append(w)
        return out

    def beam(self, classes: Sequence[str], max_tokens: int, width: int, length_penalty: float = 1.0) -> list[int]:
        """Beam search: keep the ``width`` best partial reports by summed log-probability; a report that ends is
        scored by its log-probability / length^length_penalty; stop once ``width`` reports ended (or at
        ``max_tokens``) and return the best-scored one."""
        beams: list[tuple[float, list[int]]] = [(0.0, [])]
        done: list[tuple[float, list[int]]] = []
        for _ in range(max_tokens):
            cand: list[tuple[float, list[int], int]] = []
            for lp, seq in beams:
                logp = np.log(np.maximum(self.step_distribution(seq, classes), 1e-300))
                top = np.argpartition(-logp, 2 * width)[: 2 * width]
                cand.extend((lp + float(logp[w]), seq, int(w)) for w in top)
            cand.sort(key=lambda c: (-c[0], c[1] + [c[2]]))
            beams = []
            for lp, seq, w in cand:
                if w == 1:
                    done.append((lp / max(1, len(seq) + 1) ** length_penalty, seq))
                else:
                    beams.append((lp, seq + [w]))
                if len(beams) == width:
                    break
            if len(done) >= width or not beams:
                break
        if not done:  # nothing ended within max_tokens: the best open beam, cut
            done = [(lp / max(1, len(seq)) ** length_penalty, seq) for lp, seq in beams]
        return max(done, key=lambda d: d[0])[1]

    def sample(self, classes: Sequence[str], max_tokens: int, temperature: float, top_k: int | None,
               top_p: float, rng: np.random.Generator) -> list[int]:
        out: list[int] = []
        while len(out) < max_tokens:
            p = filter_distribution(self.step_distribution(out, classes), temperature, top_k, top_p)
            w = int(rng.choice(len(p), p=p))
            if w == 1:
                break
            out.append(w)
        return out

    def words(self, ids: Sequence[int]) -> list[str]:
        return [self.vocab_[i] for i in ids]


def filter_distribution(p: np.ndarray, temperature: float, top_k: int | None, top_p: float) -> np.ndarray:
    """Temperature, then top-k, then top-p (nucleus: the most probable tokens until their mass reaches
    ``top_p``; the token that crosses it is kept), renormalised; as ``transformers``' logits warpers.

    >>> filter_distribution(np.array([0.5, 0.3, 0.2]), 1.0, None, 0.7).round(3).tolist()
    [0.625, 0.375, 0.0]
    """
    logp = np.log(np.maximum(p, 1e-300)) / temperature
    q = np.exp(logp - logp.max())
    q[p <= 0] = 0.0
    if top_k is not None and 0 < top_k < np.count_nonzero(q):
        kth = np.partition(q, -top_k)[-top_k]
        order = np.argsort(-q, kind="stable")
        keep = np.zeros(q.shape, dtype=bool)
        keep[order[:top_k]] = True
        q = np.where(keep & (q >= kth), q, 0.0)
    q /= q.sum()
    if top_p < 1.0:
        order = np.argsort(-q, kind="stable")
        cum = np.cumsum(q[order])
        cut = int(np.searchsorted(cum, top_p, side="left")) + 1  # include the token that reaches top_p
        mask = np.zeros(q.shape, dtype=bool)
        mask[order[:cut]] = True
        q = np.where(mask, q, 0.0)
        q /= q.sum()
    return q


# ------------------------------------------------------------------------------------------------ the pixel reader

GRID = 64
CELL = 4


def image_features(pixels: np.ndarray) -> np.ndarray:
    """Cell means and standard deviations (16 x 16 cells of a 64 x 64 area-averaged grid, grey in [0, 1]) after
    a per-image z-score (exposure differs between films): 512 numbers, any input size, gray or RGB."""
    px = np.asarray(pixels)
    if px.ndim == 3:
        px = px[..., :3].mean(axis=2) if px.shape[2] > 1 else px[..., 0]
    if px.ndim != 2 or px.size == 0:
        raise ValueError(f"expected a grayscale or RGB image, got shape {np.asarray(pixels).shape}")
    g = np.asarray(Image.fromarray(np.ascontiguousarray(px, dtype=np.uint8)).resize((GRID, GRID), Image.Resampling.BOX),
                   dtype=np.float64) / 255.0
    g = (g - g.mean()) / (g.std() + 1e-6)
    k = GRID // CELL
    cells = g.reshape(k, CELL, k, CELL).transpose(0, 2, 1, 3).reshape(k * k, CELL * CELL)
    return np.concatenate([cells.mean(axis=1), cells.std(axis=1)])


class PixelReader:
    """Per-finding logistic regressions on :func:`image_features`, fitted on ``n_train`` phantom studies rendered
    for the reader (seeded, ``size`` px, the cohort's correlated findings). ``read`` returns the findings whose
    probability reaches 0.5."""

    def __init__(self, n_train: int = 600, size: int = 256, seed: int = 7, C: float = 0.05) -> None:
        self.n_train, self.size, self.seed, self.C = n_train, size, seed, C

    def fit(self) -> PixelReader:
        from sklearn.linear_model import LogisticRegression

        from medvlm_audit.phantom import PHANTOM_FINDINGS, render_study
        from medvlm_audit.phantom.cohort import sample_findings

        rng = np.random.default_rng([self.seed, 2002])
        X, Y = [], []
        for _ in range(self.n_train):
            sex = "M" if rng.random() < 0.5 else "F"
            age = float(np.clip(rng.normal(62, 16), 19, 95))
            view = "AP" if rng.random() < 0.3 else "PA"
            f = sample_findings(rng, age=age, sex=sex, view=view, acuity=float(rng.normal(0, 1)))
            px, _ = render_study(f, sex=sex, age=age, view=view, seed=int(rng.integers(1, 2**31 - 1)), size=self.size)
            X.append(image_features(px))
            Y.append([int(f[k]) for k in PHANTOM_FINDINGS])
        Xa, Ya = np.asarray(X), np.asarray(Y)
        self.mu_, self.sd_ = Xa.mean(axis=0), Xa.std(axis=0) + 1e-6
        Z = (Xa - self.mu_) / self.sd_
        self.heads_: dict[str, tuple[np.ndarray, float]] = {}
        for j, f in enumerate(PHANTOM_FINDINGS):
            y = Ya[:, j]
            if y.min() == y.max():
                continue
            lr = LogisticRegression(C=self.C, max_iter=1000).fit(Z, y)
            self.heads_[f] = (lr.coef_[0].astype(np.float64), float(lr.intercept_[0]))
        return self

    def probabilities(self, pixels: np.ndarray) -> dict[str, float]:
        z = (image_features(pixels) - self.mu_) / self.sd_
        return {f: 1.0 / (1.0 + math.exp(-(float(np.dot(z, w)) + b))) for f, (w, b) in self.heads_.items()}

    def read(self, pixels: np.ndarray) -> list[str]:
        """The most probable finding when its probability reaches 0.5, else nothing (a normal study)."""
        probs = self.probabilities(pixels)
        best = max(probs, key=lambda f: (probs[f], f)) if probs else None
        return [best] if best is not None and probs[best] >= 0.5 else []


# ------------------------------------------------------------------------------------------------ the model

_FITTED: dict[tuple[Any, ...], Any] = {}
_FIT_LOCK = threading.Lock()


def _fitted(key: tuple[Any, ...], build: Any) -> Any:
    with _FIT_LOCK:
        if key not in _FITTED:
            _FITTED[key] = build()
        return _FITTED[key]


def training_texts(corpus: str = "iu") -> tuple[list[str], str]:
    """The report texts the LM is fitted on and where they came from: ``iu`` = every IU X-ray report with text
    (findings + impression) read from the installed torchxrayvision package; else a JSONL corpus path."""
    if corpus == "iu":
        from medvlm_audit.suites.reports.corpus import (
            findings_impression,
            iu_records,
            torchxrayvision_iu_reports,
        )

        src = torchxrayvision_iu_reports()
        texts = [findings_impression(r["findings"], r["impression"]) for r in iu_records(src)]
        return [t for t in texts if t], f"IU X-ray reports ({src})"
    from medvlm_audit.suites.reports.corpus import read_corpus

    return list(read_corpus(corpus).texts), corpus


class ReportGenerator(LocalModel):
    """Writes a report per image: reads findings from the pixels (:class:`PixelReader`), then decodes the
    class-conditional :class:`ReportLM` as the input's ``Decoding`` says. Without an image it decodes the
    global (unconditioned) model."""

    modality: Modality = "multimodal"
    batch_size = 32
    max_concurrency = 1

    def __init__(self, name: str, lm: ReportLM, reader: PixelReader, corpus_source: str) -> None:
        self.name = name
        self.lm = lm
        self.reader = reader
        self.corpus_source = corpus_source

    def identity(self) -> dict[str, Any]:
        r = self.reader
        return {"backend": "report_reference", "version": REFERENCE_VERSION, "corpus": self.lm.digest_,
                "order": self.lm.order, "no_repeat_ngram": self.lm.no_repeat_ngram,
                "reader": {"n_train": r.n_train, "size": r.size, "seed": r.seed, "C": r.C}}

    def check_decoding(self, d: Decoding) -> None:
        """Every greedy, beam, temperature, top-k and top-p setting is an operation on the LM's distribution;
        beam sampling (beams with temperature > 0) is not one the audit defines."""
        if d.num_beams < 1 or d.temperature < 0 or not 0 < d.top_p <= 1 or (d.top_k is not None and d.top_k < 0):
            raise ConfigError(f"model {self.name!r}: invalid decoding {d.as_dict()}")
        if d.temperature > 0 and d.num_beams > 1:
            raise ConfigError(f"model {self.name!r}: beam sampling (num_beams > 1 with temperature > 0) is not "
                              "implemented by the reference generator")
        if d.max_new_tokens < 1:
            raise ConfigError(f"model {self.name!r}: max_new_tokens must be >= 1, got {d.max_new_tokens}")

    def findings(self, inp: ModelInput) -> list[str]:
        if not inp.images:
            return []
        return self.reader.read(inp.images[0].pixels) or [NORMAL]

    def generate_one(self, inp: ModelInput) -> tuple[list[str], str]:
        d = inp.decoding
        self.check_decoding(d)
        classes = self.findings(inp)
        n = d.max_new_tokens
        if d.temperature <= 0:
            ids = self.lm.greedy(classes, n) if d.num_beams <= 1 else self.lm.beam(classes, n, d.num_beams)
        else:
            tag = inp.images[0].sha256 if inp.images else hashlib.sha256(inp.prompt.encode()).hexdigest()
            rng = np.random.default_rng([int(d.seed or 0) & 0xFFFFFFFF, int(inp.sample_index), int(tag[:15], 16)])
            ids = self.lm.sample(classes, n, d.temperature, d.top_k, d.top_p, rng)
        return self.lm.words(ids), ("length" if len(ids) >= n else "stop")

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        out = []
        for inp in inputs:
            t0 = time.perf_counter()
            words, finish = self.generate_one(inp)
            out.append(Response(text=detokenize(words), finish_reason=finish, prompt_tokens=len(inp.prompt.split()),
                                completion_tokens=len(words), latency_s=time.perf_counter() - t0))
        return out


def factory(name: str, params: dict[str, Any], context: dict[str, Any]) -> ReportGenerator:
    """Backend ``report_reference``: params ``corpus`` (``iu`` or a JSONL path; default ``iu``), ``order`` (4),
    ``no_repeat_ngram`` (4), ``reader_train`` (600 phantom studies), ``reader_seed`` (7). Fitted models are shared
    within the process (same parameters, same fit)."""
    allowed = {"corpus", "order", "no_repeat_ngram", "reader_train", "reader_seed"}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ConfigError(f"model {name!r} (backend report_reference): unknown parameter(s) {unknown}; "
                          f"known: {sorted(allowed)}")
    corpus = str(params.get("corpus", "iu"))
    order, nrep = int(params.get("order", 4)), int(params.get("no_repeat_ngram", 4))
    n_train, rseed = int(params.get("reader_train", 600)), int(params.get("reader_seed", 7))

    def fit_lm() -> tuple[ReportLM, str]:
        texts, source = training_texts(corpus)
        return ReportLM(order=order, no_repeat_ngram=nrep).fit(texts), source

    lm, source = _fitted(("lm", corpus, order, nrep), fit_lm)
    reader = _fitted(("reader", n_train, rseed), lambda: PixelReader(n_train=n_train, seed=rseed).fit())
    return ReportGenerator(name, lm, reader, source)
