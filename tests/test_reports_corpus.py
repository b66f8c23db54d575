"""Report corpora: JSONL checks, loaders of the released layouts (tiny files in the real layout), the IU builder,
and corpus_audit's files."""

from __future__ import annotations

import csv
import gzip
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from medvlm_audit.suites.reports import corpus as C
from medvlm_audit.suites.reports.audit import corpus_audit


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_read_corpus_accepts_aliases_and_blank_lines(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"id": 1, "text": "No acute disease.", "group": "female"}\n\n'
                 '{"id": "b", "text": "Pacemaker.", "group": "M"}\n', encoding="utf-8")
    c = C.read_corpus(p)
    assert c.ids == ("1", "b") and c.groups == ("F", "M") and c.female.tolist() == [True, False]


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b'{"id": 1, "text": "a", "group": "F"}\n{"id": 2, "text": "b", "group": "F"}\n', "every report is in group F"),
    (b'{"id": 1, "text": "a", "group": "F"}\n{"id": 2, "text": "b"}\n', "row 2: missing field 'group'"),
    (b'{"id": 1, "text": "a", "group": "F"}\n{"id": 2, "text": "b", "group": "X"}\n', "row 2: field 'group'"),
    (b'{"id": 1, "text": "a", "group": "F"}\n{"id": 2, "text": "caf\xe9", "group": "M"}\n', "row 2: not UTF-8"),
    (b'{"id": 1, "text": "a", "group": "F"}\n{"id": 2, \n', "row 2: not valid JSON"),
])
def test_read_corpus_errors_name_file_and_row(tmp_path, content, message):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    with pytest.raises(C.CorpusError) as e:
        C.read_corpus(p)
    assert message in str(e.value) and "bad.jsonl" in str(e.value)


def test_mimic_cxr_layout(tmp_path):
    root = tmp_path / "files"
    for subj, study, text in [
        ("10000032", "50414267", "EXAMINATION: CHEST\nINDICATION: ___\nFINDINGS: Left mastectomy.\nIMPRESSION: No acute process.\n"),
        ("10000033", "50414268", "FINDINGS: AICD in place.\n\nIMPRESSION:\n Stable.\n"),
        ("10000034", "50414269", "FINDINGS: No sex known.\n"),
        ("10000033", "50414270", "WET READ: only a wet read\n"),
    ]:
        d = root / f"p{subj[:2]}" / f"p{subj}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s{study}.txt").write_text(text, encoding="utf-8")
    pat = tmp_path / "patients.csv.gz"
    with gzip.open(pat, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerows([["subject_id", "gender", "anchor_age"], ["10000032", "F", 52], ["10000033", "M", 60]])
    c = C.load_mimic_cxr(root, pat)
    assert c.ids == ("p10000032/s50414267", "p10000033/s50414268")
    assert c.texts == ("Left mastectomy. No acute process.", "AICD in place. Stable.")
    assert c.groups == ("F", "M")


def test_chexpert_plus_layout_one_report_per_study(tmp_path):
    p = tmp_path / "df_chexpert_plus_240401.csv"
    pd.DataFrame([
        {"path_to_image": "train/patient1/study1/view1_frontal.jpg", "deid_patient_id": "pid1",
         "patient_report_date_order": 1, "section_findings": "Left mastectomy.", "section_impression": "No acute.",
         "sex": "Female"},
        {"path_to_image": "train/patient1/study1/view2_lateral.jpg", "deid_patient_id": "pid1",
         "patient_report_date_order": 1, "section_findings": "Left mastectomy.", "section_impression": "No acute.",
         "sex": "Female"},
        {"path_to_image": "train/patient2/study1/view1_frontal.jpg", "deid_patient_id": "pid2",
         "patient_report_date_order": 1, "section_findings": None, "section_impression": "AICD.", "sex": "Male"},
        {"path_to_image": "train/patient3/study1/view1_frontal.jpg", "deid_patient_id": "pid3",
         "patient_report_date_order": 1, "section_findings": "x", "section_impression": "y", "sex": "Unknown"},
    ]).to_csv(p, index=False)
    c = C.load_chexpert_plus(p)
    assert c.ids == ("pid1/1", "pid2/1") and c.texts == ("Left mastectomy. No acute.", "AICD.")
    assert c.groups == ("F", "M")


def test_rexgradient_csv_and_json(tmp_path):
    rows = [{"id": "s1", "PatientSex": "F", "Findings": "Breast implants.", "Impression": "Normal."},
            {"id": "s2", "PatientSex": "M", "Findings": "Pacemaker.", "Impression": ""}]
    pd.DataFrame(rows).to_csv(tmp_path / "meta.csv", index=False)
    (tmp_path / "meta.json").write_text(json.dumps({r["id"]: r for r in rows}), encoding="utf-8")
    for name in ("meta.csv", "meta.json"):
        c = C.load_rexgradient(tmp_path / name)
        assert c.ids == ("s1", "s2") and c.texts == ("Breast implants. Normal.", "Pacemaker.")
    with pytest.raises(C.CorpusError, match="missing column"):
        pd.DataFrame([{"id": 1}]).to_csv(tmp_path / "bad.csv", index=False)
        C.load_rexgradient(tmp_path / "bad.csv")


def _iu_xml(uid: str, indication: str, findings: str, impression: str) -> bytes:
    return (f'<?xml version="1.0" encoding="utf-8"?><eCitation><uId id="{uid}"/><MedlineCitation><Article><Abstract>'
            f'<AbstractText Label="INDICATION">{indication}</AbstractText>'
            f'<AbstractText Label="FINDINGS">{findings}</AbstractText>'
            f'<AbstractText Label="IMPRESSION">{impression}</AbstractText>'
            f'</Abstract></Article></MedlineCitation><parentImage id="{uid}_IM-1"/></eCitation>').encode()


def test_iu_layout_sex_from_indication_only(tmp_path):
    tgz = tmp_path / "NLMCXR_reports.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        for i, (ind, fi, im) in enumerate([
            ("XXXX-year-old female with cough", "Left mastectomy.", "Normal chest."),
            ("65 year old male.", "", "AICD."),
            ("Chest pain", "Clear lungs.", "Normal."),            # no sex: skipped
            ("Female and male?", "Clear.", "Normal."),            # both: skipped
            ("Woman, dyspnea", "Clear.", ""),
        ], 1):
            data = _iu_xml(f"CXR{i}", ind, fi, im)
            info = tarfile.TarInfo(f"ecgen-radiology/{i}.xml")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    c = C.load_iu_xray(tgz)
    assert c.ids == ("CXR1", "CXR2", "CXR5")
    assert c.groups == ("F", "M", "F")
    assert c.texts[0] == "Left mastectomy. Normal chest."
    assert C.sex_from_indication("Patient is a man") == "M" and C.sex_from_indication("Human bite") is None


@pytest.mark.slow
def test_build_iu_reports_from_torchxrayvision(tmp_path):
    try:
        C.torchxrayvision_iu_reports()
    except C.CorpusError:
        pytest.skip("torchxrayvision (with its IU X-ray reports) is not installed")
    s = C.build_iu_reports(tmp_path)
    assert s["reports"] == 3955 and s["groups"] == {"F": 683, "M": 477}
    c = C.read_corpus(tmp_path / "iu_reports.jsonl")
    assert len(c) == 1160 and not any(t == "" for t in c.texts)
    assert json.loads((tmp_path / "iu_reports.json").read_text())["written"] == 1160


def _planted_corpora(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    neutral = ["heart size normal", "lungs clear", "no pleural effusion", "osseous structures intact"]
    ref = []
    for i in range(120):
        base = " ".join(rng.choice(neutral, 3))
        own, other = (" mastectomy", " aicd") if i < 40 else (" aicd", " mastectomy") if i < 44 else ("", "")
        ref.append({"id": f"f{i}", "text": base + own, "group": "F"})
        ref.append({"id": f"m{i}", "text": base + other, "group": "M"})
    pred = [{"id": r["id"], "text": "Heart size normal. Lungs clear.", "group": r["group"]} for r in ref]
    return _jsonl(tmp_path / "ref.jsonl", ref), _jsonl(tmp_path / "pred.jsonl", pred)


def test_corpus_audit_writes_every_file(tmp_path):
    ref, pred = _planted_corpora(tmp_path)
    out = tmp_path / "audit"
    res = corpus_audit(ref, pred, out, B=100, n_perm=100, semantic=False)
    cad = pd.read_csv(out / "cad.csv")
    for col in ("word", "z_ref", "z_pred", "z_disp", "p", "q", "category", "category_ungated",
                "count_ref_F", "count_ref_M", "count_pred_F", "count_pred_M"):
        assert col in cad.columns
    assert set(cad.loc[cad.category_ungated == "erasure", "word"]) == {"mastectomy", "aicd"}
    # the gate cannot see the erasure of a word never written: gated `absent`, never `stable` (issue 21, defect 6)
    assert (cad.category.isin(["stable", "absent"])).all()
    never = (cad.count_pred_F + cad.count_pred_M) == 0
    assert never.any() and (cad.category[never] == "absent").all() and (cad.category[~never] == "stable").all()
    wae = pd.read_csv(out / "wae.csv")
    assert list(zip(wae.weighting, wae.group)) == [(w, g) for w in ("pred", "ref") for g in ("all", "F", "M", "delta")]
    assert {"value", "ci_low", "ci_high", "p_perm"} <= set(wae.columns)
    div = pd.read_csv(out / "diversity.csv").set_index("corpus")
    assert div.loc["predictions", "template_diversity"] == pytest.approx(1 / 240)
    assert div.loc["predictions", "ttr"] == pytest.approx(5 / (240 * 5))  # heart size normal lungs clear: 5 types
    assert div.loc["predictions", "one_minus_self_bleu"] == pytest.approx(0.0)
    surf = pd.read_csv(out / "surface.csv").set_index("metric")
    assert (surf.n_pairs == 240).all() and (surf.n_references == 240).all()
    assert 0 < surf.loc["rouge1", "value"] < 1
    assert surf.loc["rouge1", "ci_low"] <= surf.loc["rouge1", "value"] <= surf.loc["rouge1", "ci_high"]
    summ = json.loads((out / "summary.json").read_text())
    assert summ["categories_ungated"]["erasure"] == 2 and summ["categories_gated"]["erasure"] == 0
    assert res.category_counts(gated=False)["erasure"] == 2


def test_corpus_audit_bad_input_writes_nothing(tmp_path):
    ref, _ = _planted_corpora(tmp_path)
    bad = tmp_path / "pred.jsonl"
    bad.write_bytes(b'{"id": 1, "text": "x", "group": "F"}\n{"id": 2, "text": "y", "group": "F"}\n')
    out = tmp_path / "audit"
    with pytest.raises(C.CorpusError, match="predictions: .*every report is in group F"):
        corpus_audit(ref, bad, out, B=10, n_perm=10, semantic=False)
    assert not out.exists()


def test_corpus_audit_cli_command(tmp_path):
    import typer
    from typer.testing import CliRunner

    from medvlm_audit.suites.reports.commands import corpus_audit_cmd

    ref, pred = _planted_corpora(tmp_path)
    app = typer.Typer()
    app.command()(corpus_audit_cmd)
    r = CliRunner().invoke(app, ["--reference", str(ref), "--predictions", str(pred), "--out", str(tmp_path / "o"),
                                 "--bootstrap", "50", "--permutations", "50", "--semantic", "off"])
    assert r.exit_code == 0, r.output
    assert "'erasure': 2" in r.output and (tmp_path / "o" / "wae.csv").is_file()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = CliRunner().invoke(app, ["--reference", str(empty), "--predictions", str(pred), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "empty" in r.output


def _audit_cli(tmp_path: Path, ref: Path, pred: Path, name: str):
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    return CliRunner().invoke(app, ["corpus-audit", "--reference", str(ref), "--predictions", str(pred), "--out",
                                    str(tmp_path / name), "--bootstrap", "20", "--permutations", "20",
                                    "--semantic", "off", "--bertscore", "off"])


@pytest.mark.parametrize("text, status", [("Yes", "too_short"), ("As an AI, I cannot provide a diagnosis.", "refused"),
                                          ("", "empty")])
def test_corpus_audit_of_degenerate_predictions_is_not_assessable(tmp_path, text, status):
    """The reports suite's not-assessable rule (assess.py) applies to corpus-audit: a warning with the counts on
    stderr, exit 1, no category or WAE (tables with their header only), only the written paths on stdout."""
    ref, _ = _planted_corpora(tmp_path)
    rows = [{"id": f"p{i}", "text": text if i % 6 else "Heart size normal. Lungs clear.", "group": "FM"[i % 2]}
            for i in range(24)]
    pred = _jsonl(tmp_path / "degenerate.jsonl", rows)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "surface.csv").write_text("metric,value\nbleu,0.5\n")  # an earlier audit's: not kept
    r = _audit_cli(tmp_path, ref, pred, "o")
    assert r.exit_code == 1, r.output
    assert "not assessable (4 of 24 reports assessable" in r.stderr and f"{status} 20" in r.stderr
    assert r.stdout.split() and all(Path(p).is_file() for p in r.stdout.split()), r.stdout
    summ = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summ["assessable"] is False and summ["statuses"] == {"answer": 4, status: 20}
    assert "categories_headline" not in summ and not (tmp_path / "o" / "surface.csv").exists()
    for table in ("cad.csv", "wae.csv", "diversity.csv"):
        df = pd.read_csv(tmp_path / "o" / table)  # a header, no rows: never an EmptyDataError
        assert len(df) == 0 and len(df.columns) > 3, table


def test_corpus_audit_summary_goes_to_stderr_and_an_undefined_wae_says_why(tmp_path):
    ref = _jsonl(tmp_path / "ref.jsonl", [{"id": f"r{i}", "text": ("mastectomy breast lungs clear" if i % 2 else
                                                                  "aicd prostate lungs clear"),
                                           "group": "FM"[i % 2 == 0]} for i in range(24)])
    pred = _jsonl(tmp_path / "pred.jsonl", [{"id": f"p{i}", "text": "Lungs clear.", "group": "FM"[i % 2]}
                                            for i in range(24)])
    r = _audit_cli(tmp_path, ref, pred, "o")
    assert r.exit_code == 0, r.output
    assert "WAE pred" in r.stderr and "WAE" not in r.stdout
    assert all(Path(p).is_file() for p in r.stdout.split()) and "wae.csv" in r.stdout
    assert "nan" not in r.stderr, r.stderr
    assert "delta pred undefined (the predictions write no word the reference associates with F or M" in r.stderr
