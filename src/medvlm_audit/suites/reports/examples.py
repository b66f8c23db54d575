"""Two prediction sets built from a reference corpus, for a documented look at CAD on real text without a model:

* ``collapsed``: every report replaced by the corpus' most frequent report (what greedy decoding converges to
  when a model falls back on its "normal" template);
* ``sampled``: every report replaced by a report drawn at random (seeded, with replacement) from the whole corpus,
  blind to the patient's sex (what sex-blind sampling from the report distribution gives).

    python -m medvlm_audit.suites.reports.examples --out DIR      # IU X-ray from torchxrayvision
    medvlm-audit corpus-audit --reference DIR/reference.jsonl --predictions DIR/collapsed.jsonl --out DIR/collapsed
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from medvlm_audit.suites.reports.corpus import Corpus, corpus_jsonl_bytes, iu_reference_corpus


def collapsed(ref: Corpus) -> Corpus:
    top = Counter(ref.texts).most_common(1)[0][0]
    return Corpus(ref.ids, tuple(top for _ in ref.texts), ref.groups, "collapsed")


def sampled(ref: Corpus, seed: int = 42) -> Corpus:
    idx = np.random.default_rng(seed).integers(0, len(ref), len(ref))
    return Corpus(ref.ids, tuple(ref.texts[i] for i in idx), ref.groups, "sampled")


def main() -> None:
    from medvlm_audit.atomic import write_files_atomic

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    ref = iu_reference_corpus()
    write_files_atomic(a.out, [("reference.jsonl", corpus_jsonl_bytes(ref)),
                               ("collapsed.jsonl", corpus_jsonl_bytes(collapsed(ref))),
                               ("sampled.jsonl", corpus_jsonl_bytes(sampled(ref)))])
    print(f"wrote reference/collapsed/sampled.jsonl ({len(ref)} reports) to {a.out}")


if __name__ == "__main__":
    main()
