"""The reports suite's embedded default data: ``phantom``, phantom radiographs with the patient's sex in their
case metadata, rendered by :func:`medvlm_audit.phantom.render_study` (findings drawn from the phantom cohort's
correlated model), each paired with a reference report of the same sex.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from medvlm_audit.errors import ProbeSetError
from medvlm_audit.suites.reports.images import MANIFEST, ImageSet, load_image_set

PHANTOM_SIZE = 256


def match_reference_reports(findings: list[set[str]], groups: list[str], reference: Any, seed: int) -> list[str]:
    """For each study (its finding set and the patient's sex), the id of a reference report of the same sex whose
    asserted findings (:func:`~medvlm_audit.suites.reports.reference.asserted_findings`) best match it (Jaccard;
    two empty sets match fully), preferring reports not yet given to another study; ties broken by a seeded
    draw. The study's "radiologist report" for the paired metrics (BLEU, ROUGE, BERTScore, clinical)."""
    from medvlm_audit.suites.reports.reference import asserted_findings

    asserted = [asserted_findings(t) for t in reference.texts]
    rng = np.random.default_rng([seed, 3004])
    used: set[int] = set()
    out: list[str] = []
    for want, g in zip(findings, groups):
        cand = [i for i, rg in enumerate(reference.groups) if rg == g]
        if not cand:
            raise ProbeSetError(f"{reference.source}: no reference report of group {g} to pair a phantom study with")
        score = np.array([1.0 if not (want | asserted[i]) else len(want & asserted[i]) / len(want | asserted[i])
                          for i in cand]) - np.array([0.5 if i in used else 0.0 for i in cand])
        best = [cand[j] for j in np.flatnonzero(score == score.max())]
        pick = best[int(rng.integers(len(best)))]
        used.add(pick)
        out.append(reference.ids[pick])
    return out


def build_phantom_images(out_dir: str | Path, n: int = 40, seed: int = 42, size: int = PHANTOM_SIZE,
                         reference: Any = None) -> ImageSet:
    """Render ``n`` phantom studies (half F, half M; ages, views and correlated findings from the phantom cohort)
    into ``out_dir/images`` and write ``out_dir/images.jsonl``; a finished build with the same parameters is
    reused. The findings are kept in the manifest as metadata: the models never see them. With a ``reference``
    corpus, each study also gets ``reference_id``: the report it is paired with (:func:`match_reference_reports`;
    the id only, the text stays in the corpus)."""
    from medvlm_audit.atomic import write_files_atomic
    from medvlm_audit.phantom import PHANTOM_FINDINGS, render_study
    from medvlm_audit.phantom.anatomy import atomic_write, encode_png
    from medvlm_audit.phantom.cohort import sample_findings

    if n < 2:
        raise ProbeSetError(f"the phantom image set needs at least 2 images (one F, one M), got {n}")
    out = Path(out_dir)
    stamp: dict[str, Any] = {"builder": "phantom_reports", "n": int(n), "seed": int(seed), "size": int(size)}
    if reference is not None:
        stamp["reference"] = {"source": reference.source, "n": len(reference),
                              "sha256": hashlib.sha256("\n".join(reference.ids).encode()).hexdigest()[:16]}
    man = out / MANIFEST
    if (out / "build.json").is_file() and man.is_file():
        try:
            if json.loads((out / "build.json").read_text()) == stamp:
                return load_image_set(man, name="phantom")
        except (OSError, json.JSONDecodeError, ProbeSetError):
            pass
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 3003])
    rows: list[dict[str, Any]] = []
    for i in range(n):
        sex = "F" if i % 2 == 0 else "M"
        age = int(np.clip(rng.normal(62, 16), 19, 95))
        view = "AP" if rng.random() < 0.3 else "PA"
        f = sample_findings(rng, age=age, sex=sex, view=view, acuity=float(rng.normal(0, 1)))
        px, _ = render_study(f, sex=sex, age=age, view=view, seed=int(rng.integers(1, 2**31 - 1)), size=size)
        cid = f"phantom-report-{i:04d}"
        atomic_write(out / "images" / f"{cid}.png", encode_png(px))
        rows.append({"id": cid, "image": f"images/{cid}.png", "group": sex, "age": age, "view": view,
                     "findings": sorted(k for k in PHANTOM_FINDINGS if f[k])})
    if reference is not None:
        ids = match_reference_reports([set(r["findings"]) for r in rows], [r["group"] for r in rows], reference, seed)
        for r, rid in zip(rows, ids):
            r["reference_id"] = rid
    lines = [json.dumps(r) for r in rows]
    write_files_atomic(out, [(MANIFEST, ("\n".join(lines) + "\n").encode()),
                             ("build.json", json.dumps(stamp).encode())])
    return load_image_set(man, name="phantom")
