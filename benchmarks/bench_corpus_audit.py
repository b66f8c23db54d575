"""corpus-audit speed: 20,000 reference + 20,000 predicted reports of IU length, 1,000 bootstrap + 1,000
permutation resamples (target <= 10 s on 2 cores).

Reports are made of real IU X-ray sentences (from the installed torchxrayvision package; a synthetic Zipf
vocabulary when it is absent), 2-7 sentences each, so lengths and vocabulary match IU reports; every predicted
report is distinct (the worst case: collapsed corpora are merged to their few distinct rows). Times the whole
``corpus_audit`` (tokenising, CAD, WAE resampling, diversity incl. self-BLEU on 1,000 sampled reports, surface
metrics over 20,000 id pairs, files) without semantic diversity, then the semantic diversity alone.

    .venv/bin/python benchmarks/bench_corpus_audit.py [--n 20000] [--B 1000] [--perm 1000] [--workers 2]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time

import numpy as np

from medvlm_audit.suites.reports.audit import _semantic, corpus_audit
from medvlm_audit.suites.reports.corpus import Corpus, CorpusError, iu_reference_corpus
from medvlm_audit.suites.reports.terms import report_count_matrices
from medvlm_audit.suites.reports.wae import corpus_resample_wae


def sentences() -> list[str]:
    try:
        ref = iu_reference_corpus()
        out = sorted({s.strip() + "." for t in ref.texts for s in re.split(r"\.\s", t) if len(s.split()) >= 3})
        return out
    except CorpusError:
        rng = np.random.default_rng(0)
        words = ["".join(rng.choice(list("abcdefghij"), 6)) for _ in range(1500)]
        return [" ".join(rng.choice(words, 8)) + "." for _ in range(3000)]


def make(n: int, pool: list[str], seed: int, prefix: str) -> Corpus:
    rng = np.random.default_rng(seed)
    k = rng.integers(2, 8, n)
    idx = rng.integers(0, len(pool), k.sum())
    ends = np.cumsum(k)
    texts = tuple(" ".join(pool[j] for j in idx[e - m:e]) for e, m in zip(ends, k))
    groups = tuple(np.where(rng.random(n) < 0.55, "F", "M"))
    return Corpus(tuple(f"{prefix}{i}" for i in range(n)), texts, groups, prefix)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--B", type=int, default=1000)
    ap.add_argument("--perm", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bertscore-pairs", type=int, default=1000, help="pairs scored by BERTScore (0: skip)")
    a = ap.parse_args()
    pool = sentences()
    ref = make(a.n, pool, 1, "r")
    pred = Corpus(ref.ids, make(a.n, pool, 2, "p").texts, ref.groups, "p")
    words = np.mean([len(t.split()) for t in ref.texts])
    print(f"{a.n} + {a.n} reports, {words:.1f} words per report, {len(pool)} distinct sentences")
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        (A, Bm), vocab = report_count_matrices(ref.texts, pred.texts)
        t1 = time.perf_counter()
        corpus_resample_wae(A, ref.female, Bm, pred.female, B=a.B, n_perm=a.perm, workers=a.workers)
        t2 = time.perf_counter()
        res = corpus_audit(ref, pred, d, B=a.B, n_perm=a.perm, semantic=False, bertscore=False, workers=a.workers)
        t3 = time.perf_counter()
    print(f"count matrices {t1 - t0:.2f} s ({len(vocab)} words, {A.nnz + Bm.nnz} non-zeros); "
          f"WAE bootstrap + permutation {t2 - t1:.2f} s")
    print(f"corpus_audit end to end (no semantic diversity): {t3 - t2:.2f} s  (target <= 10 s)")
    t4 = time.perf_counter()
    sem, note = _semantic(pred.texts, 500, 0)
    print(f"semantic diversity ({note}): {time.perf_counter() - t4:.2f} s, value {sem:.3f}")
    print("categories ungated", res.summary["categories_ungated"])
    if not a.bertscore_pairs:
        return
    from medvlm_audit.suites.reports.bertscore import bertscore

    t5 = time.perf_counter()
    bertscore(pred.texts[:a.bertscore_pairs], ref.texts[:a.bertscore_pairs])
    print(f"BERTScore on {a.bertscore_pairs} pairs (MiniLM, incl. loading): {time.perf_counter() - t5:.2f} s")


if __name__ == "__main__":
    main()
