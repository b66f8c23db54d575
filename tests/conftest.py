"""Shared fixtures: a tiny probe set written in the real manifest format, and small pixel-reading models."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medvlm_audit.boxes import irrelevant_box, working_box
from medvlm_audit.models.base import LocalModel, ModelInput, Response
from medvlm_audit.suites.grounding.probeset import ProbeSet


def make_tiny_probeset(folder: Path, n: int = 12, seed: int = 0) -> ProbeSet:
    """n cases on 64x64 PNGs; 'present' images carry a bright square inside their box."""
    rng = np.random.default_rng(seed)
    img_dir = folder / "images"
    img_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        label = i % 2
        px = rng.integers(40, 90, size=(64, 64), dtype=np.uint8)
        box = (8.0 + (i % 3) * 4, 10.0, 30.0 + (i % 3) * 4, 34.0)
        if label:
            x0, y0, x1, y1 = (int(v) for v in box)
            px[y0:y1, x0:x1] = 230
        path = img_dir / f"img{i:03d}.png"
        Image.fromarray(px).save(path)
        tb = working_box(box, 64, 64)
        ib, ov = irrelevant_box(tb)
        rows.append(
            dict(
                case_id=f"c{i:03d}", kind="finding_presence", label=label, finding="nodule",
                image_path=f"images/img{i:03d}.png", image_width=64, image_height=64,
                box_x0=box[0], box_y0=box[1], box_x1=box[2], box_y1=box[3],
                tbox_x0=tb[0], tbox_y0=tb[1], tbox_x1=tb[2], tbox_y1=tb[3],
                ibox_x0=ib[0], ibox_y0=ib[1], ibox_x1=ib[2], ibox_y1=ib[3], ibox_overlaps=ov,
                patient_id=f"p{i}", study_id=f"s{i}", age=40 + i, sex="MF"[i % 2], view="PA", source="tiny",
                split="test",
            )
        )
    df = pd.DataFrame(rows)
    # label-matched swap partner from a different patient: the next case with the same label
    partners = []
    for i in range(n):
        j = (i + 2) % n
        partners.append(df.loc[j, "image_path"])
    df["swap_image_path"] = partners
    df["swap_patient_id"] = [df.loc[(i + 2) % n, "patient_id"] for i in range(n)]
    ps = ProbeSet(df, folder, {"builder": "tiny-test", "seed": seed}, name="tiny")
    ps.save(folder / "probeset")
    return ProbeSet.load(folder / "probeset")


class BrightSpotModel(LocalModel):
    """Answers Yes when the image's brightest 2% of pixels exceed 200; reads only pixels and prompt."""

    name = "bright-spot"
    modality = "multimodal"

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        out = []
        for inp in inputs:
            self.calls += 1
            if not inp.images:
                out.append(Response("I cannot tell without an image."))
                continue
            px = inp.images[0].pixels
            score = float(np.quantile(px, 0.98))
            p = 1 / (1 + np.exp(-(score - 200) / 10))
            text = "Yes" if p >= 0.5 else "No"
            out.append(Response(text, (("Yes", float(np.log(max(p, 1e-9)))), ("No", float(np.log(max(1 - p, 1e-9)))))))
        return out


class PromptLengthModel(LocalModel):
    """Text-only: answers from the prompt alone (Yes when the prompt mentions 'nodule')."""

    name = "prompt-only"
    modality = "text_only"

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        self.calls += len(inputs)
        return [Response("Yes" if "nodule" in i.prompt else "No") for i in inputs]


@pytest.fixture
def tiny_probeset(tmp_path: Path) -> ProbeSet:
    return make_tiny_probeset(tmp_path / "tiny")
