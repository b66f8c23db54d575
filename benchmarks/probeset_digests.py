"""Digests of every dataset builder's output: build each probe set through the CLI (`build mimic` twice, `chexpert`,
`nih` with and without image checks, `vindr`, `folder`, `probe-train` from MIMIC and CheXpert) on the small trees
the dataset tests generate (tests/datasets/dsfixtures.py) and print one sha256 per output file plus each command's
exit code and printed summary, as JSON. Two checkouts give the same JSON when their builders write the same bytes
(the BuildOptions change and the builder splits were checked so). ``image_checks.jsonl`` is a cache written by
parallel workers: its lines are hashed in sorted order.

    PYTHONPATH=src python benchmarks/probeset_digests.py DATA_DIR OUT_DIR > digests.json

DATA_DIR is created (the generated trees) when missing and reused otherwise: give both checkouts the same DATA_DIR
(probeset.json records the dataset root). OUT_DIR must not exist.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "datasets"))
import dsfixtures as F  # noqa: E402

from medvlm_audit.cli import app  # noqa: E402

data, out = Path(sys.argv[1]), Path(sys.argv[2])
SMALL = {"n_subjects": 60, "n_studies": 150, "n_images": 220, "test_every": 2, "n_rexerr": 200,
         "ms_eligible": dict.fromkeys(F.MS_CATS, 3), "ms_ineligible_per_cat": 2, "size": (64, 80), "gz": True}
if not data.exists():
    roots = F.make_mimic_tree(data / "mimic", images=True, **SMALL)
    (data / "roots.json").write_text(json.dumps({k: str(v) for k, v in roots.items()}))
    chx = F.make_chexpert_tree(data / "chexpert", n_patients=120)
    (data / "chx.txt").write_text(str(chx))
    F.make_nih_tree(data / "nih", n_images=300, n_boxes=30)
    F.make_vindr_tree(data / "vindr", n_images=120)
    d = data / "folder" / "imgs"
    d.mkdir(parents=True)
    rows = []
    for i in range(24):
        Image.fromarray(np.full((200, 160), i * 9, np.uint8)).save(d / f"img{i:02d}.png")
        fin = ["Cardiomegaly", "Pleural Effusion", "no_finding"][i % 3]
        lab = "yes" if (i // 3) % 2 == 0 and fin != "no_finding" else "no"
        box = (20, 30, 120, 150) if lab == "yes" else ("", "", "", "")
        rows.append([f"img{i:02d}.png", fin, lab, *box, f"P{i // 2}", 40 + i, "F" if i % 2 else "M", "PA"])
    pd.DataFrame(rows, columns=["image", "finding", "label", "x0", "y0", "x1", "y1", "patient_id", "age", "sex",
                                "view"]).to_csv(data / "folder" / "cases.csv", index=False)
roots = json.loads((data / "roots.json").read_text())
mim = [x for k, v in roots.items() for x in (f"--{k.replace('_', '-')}", v)]
chx = (data / "chx.txt").read_text()
jobs = {
    "mimic": ["build", "mimic", *mim, "--seed", "7"],
    "mimic_chk": ["build", "mimic", *mim, "--workers", "1", "--swap-same-view", "--name", "mm"],
    "chexpert": ["build", "chexpert", "--chexpert-root", chx, "--per-finding", "6", "--n-normal", "6",
                 "--split", "all"],
    "nih": ["build", "nih", "--nih-root", data / "nih", "--per-finding", "5", "--n-normal", "5", "--no-check-images"],
    "nih_chk": ["build", "nih", "--nih-root", data / "nih", "--per-finding", "5", "--n-normal", "5", "--full-decode"],
    "vindr": ["build", "vindr", "--vindr-root", data / "vindr", "--n-absent", "5", "--n-normal", "5"],
    "folder": ["build", "folder", "--images", data / "folder" / "imgs", "--csv", data / "folder" / "cases.csv"],
    "train_mimic": ["build", "probe-train", "--source", "mimic", "--mimic-root", roots["mimic_root"],
                    "--no-check-images"],
    "train_chexpert": ["build", "probe-train", "--source", "chexpert", "--chexpert-root", chx,
                       "--name", "tc"],
}
res = {}
for k, args in jobs.items():
    o = out / k
    r = CliRunner().invoke(app, [str(a) for a in args] + ["--out", str(o)])
    res[k] = {"exit": r.exit_code, "output": r.output.replace(str(out), "OUT").replace(str(data), "DATA")[-3000:]}
    if o.exists():
        for f in sorted(o.rglob("*")):
            if f.is_file():
                b = f.read_bytes()
                if f.name == "image_checks.jsonl":  # a cache written by parallel workers: its lines, in any order
                    b = b"\n".join(sorted(b.splitlines()))
                res[k][str(f.relative_to(o))] = hashlib.sha256(b).hexdigest()
print(json.dumps(res, indent=1, sort_keys=True))
