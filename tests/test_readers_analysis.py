"""Reader-study analysis on hand-built exports (every number checked by hand) and study creation for each task."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from medvlm_audit import stats
from medvlm_audit.readers.analysis import analyse_exports, write_analysis
from medvlm_audit.readers.study import Study, create_study

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

B = 400


def _export(d: Path, task: str, answers: list[dict], scales=("answer",), reads: pd.DataFrame | None = None) -> Path:
    d.mkdir(parents=True)
    cols = ["reader", "item_id", "task", "probe_set", "case_id", "condition", "model", "finding", "benchmark",
            "scale", "answer", "time_s", "answered_at", "revisions", "position"]
    df = pd.DataFrame([{c: r.get(c) for c in cols} | {"task": task} for r in answers], columns=cols)
    df["scale"] = df["scale"].fillna("answer")
    df.to_parquet(d / "answers.parquet")
    if reads is not None:
        reads.to_parquet(d / "reads.parquet")
    (d / "readers_export.json").write_text(json.dumps({"task": task, "scales": list(scales), "readers": {},
                                                       "run_dir": None, "suite": "grounding"}))
    return d


# cases c1, c2 (label 1) and c3, c4 (label 0), all boxed. answers: (original, target_mask, irrelevant_mask)
READER_A = {"c1": (1, 0, 1), "c2": (1, 1, 0), "c3": (1, 1, 1), "c4": (0, 0, 0)}
READER_B = {"c1": (1, 0, 1), "c2": (1, 1, 1), "c3": (1, 1, 1), "c4": (0, 0, 0)}
MODEL = {"c1": (1, 0, 1), "c2": (1, 0, 1), "c3": (0, 0, 0), "c4": (0, 0, 0)}
LABEL = {"c1": 1, "c2": 1, "c3": 0, "c4": 0}
CONDS = ("original", "target_mask", "irrelevant_mask")


def _tidy(model: str, answers: dict, modality: str) -> pd.DataFrame:
    rows = []
    for c, trio in answers.items():
        for cond, a in zip(CONDS, trio):
            rows.append({"probe_set": "ps", "model": model, "modality": modality, "case_id": c, "label": LABEL[c],
                         "condition": cond, "parsed": a, "finding": "edema" if c in ("c1", "c3") else "nodule",
                         "has_box": True, "resolution": 224, "prompt_variant": "default", "sample_index": 0,
                         "kind": "finding_presence", "view": "PA"})
    return pd.DataFrame(rows)


@pytest.fixture()
def fp_export(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    reads = pd.concat([_tidy("reader:a", READER_A, "reader"), _tidy("reader:b", READER_B, "reader")])
    ans = [{"reader": m[7:], "case_id": r.case_id, "condition": r.condition, "answer": "yes" if r.parsed else "no",
            "probe_set": "ps"} for m, g in reads.groupby("model") for r in g.itertuples()]
    return _export(tmp_path / "fp", "finding-presence", ans, reads=reads), _tidy("m", MODEL, "multimodal")


def test_finding_presence_reader_metrics_and_model_minus_reader(fp_export) -> None:
    d, run = fp_export
    res = analyse_exports([d], run_tidy=run, B=B)
    per_finding = res.metrics[res.metrics.subset.str.startswith("reader-sample:finding=")].set_index(
        ["model", "subset"])["point"]
    # reader a per finding: edema (c1 flips; c3 answered wrongly) 1/1, nodule (c2, c4 unchanged) 0/2
    assert per_finding[("reader:a", "reader-sample:finding=edema")] == 100.0
    assert per_finding[("reader:a", "reader-sample:finding=nodule")] == 0.0
    m = res.metrics[res.metrics.subset == "reader-sample"].set_index(["model", "metric"])
    # reader a: accuracy 3/4; CGR flips under target among correct (c1, c2, c4): c1 -> 1/3; IS: c1, c4 -> 2/3
    assert m.loc[("reader:a", "accuracy"), "point"] == pytest.approx(75.0)
    assert m.loc[("reader:a", "cgr"), "point"] == pytest.approx(100 / 3)
    assert m.loc[("reader:a", "is"), "point"] == pytest.approx(200 / 3)
    assert m.loc[("m", "cgr"), "point"] == pytest.approx(50.0)  # c1, c2 of c1..c4
    c = res.comparisons.set_index(["metric", "model_a", "model_b"])
    assert c.loc[("accuracy", "m", "reader:a"), "diff"] == pytest.approx(25.0)
    assert c.loc[("accuracy", "m", "reader:a"), "n"] == 4
    # CGR on cases eligible for both (c1, c2, c4): model 2/3 - reader 1/3
    assert c.loc[("cgr", "m", "reader:a"), "diff"] == pytest.approx(100 / 3)
    assert c.loc[("cgr", "m", "reader:a"), "n"] == 3
    # fewer than 10 shared cases: the difference is reported, no test is run, and the row says why
    assert res.comparisons["p_adj"].isna().all()
    assert res.comparisons["note"].astype(str).str.contains("10").all()
    # the two readers agree on 11 of 12 judgments (c2 under the irrelevant mask differs)
    pa = res.metrics[(res.metrics.metric == "percent_agreement")]
    assert pa["point"].iloc[0] == pytest.approx(100 * 11 / 12) and pa["n"].iloc[0] == 12
    ka = res.metrics[(res.metrics.metric == "kappa")]["point"].iloc[0]
    a = [READER_A[c][j] for c in sorted(LABEL) for j in range(3)]
    b = [READER_B[c][j] for c in sorted(LABEL) for j in range(3)]
    assert ka == pytest.approx(stats.cohen_kappa(a, b))
    assert list(res.metrics.columns) == ["suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low",
                                         "ci_high", "n", "unit", "method", "note"]
    assert any(s.title.startswith("Readers beside the models") for s in res.sections)


def test_box_validity_wilson_and_cgr_on_accurate_boxes(tmp_path: Path, fp_export) -> None:
    _, run = fp_export
    ans = [{"reader": "a", "case_id": c, "finding": f, "answer": v, "probe_set": "ps"} for c, f, v in (
        ("c1", "edema", "accurate"), ("c3", "edema", "accurate"), ("c2", "nodule", "partial"),
        ("c4", "nodule", "not_assessable"))]
    d = _export(tmp_path / "bv", "box-validation", ans)
    res = analyse_exports([d], run_tidy=run, B=B)
    m = res.metrics.set_index(["model", "metric", "subset"])
    row = m.loc[("reader:a", "box_valid", "finding=edema")]
    assert row["point"] == pytest.approx(100.0) and row["n"] == 2
    lo, hi = stats.wilson_interval(2, 2)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((100 * lo, 100 * hi))
    assert m.loc[("reader:a", "box_valid", "finding=nodule"), "point"] == 0.0
    assert m.loc[("reader:a", "box_valid_partial", "finding=nodule"), "point"] == pytest.approx(50.0)
    # the model's CGR on boxes rated accurate: correct-on-original c1 (flip); c3 is correct (label 0, answer 0),
    # unchanged under the mask -> 1/2; at least partial adds c2 (flip) -> 2/3
    acc = m.loc[("m", "cgr", "box=accurate:reader:a")]
    assert acc["point"] == pytest.approx(50.0) and acc["n"] == 2
    lo, hi = stats.wilson_interval(1, 2)
    assert (acc["ci_low"], acc["ci_high"]) == pytest.approx((100 * lo, 100 * hi))
    assert m.loc[("m", "cgr", "box>=partial:reader:a"), "point"] == pytest.approx(200 / 3)
    assert m.loc[("m", "cgr", "box=rated"), "point"] == pytest.approx(50.0)  # c1, c2 flip of c1..c4
    assert not res.metrics.duplicated(["model", "metric", "subset"]).any()


def test_failure_mode_shares(tmp_path: Path) -> None:
    ans = [{"reader": "a", "case_id": f"c{i}", "model": "m1", "answer": v, "probe_set": "ps"}
           for i, v in enumerate(["ambiguous_case", "ambiguous_case", "clear_model_failure", "other"])]
    d = _export(tmp_path / "fm", "failure-modes", ans)
    res = analyse_exports([d], B=B)
    s = res.metrics[res.metrics.metric == "failure_mode_share"].set_index("subset")["point"]
    assert s["mode=ambiguous_case"] == 50.0 and s["mode=clear_model_failure"] == 25.0
    assert s["mode=poor_image_quality"] == 0.0 and s.sum() == pytest.approx(100.0)


def test_visual_necessity_agreed_items_feed_t2(tmp_path: Path) -> None:
    votes = {"q1": ("no", "no"), "q2": ("no", "yes"), "q3": ("yes", "yes"), "q4": ("no", None)}
    ans = [{"reader": r, "case_id": q, "benchmark": "nejm", "answer": v}
           for q, vs in votes.items() for r, v in zip("ab", vs) if v is not None]
    d = _export(tmp_path / "vn", "visual-necessity", ans)
    res = analyse_exports([d], B=B)
    assert res.item_lists["image_required"] == ["q1"]  # q4: one reader only, below min_readers = 2
    files = write_analysis(res, tmp_path / "out")
    assert files["image_required.txt"].read_text() == "q1\n"
    share = res.metrics[res.metrics.metric == "image_required_share"]["point"].iloc[0]
    assert share == pytest.approx(25.0)
    assert "Agreed image-required items" in files["readers-report.html"].read_text()


def test_benchmark_profile_median_and_fleiss(tmp_path: Path) -> None:
    ratings = {("A", "reasoning_complexity"): ("1", "2", "3"), ("A", "visual_detail_required"): ("3", "3", "3"),
               ("B", "reasoning_complexity"): ("1", "1", "2"), ("B", "visual_detail_required"): ("1", "1", "1")}
    ans = [{"reader": r, "case_id": b, "benchmark": b, "scale": ax, "answer": v}
           for (b, ax), vs in ratings.items() for r, v in zip("xyz", vs)]
    d = _export(tmp_path / "bp", "benchmark-profile", ans, scales=("reasoning_complexity", "visual_detail_required"))
    res = analyse_exports([d], B=B)
    t = res.tables["benchmark_profile"].set_index("benchmark")
    assert t.loc["A", "reasoning_complexity"] == 2 and t.loc["B", "reasoning_complexity"] == 1
    fk = res.metrics[(res.metrics.metric == "fleiss_kappa") & (res.metrics.subset == "axis=visual_detail_required")]
    assert fk["point"].iloc[0] == pytest.approx(1.0)  # perfect agreement, two categories used
    fk = res.metrics[(res.metrics.metric == "fleiss_kappa") & (res.metrics.subset == "axis=reasoning_complexity")]
    # A: one rating in each of 1, 2, 3 -> P = 0; B: (2, 1, 0) -> P = 2/6; P_bar = 1/6;
    # p = (3/6, 2/6, 1/6) -> P_e = 14/36; kappa = (1/6 - 14/36) / (1 - 14/36) = -8/22
    assert fk["point"].iloc[0] == pytest.approx(-8 / 22)
    assert "benchmark-profile" in res.figures


def test_cot_rating_means_and_weighted_kappa(tmp_path: Path) -> None:
    ans = [{"reader": r, "item_id": f"i{k}", "case_id": f"i{k}", "scale": "completeness", "answer": v}
           for r, vals in (("a", "1234"), ("b", "1244")) for k, v in enumerate(vals)]
    d = _export(tmp_path / "cot", "cot-rating", ans, scales=("completeness",))
    res = analyse_exports([d], B=B)
    m = res.metrics.set_index(["model", "metric"])
    assert m.loc[("reader:a", "mean:completeness"), "point"] == pytest.approx(2.5)
    kw = res.metrics[res.metrics.metric == "kappa_w"]["point"].iloc[0]
    assert kw == pytest.approx(stats.cohen_kappa_interval([1, 2, 3, 4], [1, 2, 4, 4], weights="quadratic",
                                                          categories=[1, 2, 3, 4, 5], B=10).point)


# ------------------------------------------------------------------------------------------------ creation


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    from medvlm_audit.suites.grounding.embedded import run_demo

    return run_demo(tmp_path_factory.mktemp("demo"), n_cases=60, n_train=300, progress=False,
                    log=lambda *_: None).run_dir


def test_finding_presence_sample_is_balanced_and_deterministic(small_run: Path, tmp_path: Path) -> None:
    a = create_study(small_run, "finding-presence", 18, ["r1"], seed=42, out=tmp_path / "a")
    create_study(small_run, "finding-presence", 18, ["r1"], seed=42, out=tmp_path / "b")
    sa, sb = Study(tmp_path / "a"), Study(tmp_path / "b")
    ia, ib = sa.all_items(), sb.all_items()
    assert list(ia["item_id"]) == list(ib["item_id"]) and a["n_items"] == len(ia)
    assert sa.order(sa.readers()[0]) == sb.order(sb.readers()[0])
    src = pd.DataFrame([json.loads(s) for s in ia["source"]])
    cases = src.drop_duplicates("case_id")
    assert len(cases) == 18
    per_finding = cases["finding"].value_counts()
    assert per_finding.max() - per_finding.min() <= 1  # 9 findings x 2
    assert set(src[src.has_box]["condition"]) == {"original", "target_mask", "irrelevant_mask"}
    assert set(src[~src.has_box]["condition"]) <= {"original"}


def test_box_validation_and_failure_mode_items(small_run: Path, tmp_path: Path) -> None:
    create_study(small_run, "box-validation", 2, ["r1"], out=tmp_path / "bv")
    src = pd.DataFrame([json.loads(s) for s in Study(tmp_path / "bv").all_items()["source"]])
    assert src["finding"].value_counts().max() <= 2 and src["box"].notna().all()
    views = [json.loads(v) for v in Study(tmp_path / "bv").all_items()["view"]]
    assert all(v["question"].endswith(("pneumonia?", "edema?", "nodule?", "atelectasis?", "cardiomegaly?",
                                       "consolidation?", "effusion?", "pneumothorax?", "opacity?")) for v in views)
    assert all(len(v["box"]) == 4 for v in views)
    create_study(small_run, "failure-modes", 3, ["r1"], out=tmp_path / "fm", models=["always-yes"])
    src = pd.DataFrame([json.loads(s) for s in Study(tmp_path / "fm").all_items()["source"]])
    assert (src["model"] == "always-yes").all() and (src["label"] == 0).all() and len(src) == 3
    with pytest.raises(Exception, match="not in the run"):
        create_study(small_run, "failure-modes", 3, ["r1"], out=tmp_path / "x", models=["nope"])


def test_cli_task_options_reach_the_grounding_sampler(small_run: Path, tmp_path: Path) -> None:
    from medvlm_audit.readers.commands import readers_app

    r = CliRunner().invoke(readers_app, ["create", str(small_run), "--task", "finding-presence", "--n", "3",
                                         "--option", "boxed_only=true", "--option", "resolution=512",
                                         "--reader", "a", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    st = Study(tmp_path / "s")
    assert st.meta()["options"] == {"boxed_only": True, "resolution": 512}
    src = pd.DataFrame([json.loads(s) for s in st.all_items()["source"]])
    assert len(src) == 9 and src["has_box"].all() and (src["resolution"] == 512).all()
    with pytest.raises(Exception, match="unknown option 'boxed_only'"):  # an option of another task
        create_study(None, "cot-rating", 1, ["a"], out=tmp_path / "c", boxed_only=True,
                     items=pd.DataFrame({"item_id": ["x"], "question": ["q"], "cot_text": ["t"]}))


def test_mcq_tasks_from_an_items_file(tmp_path: Path) -> None:
    img = tmp_path / "img.png"
    Image.fromarray(np.full((16, 16, 3), 120, np.uint8)).save(img)
    rows = [{"item_id": f"q{i}", "question": f"Question {i}?", "options": ["a", "b", "c"], "images": [str(img)],
             "benchmark": "nejm" if i < 4 else "vqa"} for i in range(7)]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = create_study(None, "visual-necessity", 5, ["a", "b"], out=tmp_path / "vn", items=items)
    assert res["n_items"] == 5
    st = Study(tmp_path / "vn")
    view = json.loads(st.all_items()["view"].iloc[0])
    assert view["options"][0] == ["A", "a"] and view["n_images"] == 1
    res = create_study(None, "benchmark-profile", 2, ["a"], out=tmp_path / "bp", items=items,
                       axes=[("reasoning_complexity", "R?"), ("visual_detail_required", "V?")])
    st = Study(tmp_path / "bp")
    assert res["n_items"] == 2 and [s.name for s in st.spec.scales] == ["reasoning_complexity",
                                                                        "visual_detail_required"]
    assert all(len(json.loads(v)["samples"]) == 2 for v in st.all_items()["view"])


def test_cli_status_and_bad_input(tmp_path: Path) -> None:
    from medvlm_audit.readers.commands import readers_app

    cli = CliRunner()
    items = pd.DataFrame({"item_id": ["a", "b"], "question": ["q", "q"], "cot_text": ["x", "y"]})
    items.to_csv(tmp_path / "cot.csv", index=False)
    r = cli.invoke(readers_app, ["create", "--task", "cot-rating", "--items", str(tmp_path / "cot.csv"), "--n", "2",
                                 "--reader", "a", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    r = cli.invoke(readers_app, ["status", str(tmp_path / "s")])
    assert r.exit_code == 0 and "a\t0/2\t0%" in r.stdout
    r = cli.invoke(readers_app, ["create", "--task", "cot-rating", "--items", str(tmp_path / "cot.csv"),
                                 "--reader", "a", "--out", str(tmp_path / "s")])
    assert r.exit_code == 2 and "already exists" in " ".join(r.output.split())
    bad = items.assign(cot_text=["x", None])
    bad.to_csv(tmp_path / "bad.csv", index=False)
    r = cli.invoke(readers_app, ["create", "--task", "cot-rating", "--items", str(tmp_path / "bad.csv"),
                                 "--reader", "a", "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and "row 1 (item_id 'b') has an empty cot_text" in " ".join(r.output.split())
    assert not (tmp_path / "t" / "study.sqlite").exists()
    r = cli.invoke(readers_app, ["status", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no study store" in " ".join(r.output.split())


def test_export_of_cot_ratings_for_judge_validate(tmp_path: Path) -> None:
    from medvlm_audit.readers.export import export_study

    items = pd.DataFrame({"item_id": ["u1", "u2"], "question": ["q1", "q2"], "cot_text": ["t1", "t2"],
                          "model_name": ["m", "m"], "modification_type": ["tb-rad", "sham"]})
    create_study(None, "cot-rating", 2, ["r1", "r2"], out=tmp_path / "s", items=items)
    st = Study(tmp_path / "s")
    for k, rd in enumerate(st.readers()):
        for iid in st.order(rd):
            for j, sc in enumerate(st.spec.scales):
                st.save_answer(rd, iid, sc.name, str(1 + (j + k) % 5), 2.0)
    files = export_study(tmp_path / "s", tmp_path / "exp")
    recs = [json.loads(x) for x in files["ratings.jsonl"].read_text().splitlines()]
    assert len(recs) == 4 and {r["item_id"] for r in recs} == {"u1", "u2"}
    r1 = next(r for r in recs if r["rater"] == "r1")
    assert (r1["completeness_score"], r1["plausibility_score"], r1["bias_acknowledgment_score"],
            r1["helpfulness_score"], r1["confidence_score"]) == (1, 2, 3, 4, 5)
    assert r1["modification_type"] in ("tb-rad", "sham") and r1["model_name"] == "m"
    ans = pd.read_csv(files["answers.csv"])
    assert len(ans) == 20 and set(ans["scale"]) == {"completeness", "plausibility", "acknowledgment", "helpfulness",
                                                    "confidence"}


def test_rubric_median_is_a_category_with_its_iqr(tmp_path: Path) -> None:
    """Two readers rating 1 and 2 on a 3-point scale: the median is the category 1 (not 1.5), IQR 1-2 (issue 21)."""
    ratings = {("A", "reasoning_complexity"): ("1", "2"), ("B", "reasoning_complexity"): ("3", "3")}
    ans = [{"reader": r, "case_id": b, "benchmark": b, "scale": ax, "answer": v}
           for (b, ax), vs in ratings.items() for r, v in zip("xy", vs)]
    d = _export(tmp_path / "bp2", "benchmark-profile", ans, scales=("reasoning_complexity",))
    res = analyse_exports([d], B=B)
    t = res.tables["benchmark_profile"].set_index("benchmark")
    assert t.loc["A", "reasoning_complexity"] == 1 and t.loc["B", "reasoning_complexity"] == 3
    row = res.metrics[(res.metrics.probe_set == "A") & (res.metrics.subset == "median")].iloc[0]
    assert row.point == 1 and row.note == "IQR 1-2"
    assert stats.ordinal_median_iqr([1, 2, 3, 3]) == (2.0, 1.0, 3.0)


def test_readers_figure_labels_a_model_without_a_difference_n_a_not_nan() -> None:
    from medvlm_audit.suites.grounding.readers import readers_beside_models_figure

    rows = []
    for mod, acc, cgr in (("good", 80.0, 20.0), ("empty", np.nan, np.nan), ("reader:alice", 90.0, 10.0)):
        for metric, p in (("accuracy", acc), ("cgr", cgr)):
            rows.append({"model": mod, "metric": metric, "subset": "reader-sample", "point": p,
                         "ci_low": p - 5, "ci_high": p + 5})
    comp = pd.DataFrame([{"metric": metric, "model_a": mod, "model_b": "reader:alice", "diff": d, "p_adj": np.nan}
                         for metric in ("accuracy", "cgr") for mod, d in (("good", -10.0), ("empty", np.nan))])
    fig = readers_beside_models_figure(pd.DataFrame(rows), comp, ["reader:alice"])
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "n/a" in texts and "-10.0" in texts
    assert not any("nan" in t for t in texts), texts
