"""The phantom cohort: patients, studies, labels, reports, and the probe-set cases drawn from them.

Findings depend on age, sex, view and on each other (AP films more often show effusion and edema, older
patients more often cardiomegaly; cardiomegaly comes with edema and effusion, pneumonia with
consolidation), so text and metadata priors are informative, as in MIMIC-CXR.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from medvlm_audit.boxes import irrelevant_box, working_box
from medvlm_audit.findings import MS_CXR_FINDINGS
from medvlm_audit.phantom.anatomy import (
    DEVICES,
    LATERAL_FINDINGS,
    PHANTOM_FINDINGS,
    sample_attributes,
)

#: base log-odds of each finding, then effects of AP view, (age - 60) per year, male sex
_BASE = {
    "cardiomegaly": -1.2, "pleural_effusion": -1.5, "pneumothorax": -2.1, "consolidation": -2.0, "pneumonia": -1.7,
    "edema": -2.0, "atelectasis": -1.5, "lung_opacity": -1.6, "nodule": -2.0,
}
_AP = {"pleural_effusion": 1.1, "edema": 1.2, "atelectasis": 0.6, "pneumonia": 0.4, "consolidation": 0.4,
       "pneumothorax": 0.5, "lung_opacity": 0.3}
_AGE = {"cardiomegaly": 0.06, "pleural_effusion": 0.025, "edema": 0.03, "nodule": 0.02, "atelectasis": 0.01}
#: effect of acuity (a latent "how sick", standard normal) on acute findings
_ACUITY = {"pleural_effusion": 0.8, "edema": 0.9, "consolidation": 0.8, "pneumonia": 0.8, "atelectasis": 0.7,
           "lung_opacity": 0.7, "pneumothorax": 0.6, "cardiomegaly": 0.3}
_MALE = {"cardiomegaly": 0.25, "nodule": 0.2}
_COOCCUR = {("cardiomegaly", "edema"): 0.9, ("cardiomegaly", "pleural_effusion"): 0.6,
            ("edema", "pleural_effusion"): 0.7, ("pneumonia", "consolidation"): 1.0,
            ("pneumonia", "lung_opacity"): 0.5, ("atelectasis", "pleural_effusion"): 0.5}

#: findings drawn as boxed (masking) cases: the eight MS-CXR findings plus nodule (boxed in NIH / VinDr)
BOXED_FINDINGS: tuple[str, ...] = (*MS_CXR_FINDINGS, "nodule")
SOURCES = {"box": "phantom-mscxr", "global": "phantom-mimic", "report": "phantom-rexerr"}
_SEVERITY_GROUPS = (("small", "moderate", "large"), ("mild", "moderate", "severe"), ("mildly", "moderately", "severely"))
IMAGE_ERRORS = ("false_negation", "wrong_laterality", "changed_severity", "false_prediction")
TEXT_ERRORS = ("typo", "repetition")


@dataclass
class Study:
    """One frontal radiograph of one patient, with its labels, finding attributes and report."""

    study_id: str
    patient_id: str
    patient_seed: int
    seed: int
    age: int
    sex: str
    view: str
    findings: dict[str, bool]
    attributes: dict[str, dict[str, Any]]
    sentences: list[tuple[str, str | None, bool]] = field(default_factory=list)  # (text, finding, asserted present)
    boxes: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)  # filled after rendering
    size: int = 512

    @property
    def report(self) -> str:
        return " ".join(s for s, _, _ in self.sentences)

    @property
    def image_path(self) -> str:
        return f"images/{self.study_id}.png"


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def sample_findings(rng: np.random.Generator, *, age: float, sex: str, view: str, acuity: float = 0.0) -> dict[str, bool]:
    """Draw the finding labels of one study (plus support devices) from the cohort's correlated model."""
    out: dict[str, bool] = {}
    for f in PHANTOM_FINDINGS:
        z = _BASE[f] + (_AP.get(f, 0.0) if view == "AP" else 0.0) + _AGE.get(f, 0.0) * (age - 60)
        z += _ACUITY.get(f, 0.0) * acuity
        z += _MALE.get(f, 0.0) if sex == "M" else 0.0
        z += sum(w for (a, b), w in _COOCCUR.items() if b == f and out.get(a, False))
        out[f] = bool(rng.random() < _sigmoid(z))
    out[DEVICES] = bool(rng.random() < _sigmoid(-1.2 + 1.8 * acuity + (0.8 if view == "AP" else 0.0)))
    return out


def make_cohort(n_patients: int, rng: np.random.Generator, *, split: str, size: int = 512) -> list[Study]:
    """Patients with 1-4 studies each (PA or AP), their labels, attributes and reports."""
    studies: list[Study] = []
    for p in range(n_patients):
        pid = f"p-{split}-{p:05d}"
        sex = "M" if rng.random() < 0.52 else "F"
        age0 = int(np.clip(rng.normal(62, 16), 19, 95))
        pseed = int(rng.integers(0, 2**31 - 1))
        frail = rng.normal(0, 0.7)
        for k in range(int(rng.choice([1, 2, 3, 4], p=[0.3, 0.35, 0.2, 0.15]))):
            age = min(99, age0 + k)
            acuity = frail + rng.normal(0, 0.7)
            view = "AP" if rng.random() < _sigmoid(-0.4 + 1.2 * acuity + 0.02 * (age - 60)) else "PA"
            fnd = sample_findings(rng, age=age, sex=sex, view=view, acuity=acuity)
            att = sample_attributes(fnd, rng)
            st = Study(f"s-{split}-{len(studies):05d}", pid, pseed, int(rng.integers(0, 2**31 - 1)), age, sex, view,
                       fnd, att, size=size)
            st.sentences = write_report(st, rng)
            studies.append(st)
    return studies


# ----------------------------------------------------------------------------------------------- reports

_ZONE_WORD = {"upper": "upper", "mid": "mid", "lower": "lower"}
_SEV_WORD = {"mild": "small", "moderate": "moderate", "severe": "large"}
_SEV_ADJ = {"mild": "mild", "moderate": "moderate", "severe": "severe"}
_NEG = {
    "cardiomegaly": ["Heart size is normal.", "The cardiac silhouette is not enlarged."],
    "pleural_effusion": ["No pleural effusion.", "There is no pleural effusion."],
    "pneumothorax": ["No pneumothorax.", "There is no pneumothorax."],
    "consolidation": ["No focal consolidation.", "There is no consolidation."],
    "pneumonia": ["No evidence of pneumonia."],
    "edema": ["No pulmonary edema.", "There is no pulmonary edema."],
    "atelectasis": ["No atelectasis."],
    "lung_opacity": ["No lung opacity."],
    "nodule": ["No pulmonary nodule.", "No suspicious lung nodule."],
}


def positive_sentence(f: str, at: dict[str, Any], rng: np.random.Generator) -> str:
    """A templated report sentence describing finding ``f`` with its side, severity and zone."""
    side, sev, zone = at.get("side", "right"), at.get("severity", "moderate"), at.get("zone", "lower")
    if f == "cardiomegaly":
        return rng.choice([f"{_SEV_ADJ[sev].capitalize()} cardiomegaly.", f"The heart is {_SEV_ADJ[sev]}ly enlarged."])
    if f == "pleural_effusion":
        if side == "bilateral":
            return rng.choice([f"{_SEV_WORD[sev].capitalize()} bilateral pleural effusions.",
                               f"There are {_SEV_WORD[sev]} bilateral pleural effusions."])
        return rng.choice([f"{_SEV_WORD[sev].capitalize()} {side} pleural effusion.",
                           f"There is a {_SEV_WORD[sev]} {side} pleural effusion."])
    if f == "pneumothorax":
        return rng.choice([f"{_SEV_WORD[sev].capitalize()} {side} apical pneumothorax.",
                           f"There is a {_SEV_WORD[sev]} {side} pneumothorax."])
    if f == "consolidation":
        return f"{_SEV_ADJ[sev].capitalize()} consolidation in the {side} {_ZONE_WORD[zone]} lung."
    if f == "pneumonia":
        return f"Patchy opacities in the {side} {_ZONE_WORD[zone]} lung, concerning for pneumonia."
    if f == "edema":
        return rng.choice([f"{_SEV_ADJ[sev].capitalize()} pulmonary edema.", f"There is {_SEV_ADJ[sev]} pulmonary edema."])
    if f == "atelectasis":
        return f"{_SEV_ADJ[sev].capitalize()} {side} {_ZONE_WORD[zone]} lung atelectasis."
    if f == "lung_opacity":
        return f"Hazy opacity in the {side} {_ZONE_WORD[zone]} lung."
    if f == "nodule":
        return f"A {at.get('size_mm', 10)} mm nodule in the {side} {_ZONE_WORD[zone]} lung."
    raise ValueError(f"no report template for finding {f!r}")


def write_report(st: Study, rng: np.random.Generator) -> list[tuple[str, str | None, bool]]:
    """Short report: view line, one sentence per present finding, negations for some absent ones."""
    out: list[tuple[str, str | None, bool]] = [
        ("Portable AP view of the chest." if st.view == "AP" else "PA view of the chest.", None, True)
    ]
    if st.findings.get(DEVICES):
        out.append((str(rng.choice(["Support devices are in place.", "Lines and ECG leads overlie the chest."])), None, True))
    for f in PHANTOM_FINDINGS:
        if st.findings[f]:
            out.append((str(positive_sentence(f, st.attributes[f], rng)), f, True))
    for f in PHANTOM_FINDINGS:
        if not st.findings[f] and (f in ("pleural_effusion", "pneumothorax", "cardiomegaly") or rng.random() < 0.4):
            out.append((str(rng.choice(_NEG[f])), f, False))
    return out


def inject_error(sentence: str, finding: str | None, present: bool, at: dict[str, Any], kind: str,
                 rng: np.random.Generator) -> str | None:
    """The sentence with one injected error of ``kind``; None when that error cannot apply to it."""
    if kind == "false_negation":
        return str(rng.choice(_NEG[finding])) if finding and present else None
    if kind == "false_prediction":
        if not finding or present:
            return None
        fake = sample_attributes({finding: True}, rng)[finding]
        return positive_sentence(finding, fake, rng)
    if kind == "wrong_laterality":
        if not (finding in LATERAL_FINDINGS and present):
            return None
        a, b = ("left", "right") if " left " in f" {sentence} " else ("right", "left")
        return sentence.replace(a, b, 1) if a in sentence else None
    if kind == "changed_severity":
        if not finding or not present:
            return None
        words = sentence.split(" ")
        groups = _SEVERITY_GROUPS if finding in ("pleural_effusion", "pneumothorax") else _SEVERITY_GROUPS[1:]
        for i, w in enumerate(words):
            for group in groups:
                if w.lower() in group:
                    other = [g for g in group if g != w.lower()]
                    rep = str(rng.choice(other))
                    words[i] = rep.capitalize() if w[0].isupper() else rep
                    return " ".join(words)
        return None
    if kind == "typo":
        words = sentence.split(" ")
        idx = [i for i, w in enumerate(words) if len(w.strip(".,")) >= 5]
        if not idx:
            return None
        i = int(rng.choice(idx))
        w = words[i]
        j = int(rng.integers(1, len(w.strip(".,")) - 2))
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
        return " ".join(words)
    if kind == "repetition":
        words = sentence.rstrip(".").split(" ")
        i = int(rng.integers(0, len(words)))
        return " ".join(words[: i + 1] + words[i:]) + "."
    raise ValueError(f"unknown error type {kind!r}")


# ----------------------------------------------------------------------------------------------- cases


def _row(st: Study, case_id: str, kind: str, label: int, source: str, split: str) -> dict[str, Any]:
    return {
        "case_id": case_id, "kind": kind, "label": int(label), "image_path": st.image_path,
        "image_width": st.size, "image_height": st.size, "patient_id": st.patient_id, "study_id": st.study_id,
        "age": float(st.age), "sex": st.sex, "view": st.view, "source": source, "split": split, "report": st.report,
    }


def case_plan(n_cases: int) -> tuple[int, int, int]:
    """(boxed per boxed finding, global cases per finding and label, report-error cases) for ``n_cases``."""
    per_box = max(1, round(0.40 * n_cases / len(BOXED_FINDINGS)))
    per_global = max(1, round(0.34 * n_cases / (2 * len(PHANTOM_FINDINGS))))
    n_report = max(0, n_cases - per_box * len(BOXED_FINDINGS) - 2 * per_global * len(PHANTOM_FINDINGS))
    return per_box, per_global, n_report


def select_cases(studies: list[Study], n_cases: int, rng: np.random.Generator, *, split: str) -> tuple[list[dict[str, Any]], list[Study]]:
    """Draw boxed, global and report-error cases from ``studies``; returns manifest rows and the studies they use.

    Boxed studies are kept out of the global pool (no double counting, as in the paper). Rows carry no
    boxes yet: :func:`attach_boxes` adds them once the images are rendered.
    """
    per_box, per_global, n_report = case_plan(n_cases)
    rows: list[dict[str, Any]] = []
    used: dict[str, Study] = {}
    boxed_ids: set[str] = set()
    order = rng.permutation(len(studies))
    shuffled = [studies[i] for i in order]
    for f in BOXED_FINDINGS:
        pos = [s for s in shuffled if s.findings[f] and s.study_id not in boxed_ids]
        if len(pos) < per_box:
            raise ValueError(f"phantom cohort too small: {len(pos)} studies with {f} for {per_box} boxed cases")
        for s in pos[:per_box]:
            boxed_ids.add(s.study_id)
            used[s.study_id] = s
            r = _row(s, f"{split}-box-{len(rows):05d}", "finding_presence", 1, SOURCES["box"], split)
            r["finding"] = f
            rows.append(r)
    pool = [s for s in shuffled if s.study_id not in boxed_ids]
    taken: set[str] = set()
    for f in PHANTOM_FINDINGS:
        for lab in (1, 0):
            cand = [s for s in pool if s.findings[f] == bool(lab)]
            fresh = [s for s in cand if s.study_id not in taken]
            pick = (fresh + [s for s in cand if s.study_id in taken])[:per_global]
            if len(pick) < per_global:
                raise ValueError(f"phantom cohort too small for {per_global} global {f}={lab} cases")
            for s in pick:
                taken.add(s.study_id)
                used[s.study_id] = s
                r = _row(s, f"{split}-glob-{len(rows):05d}", "finding_presence", lab, SOURCES["global"], split)
                r["finding"] = f
                rows.append(r)
    # report-error cases reuse the studies already drawn (their sentences come from those reports)
    used_list = sorted(used.values(), key=lambda s: s.study_id)
    kinds = rng.choice(3, size=n_report, p=[0.4, 0.45, 0.15])  # control, image-dependent, text-only
    for k in kinds:
        for _ in range(200):
            s = used_list[int(rng.integers(0, len(used_list)))]
            sent, sfind, present = s.sentences[int(rng.integers(0, len(s.sentences)))]
            if k == 0:
                new: str | None = sent
                etype, group = "none", "control"
            else:
                etype = str(rng.choice(IMAGE_ERRORS if k == 1 else TEXT_ERRORS))
                group = "image" if k == 1 else "text"
                new = inject_error(sent, sfind, present, s.attributes.get(sfind or "", {}), etype, rng)
                if new is None or new == sent:
                    continue
            r = _row(s, f"{split}-rep-{len(rows):05d}", "report_error", int(k == 0), SOURCES["report"], split)
            r.update(sentence=new, error_type=etype, error_group=group, sentence_finding=sfind)
            rows.append(r)
            break
    return rows, used_list


def assign_swaps(rows: list[dict[str, Any]], studies: dict[str, Study], rng: np.random.Generator) -> None:
    """Swap partner per case: a different patient's study with the same finding label state (report cases: any)."""
    by_patient_order = sorted(studies.values(), key=lambda s: s.study_id)
    index: dict[tuple[str, bool], list[Study]] = defaultdict(list)
    for s in by_patient_order:
        for f in PHANTOM_FINDINGS:
            index[(f, s.findings[f])].append(s)
    for r in rows:
        st = studies[r["study_id"]]
        if r["kind"] == "finding_presence":
            cand = index[(r["finding"], bool(r["label"]))]
        else:
            cand = by_patient_order
        for _ in range(64):
            p = cand[int(rng.integers(0, len(cand)))]
            if p.patient_id != st.patient_id:
                break
        else:
            others = [p for p in cand if p.patient_id != st.patient_id]
            if not others:
                raise ValueError(f"case {r['case_id']}: no swap partner from a different patient")
            p = others[int(rng.integers(0, len(others)))]
        r["swap_image_path"] = p.image_path
        r["swap_patient_id"] = p.patient_id


def attach_boxes(rows: list[dict[str, Any]], studies: dict[str, Study], res: int = 224) -> None:
    """Radiologist box (source pixels), working box and irrelevant box for boxed cases; study labels as JSON."""
    for r in rows:
        st = studies[r["study_id"]]
        r["study_findings"] = json.dumps(
            {f: ({**st.attributes.get(f, {}), "box": list(st.boxes[f])} if st.findings[f] else None)
             for f in PHANTOM_FINDINGS}
            | {DEVICES: ({} if st.findings.get(DEVICES) else None)}, sort_keys=True)
        if r["source"] != SOURCES["box"]:
            continue
        box = st.boxes[r["finding"]]
        r.update(box_x0=box[0], box_y0=box[1], box_x1=box[2], box_y1=box[3])
        tb = working_box(box, st.size, st.size, res)
        ib, ov = irrelevant_box(tb, res)
        r.update(tbox_x0=tb[0], tbox_y0=tb[1], tbox_x1=tb[2], tbox_y1=tb[3],
                 ibox_x0=ib[0], ibox_y0=ib[1], ibox_x1=ib[2], ibox_y1=ib[3], ibox_overlaps=bool(ov))
