"""Benchmark: ``judge-validate`` on the cot-eval release (4 judges, 4 raters, 131 items), all splits with
1,000 seeded dev/test splits and 10,000 bootstrap resamples. Target: <= 20 s.

    COT_EVAL_DIR=/path/to/cot-eval python benchmarks/bench_judge_validate.py

The release (github.com/jomoll/cot-eval) has no licence file, so it is not shipped: point COT_EVAL_DIR at
a checkout. Without it the benchmark runs on a synthetic set of the same shape (131 items, 4 raters with
21/131/131/51 items, 4 judges, realistic failure rates).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from medvlm_audit.suites.faithfulness.validate import judge_validate


def synthetic(root: Path) -> tuple[Path, list[Path], dict[str, Path]]:
    rng = np.random.default_rng(42)
    n = 131
    models = [f"m{i % 6}" for i in range(n)]
    mods = [f"mod{(i // 6) % 11}" for i in range(n)]
    cots = [f"<think><step> Item {i}: the right base shows haziness. </step></think><answer> yes </answer>"
            for i in range(n)]
    samples = [{"uid": f"u{i}", "question": "q (yes or no)", "question_type": "binary", "biased_prediction": cots[i],
                "model_name": models[i], "task": mods[i]} for i in range(n)]
    (root / "samples.json").write_text(json.dumps(samples))
    latent = rng.normal(size=(n, 3))
    raters = []
    for k, m in enumerate([21, 131, 131, 51]):
        idx = np.sort(rng.choice(n, m, replace=False))
        lines = []
        for i in idx:
            s = np.clip(np.round(3 + latent[i] + rng.normal(scale=0.8, size=3)), 1, 5).astype(int)
            lines.append(json.dumps({"index": int(i), "uid": f"u{i}", "completeness_score": int(s[0]),
                                     "bias_acknowledgment_score": int(s[1]), "confidence_score": int(s[2])}))
        f = root / f"reader_study_r{k + 1}.jsonl"
        f.write_text("\n".join(lines))
        raters.append(f)
    judges = {}
    for j in range(4):
        res = []
        for i in range(n):
            ev = {}
            for a, key in enumerate(("clinical_fidelity", "causal_attribution", "confidence")):
                s = int(np.clip(np.round(3 + latent[i, a] + rng.normal(scale=1.0)), 1, 5))
                u = rng.random()
                quote = "the right base shows haziness" if u > 0.08 else "a sentence that is not in the CoT at all"
                obj = {"abstain": False, "score": s, "quotes": [quote], "rationale": "r"}
                ev[key] = obj if u > 0.08 else {"error": "quote 0 not found in CoT after normalization", "raw": obj}
            res.append({"uid": f"u{i}", "cot_with_hint": cots[i], "eval": ev})
        f = root / f"judge{j}.json"
        f.write_text(json.dumps({"matching": {"detailed_results": res[:66]},
                                 "non_matching": {"detailed_results": res[66:]}}))
        judges[f"judge{j}"] = f
    return root / "samples.json", raters, judges


def main() -> None:
    rel = os.environ.get("COT_EVAL_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        if rel:
            root = Path(rel)
            mab = root / "results" / "model-ablation"
            items = mab / "reader_study_samples.json"
            ratings = sorted((root / "data" / "reader-study").glob("reader_study_r*.jsonl"))
            judges = {"llama-3.3-70b": mab / "llama70v2.json", "qwen3-30b": mab / "qwen.json",
                      "gpt-oss-20b": mab / "gpt-oss.json", "llama-3.3-70b-v1": mab / "llama70.json"}
            source = "cot-eval release"
        else:
            items, ratings, judges = synthetic(Path(tmp))
            source = "synthetic (release shape)"
        t0 = time.perf_counter()
        res = judge_validate(items, ratings, judges, validation="paper", splits=1000, seed=42,
                             out_dir=Path(tmp) / "out", B=10_000)
        dt = time.perf_counter() - t0
    print(f"judge-validate on {source}: {len(judges)} judges, {len(ratings)} raters, "
          f"{res['summary']['items']} items, 1,000 splits, B = 10,000: {dt:.2f} s wall (target <= 20 s)")
    sys.exit(0 if dt <= 20 else 1)


if __name__ == "__main__":
    main()
