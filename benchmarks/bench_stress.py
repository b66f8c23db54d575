"""Stress suite speed: plan + score + analyse 2,000 items x 6 conditions x 5 repeats x 5 models (target <= 5 s).

Synthetic items (two benchmarks, five options, half image-required, 10% with a substitute image) and
synthetic answers in the formats models give (tagged letter+text, bare letter, prose, refusals, noise),
no model time. Baseline in the same script: a plain pandas groupby accuracy over the same table, the
least any analysis must do. Also checks that planning twice gives byte-identical trials.

    .venv/bin/python benchmarks/bench_stress.py [--items 2000] [--repeats 5] [--models 5] [--B 10000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import numpy as np
import pandas as pd

from medvlm_audit.suites.stress.analysis import analyse_stress, score_stress
from medvlm_audit.suites.stress.conditions import DEFAULT_CONDITIONS, StressOptions, plan_stress
from medvlm_audit.suites.stress.items import LETTERS, ItemSet, MCQItem

CONDS = ("original", "no_image", "reordered+no_image", "replaced:4", "replaced:4+no_image", "substitution")
VOCAB = [f"diagnosis {i}" for i in range(400)]


def make_items(n: int, seed: int = 0) -> ItemSet:
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        opts = [VOCAB[j] for j in rng.choice(len(VOCAB), 5, replace=False)]
        gold = int(rng.integers(5))
        sub = (i % 10 == 0)
        items.append(MCQItem(
            f"item-{i:05d}", f"Question {i}: what is shown?", tuple(opts), gold, (f"/nonexistent/{i}.png",),
            needs_image=bool(i % 2), substitute_image=f"/nonexistent/{i}_sub.png" if sub else None,
            substitute_answer=((gold + 1) % 5) if sub else None, benchmark="bench-a" if i % 3 else "bench-b"))
    return ItemSet(items)


def synth_answers(tidy: pd.DataFrame, n_models: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frames = []
    for m in range(n_models):
        n = len(tidy)
        gold = tidy["gold"].map(LETTERS.index).to_numpy()
        p_right = np.where(tidy["with_image"].to_numpy(), 0.7, 0.35) - 0.05 * m
        right = rng.random(n) < p_right
        pick = np.where(right, gold, (gold + rng.integers(1, 5, n)) % 5)
        fmt = rng.random(n)
        opts = tidy["options"].tolist()
        texts = []
        for i in range(n):
            L = LETTERS[pick[i]]
            f = fmt[i]
            if f < 0.80:
                texts.append(f"<answer>{L}. {opts[i][pick[i]]}</answer>")
            elif f < 0.88:
                texts.append(L)
            elif f < 0.93:
                texts.append(f"Looking at the findings, the answer is {L}.")
            elif f < 0.97:
                texts.append("I cannot determine the diagnosis without seeing the image.")
            else:
                texts.append("hmm")
        t = tidy.copy()
        t["model"] = f"model-{m}"
        t["answer_text"] = texts
        frames.append(t)
    return pd.concat(frames, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", type=int, default=5)
    ap.add_argument("--B", type=int, default=10_000)
    ap.add_argument("--all-conditions", action="store_true", help="all 16 conditions instead of 6")
    args = ap.parse_args()
    items = make_items(args.items)
    conds = DEFAULT_CONDITIONS if args.all_conditions else CONDS
    opts = StressOptions(conditions=conds, repeats=args.repeats, check_files=False)

    t0 = time.perf_counter()
    plan = plan_stress(items, opts)
    t_plan = time.perf_counter() - t0
    plan2 = plan_stress(items, opts)

    def digest(p) -> str:
        h = hashlib.sha256()
        for t in p.trials:
            h.update(json.dumps([t.case_id, t.condition, t.sample_index, t.messages[0].content,
                                 [r.source for r in t.images], t.payload], sort_keys=True).encode())
        return h.hexdigest()

    same = digest(plan) == digest(plan2)
    tidy = pd.DataFrame([{"case_id": t.case_id, "condition": t.condition, "sample_index": t.sample_index,
                          **t.payload} for t in plan.trials])
    table = synth_answers(tidy, args.models)
    n_rows = len(table)

    t0 = time.perf_counter()
    scored = score_stress(table)
    t_score = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = analyse_stress(scored, B=args.B, seed=0)
    t_analyse = time.perf_counter() - t0

    t0 = time.perf_counter()
    base = scored.groupby(["model", "condition"])["correct"].agg(["mean", "size"])
    t_base = time.perf_counter() - t0

    total = t_plan + t_score + t_analyse
    print(f"items={args.items} conditions={len(conds)} repeats={args.repeats} models={args.models} "
          f"trials={len(plan.trials)} rows={n_rows} B={args.B}")
    print(f"plan      {t_plan:7.3f} s   (deterministic rerun identical: {same})")
    print(f"score     {t_score:7.3f} s   (parse rate {np.mean(scored['status'].isin(['answer', 'refusal'])):.3f})")
    print(f"analyse   {t_analyse:7.3f} s   ({len(res.changes)} paired tests, {len(res.robustness)} score rows)")
    print(f"total     {total:7.3f} s   target <= 5 s: {'PASS' if total <= 5 else 'FAIL'}")
    print(f"baseline  {t_base:7.3f} s   (pandas groupby accuracy, no intervals); total / baseline = "
          f"{total / max(t_base, 1e-9):.0f}x")
    assert len(base) == args.models * len(conds)


if __name__ == "__main__":
    main()
