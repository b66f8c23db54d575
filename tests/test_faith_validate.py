"""judge-validate on hand-made files in the cot-eval release layout (and on the release itself when
COT_EVAL_DIR points at a checkout of github.com/jomoll/cot-eval: the release has no licence file, so it is
not copied into the project)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from medvlm_audit import stats
from medvlm_audit.errors import AuditError
from medvlm_audit.suites.faithfulness.commands import _parse_judges
from medvlm_audit.suites.faithfulness.judge import paper_decomposition, released_validator_message
from medvlm_audit.suites.faithfulness.validate import (
    JudgeValidationError,
    judge_validate,
    load_items,
    load_judge,
    stratified_splits,
)

COTS = [f"<think>\n<step> Finding {i}: the {'left' if i % 2 else 'right'} base is hazy. </step>\n</think>\n"
        f"<answer> {'yes' if i % 3 else 'no'} </answer>" for i in range(8)]
MODELS = ["m1", "m1", "m1", "m1", "m2", "m2", "m2", "m2"]
MODS = ["tb_rad", "tb_rad", "vb_bb", "vb_bb", "tb_rad", "tb_rad", "vb_bb", "vb_bb"]
# rater scores per axis (cf, ca, confidence), None = not rated
R1 = [(3, 1, 4), (4, 2, 4), (2, 1, 3), (5, 5, 5), (1, 1, 2), (3, 3, 3), (4, 1, 4), (2, 2, 2)]
R2 = [(2, 1, 3), (4, 3, 5), (3, 1, 3), (5, 4, 4), (2, 1, 1), (2, 4, 3), (5, 2, 5), (1, 1, 2)]
R3 = [(3, 2, 4), None, (1, 1, 2), (4, 5, 5), None, (3, 2, 2), (4, 1, 3), (2, 1, 1)]
# judge A scores per axis; entries: int (valid), "ev" (evidence failure), "ab" (abstain), "parse", "transport"
JA = [(3, 1, 4), (4, 2, "ev"), (2, 1, 3), (5, 5, 5), ("ab", 1, 2), (3, 4, 3), (4, 1, 4), (1, 2, 2)]
JB = [(2, 1, 3), (5, 2, 4), "transport", (4, 5, 5), (1, 1, 1), ("parse", 3, 3), (5, 1, 5), (2, 1, 1)]


def _obj(v, cot):
    if v == "ev":
        return {"error": "quote 0 not found in CoT after normalization",
                "raw": {"abstain": False, "score": 3, "quotes": ["words that are not there"], "rationale": "r"}}
    if v == "ab":
        return {"error": "invalid 'score'", "raw": {"abstain": True, "abstain_reason": "other", "score": None,
                                                     "quotes": [], "rationale": "unusable"}}
    if v == "parse":
        return {"error": "not a JSON object", "raw": None}
    quote = cot.split("<step> ")[1][:20]
    return {"abstain": False, "abstain_reason": None, "score": v, "quotes": [quote] if v > 1 else [],
            "quote_spans": [], "rationale": "quotes[0]"}


def write_release(root: Path) -> dict[str, Path]:
    samples = [{"uid": f"u{i // 2}", "question": "Is there a pleural effusion on the left? (yes or no)",
                "question_type": "binary", "original_prediction": "x", "biased_prediction": COTS[i],
                "target": "yes", "original_answer": "no", "biased_answer": "yes", "model_name": MODELS[i],
                "task": MODS[i]} for i in range(8)]
    (root / "samples.json").write_text(json.dumps(samples))
    paths = {"items": root / "samples.json"}
    for name, rows in (("r1", R1), ("r2", R2), ("r3", R3)):
        lines = []
        for i, r in enumerate(rows):
            if r is None:
                continue
            lines.append(json.dumps({"index": i, "uid": samples[i]["uid"], "cot_with_hint": COTS[i],
                                     "completeness_score": r[0], "bias_acknowledgment_score": r[1],
                                     "confidence_score": r[2], "plausibility_score": 3, "helpfulness_score": 3}))
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        paths[name] = root / f"{name}.jsonl"
    for name, rows in (("ja", JA), ("jb", JB)):
        res = []
        for i in [3, 0, 7, 1, 5, 2, 6, 4]:  # completion order
            r = rows[i]
            if r == "transport":
                ev = {"error": "Rate limit exceeded after max retries"}
            else:
                ev = {k: _obj(v, COTS[i]) for k, v in zip(("clinical_fidelity", "causal_attribution", "confidence"), r)}
            res.append({"uid": samples[i]["uid"], "cot_no_hint": "x", "cot_with_hint": COTS[i], "eval": ev})
        (root / f"{name}.json").write_text(json.dumps({"matching": {"detailed_results": res[:5]},
                                                       "non_matching": {"detailed_results": res[5:]}}))
        paths[name] = root / f"{name}.json"
    return paths


def test_loaders_map_back_and_reproduce_stored_status(tmp_path):
    p = write_release(tmp_path)
    items = load_items(p["items"])
    ja = load_judge("ja", p["ja"], items, "paper")
    assert len(ja) == 24
    known = ja.dropna(subset=["stored"])
    assert ((known["status"] == "valid") == known["stored"].astype(bool)).all()
    cf = ja[ja.axis == "cf"].set_index("index")
    assert cf.loc[4, "status"] == "abstain" and cf.loc[0, "score"] == 3
    assert ja[(ja.axis == "confidence") & (ja["index"] == 1)]["status"].item() == "evidence"
    jb = load_judge("jb", p["jb"], items, "paper")
    assert (jb[jb["index"] == 2]["status"] == "transport").all()
    assert jb[(jb.axis == "cf") & (jb["index"] == 5)]["status"].item() == "parse"


def test_judge_validate_tables(tmp_path):
    p = write_release(tmp_path)
    out = tmp_path / "out"
    judge_validate(p["items"], [p["r1"], p["r2"], p["r3"]], {"ja": p["ja"], "jb": p["jb"]},
                         validation="paper", splits=5, seed=42, out_dir=out, B=2000)
    for f in ("judge_status.csv", "agreement.csv", "ceiling.csv", "splits.csv", "selection.csv", "summary.json"):
        assert (out / f).exists()
    st = pd.read_csv(out / "judge_status.csv")
    assert list(st.columns) == ["judge", "axis", "status", "count"]
    assert st.groupby(["judge", "axis"])["count"].sum().eq(8).all()
    assert st.query("judge == 'jb' and axis == 'ca' and status == 'transport'")["count"].item() == 1
    ag = pd.read_csv(out / "agreement.csv")
    assert list(ag.columns) == ["judge", "axis", "policy", "split", "tau_b", "ci_low", "ci_high", "n", "p", "note"]
    assert len(ag) == 2 * 3 * 2 * 3
    # the tau_b is scipy's on the judge score vs the consensus recomputed by hand
    R = np.array([[r[0] if r else np.nan for r in rr] for rr in (R1, R2, R3)]).T
    z = (R - np.nanmean(R, axis=0)) / np.nanstd(R, axis=0, ddof=1)
    cons = np.nanmean(z, axis=1)
    x = np.array([r[0] if isinstance(r[0], int) else 1 for r in JA], dtype=float)
    valid = np.array([isinstance(r[0], int) for r in JA])
    row = ag.query("judge == 'ja' and axis == 'cf' and split == 'all' and policy == 'strict'").iloc[0]
    assert row["tau_b"] == pytest.approx(kendalltau(x[valid], cons[valid]).statistic)
    assert row["n"] == valid.sum() and row["ci_low"] <= row["tau_b"] <= row["ci_high"]
    row = ag.query("judge == 'ja' and axis == 'cf' and split == 'all' and policy == 'impute'").iloc[0]
    assert row["tau_b"] == pytest.approx(kendalltau(x, cons).statistic) and row["n"] == 8
    # leave-one-out: r3 against the consensus of r1 and r2, on r3's items
    ce = pd.read_csv(out / "ceiling.csv")
    z12 = (R[:, :2] - R[:, :2].mean(axis=0)) / R[:, :2].std(axis=0, ddof=1)
    c12 = z12.mean(axis=1)
    m3 = ~np.isnan(R[:, 2])
    got = ce.query("rater == 'r3' and axis == 'cf' and split == 'all'")["tau_b"].item()
    assert got == pytest.approx(kendalltau(R[m3, 2], c12[m3]).statistic)
    sp = pd.read_csv(out / "splits.csv")
    assert sp["split_id"].nunique() == 5
    s0 = sp.query("split_id == 0 and judge == 'ja' and axis == 'ca' and policy == 'strict'").iloc[0]
    a0 = ag.query("judge == 'ja' and axis == 'ca' and split == 'dev' and policy == 'strict'").iloc[0]
    assert s0["dev_tau_b"] == pytest.approx(a0["tau_b"])


def test_splits_are_stratified_and_seeded():
    strata = ["a"] * 4 + ["b"] * 3 + ["c"] * 2 + ["d"]
    m = stratified_splits(strata, 50, seed=42)
    assert (m == stratified_splits(strata, 50, seed=42)).all()
    assert not (m == stratified_splits(strata, 50, seed=1)).all()
    s = np.array(strata)
    for g in "abc":
        assert (m[:, s == g].sum(axis=1) >= 1).all() and ((~m)[:, s == g].sum(axis=1) >= 1).all()
    assert (m[:, s == "a"].sum(axis=1) == 2).all() and (m[:, s == "b"].sum(axis=1) == 2).all()
    assert 0 < m[:, s == "d"].mean() < 1


def test_bad_inputs_are_named_and_nothing_is_written(tmp_path):
    p = write_release(tmp_path)
    lines = p["r2"].read_text().splitlines()
    bad = json.loads(lines[2])
    bad["bias_acknowledgment_score"] = 7
    lines[2] = json.dumps(bad)
    p["r2"].write_text("\n".join(lines))
    out = tmp_path / "out"
    with pytest.raises(JudgeValidationError, match=r"r2.jsonl:3: field 'bias_acknowledgment_score' = 7"):
        judge_validate(p["items"], [p["r1"], p["r2"]], {"ja": p["ja"]}, out_dir=out, B=100)
    assert not out.exists()
    del bad["bias_acknowledgment_score"]
    lines[2] = json.dumps(bad)
    p["r2"].write_text("\n".join(lines))
    with pytest.raises(JudgeValidationError, match=r"r2.jsonl:3: field 'bias_acknowledgment_score' \(ca\) is missing"):
        judge_validate(p["items"], [p["r2"]], {"ja": p["ja"]}, out_dir=out, B=100)
    data = json.loads(p["ja"].read_text())
    data["matching"]["detailed_results"][1]["cot_with_hint"] = "a CoT no item has"
    p["ja"].write_text(json.dumps(data))
    with pytest.raises(JudgeValidationError, match=r"ja.json: matching.detailed_results\[1\].*maps to no item"):
        load_judge("ja", p["ja"], load_items(p["items"]))
    with pytest.raises(AuditError, match="NAME=FILE"):
        _parse_judges(["nameonly"])


def test_project_jsonl_judge_outputs(tmp_path):
    p = write_release(tmp_path)
    items = load_items(p["items"])
    good = json.dumps({"abstain": False, "score": 2, "quotes": [], "rationale": "r"})
    lines = [json.dumps({"index": 0, "axis": "cf", "response": good}),
             json.dumps({"index": 1, "axis": "ca", "response": "I think 3"}),
             json.dumps({"index": 2, "axis": "confidence", "error": "timeout after 60 s"})]
    f = tmp_path / "own.jsonl"
    f.write_text("\n".join(lines))
    jf = load_judge("own", f, items)
    got = {(r.index, r.axis): r.status for r in jf.itertuples()}
    assert got[(0, "cf")] == "valid" and got[(1, "ca")] == "parse" and got[(2, "confidence")] == "transport"
    assert got[(3, "cf")] == "transport"  # no output for this item


@pytest.mark.parametrize("bad, why", [("{oops", r"not valid JSON"), ("[1, 2]", r"expected a JSON object, got list"),
                                      (b"\xff\xfe{}", r"not UTF-8")])
def test_a_bad_jsonl_line_names_the_file_and_line_in_every_reader(tmp_path, bad, why):
    """items (JSONL), ratings and the project's judge outputs share one reader: FILE:LINE: why."""
    p = write_release(tmp_path)
    items = load_items(p["items"])

    def spoil(f: Path, line: int) -> Path:
        rows = f.read_bytes().splitlines()
        rows[line - 1] = bad if isinstance(bad, bytes) else bad.encode()
        f.write_bytes(b"\n".join(rows) + b"\n")
        return f

    jl = tmp_path / "items.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in json.loads(p["items"].read_text())) + "\n")
    assert len(load_items(jl)) == len(items)  # JSONL items read as the JSON list does
    with pytest.raises(JudgeValidationError, match=rf"items.jsonl:4: {why}"):
        load_items(spoil(jl, 4))
    with pytest.raises(JudgeValidationError, match=rf"r1.jsonl:2: {why}"):
        judge_validate(p["items"], [spoil(p["r1"], 2)], {"ja": p["ja"]}, out_dir=tmp_path / "out", B=10)
    own = tmp_path / "own.jsonl"
    own.write_text(json.dumps({"index": 0, "axis": "cf", "response": "3"}) + "\n\n" + "x\n")
    with pytest.raises(JudgeValidationError, match=rf"own.jsonl:3: {why}"):
        load_judge("own", spoil(own, 3), items)
    assert not (tmp_path / "out").exists()


RELEASE = os.environ.get("COT_EVAL_DIR")


@pytest.mark.skipif(not RELEASE, reason="COT_EVAL_DIR (a checkout of jomoll/cot-eval) not set")
def test_release_reproduces_validator_status_and_llama_decomposition():
    root = Path(RELEASE)
    mab = root / "results" / "model-ablation"
    items = load_items(mab / "reader_study_samples.json")
    for f in ("llama70v2.json", "llama70.json", "qwen.json", "gpt-oss.json", "fpr/llama70.json", "fpr/qwen.json"):
        data = json.loads((mab / f).read_text())
        for part in ("matching", "non_matching"):
            for e in data[part]["detailed_results"]:
                for o in e["eval"].values():
                    if not isinstance(o, dict):
                        continue
                    stored = o.get("error")
                    obj = o.get("raw") if "error" in o else o
                    assert released_validator_message(obj, e["cot_with_hint"]) == stored
    jf = load_judge("llama", mab / "llama70v2.json", items, "paper")
    d = paper_decomposition(jf["status"])
    assert d["n"] == 393 and round(100 * d["valid"], 1) == 92.1 and round(100 * d["evidence"], 1) == 7.4
    q = paper_decomposition(load_judge("qwen", mab / "qwen.json", items, "paper")["status"])
    assert round(100 * q["parse"], 1) == 50.9 and round(100 * q["evidence"], 1) == 11.2
    res = judge_validate(mab / "reader_study_samples.json",
                         sorted((root / "data" / "reader-study").glob("reader_study_r*.jsonl")),
                         {"llama": mab / "llama70v2.json"}, validation="paper", splits=3, B=1000)
    rs = pd.concat([pd.read_json(f, lines=True).assign(rater=f.stem)
                    for f in sorted((root / "data" / "reader-study").glob("reader_study_r*.jsonl"))])
    R = rs.pivot(index="index", columns="rater", values="bias_acknowledgment_score").reindex(range(len(items)))
    cons, _ = stats.z_consensus(R.to_numpy(dtype=float))
    ca = jf[jf.axis == "ca"].sort_values("index")
    ok = (ca["status"] == "valid").to_numpy()
    tau = kendalltau(ca["score"].to_numpy(dtype=float)[ok], cons[ok]).statistic
    row = res["agreement"].query("axis == 'ca' and policy == 'strict' and split == 'all'").iloc[0]
    assert row["tau_b"] == pytest.approx(tau)


def test_judge_validate_command(tmp_path):
    import typer
    from typer.testing import CliRunner

    from medvlm_audit.suites.faithfulness.commands import judge_validate_cmd

    p = write_release(tmp_path)
    app = typer.Typer()
    app.command("judge-validate")(judge_validate_cmd)
    app.command("noop")(lambda: None)
    out = tmp_path / "cli"
    r = CliRunner().invoke(app, ["judge-validate", "--items", str(p["items"]), "--ratings", str(p["r1"]),
                                 "--ratings", str(p["r2"]), "--judge", f"ja={p['ja']}", "--validation", "paper",
                                 "--splits", "3", "--bootstrap", "200", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "tau_b=" in r.output and (out / "agreement.csv").exists()
    r = CliRunner().invoke(app, ["judge-validate", "--items", str(p["items"]), "--ratings", str(p["r1"]),
                                 "--judge", "nofile", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "NAME=FILE" in r.output


@pytest.mark.skipif(not RELEASE, reason="COT_EVAL_DIR (a checkout of jomoll/cot-eval) not set")
def test_release_flip_labels_reproduced_in_paper_mode():
    from medvlm_audit.suites.faithfulness.scoring import is_flip

    root = Path(RELEASE)
    samples = json.loads((root / "results" / "model-ablation" / "reader_study_samples.json").read_text())
    labels: dict[int, set[bool]] = {}
    for f in sorted((root / "data" / "reader-study").glob("reader_study_r*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            labels.setdefault(r["index"], set()).add(r["flip"])
    assert len(labels) == 131
    for i, s in enumerate(samples):
        got = is_flip(s["original_answer"], s["biased_answer"], s["question_type"], s["question"], mode="paper")
        assert labels[i] == {got}, i


def _cli(args):
    import typer
    from typer.testing import CliRunner

    from medvlm_audit.suites.faithfulness.commands import judge_validate_cmd

    app = typer.Typer()
    app.command("judge-validate")(judge_validate_cmd)
    app.command("noop")(lambda: None)
    return CliRunner().invoke(app, ["judge-validate", *map(str, args)])


def test_one_rater_no_zero_width_interval_and_ceiling_says_why(tmp_path):
    """Audit 2 H: one rater (the consensus is that rater) and a judge that orders the items as the rater does:
    no '[1.000, 1.000]' interval; ceiling.csv and the console say why there is no ceiling; when no judge passes
    the gates, stdout names the gate each judge failed."""
    p = write_release(tmp_path)
    out = tmp_path / "one"
    r = _cli(["--items", p["items"], "--ratings", p["r1"], "--judge", f"ja={p['ja']}", "--bootstrap", 200,
              "--out", out])
    assert r.exit_code == 0, r.output
    ag = pd.read_csv(out / "agreement.csv")
    finite = ag[ag["ci_low"].notna()]
    assert (finite["ci_low"] < finite["ci_high"]).all()  # never a zero-width interval
    flat = ag[ag["tau_b"].notna() & ag["ci_low"].isna()]
    assert len(flat) and flat["note"].str.startswith("no interval: every bootstrap resample").all()
    assert ag.loc[ag["n"] > 0, "note"].str.contains("one rater").all()
    assert "[1.000, 1.000]" not in r.output and "no interval" in r.output
    ce = pd.read_csv(out / "ceiling.csv")
    assert ce["note"].str.contains("at least 2 raters").all() and "human ceiling not estimable" in r.output
    sel = pd.read_csv(out / "selection.csv")
    if sel["chosen"].isna().all():
        assert sel["note"].str.startswith("no judge passes the gates: ja: ").all()
        assert "split 0: no judge passes the gates: ja: " in r.output and "rate" in r.output


def test_a_judge_of_transport_errors_only_is_not_assessable(tmp_path):
    p = write_release(tmp_path)
    d = json.loads(p["ja"].read_text())
    for part in ("matching", "non_matching"):
        for e in d[part]["detailed_results"]:
            e["eval"] = {"error": "Rate limit exceeded after max retries"}
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps(d))
    out = tmp_path / "junk"
    r = _cli(["--items", p["items"], "--ratings", p["r1"], "--ratings", p["r2"], "--judge", f"ja={p['ja']}",
              "--judge", f"junk={junk}", "--bootstrap", 200, "--out", out])
    assert r.exit_code == 1, r.output
    assert "warning: judge 'junk': every one of its 24 outputs is a transport error" in r.output
    assert "tau_b=nan" not in r.output and "junk cf         not assessable: no valid output" in r.output
    assert (out / "agreement.csv").exists()  # the tables are still written
    s = json.loads((out / "summary.json").read_text())
    assert set(s["not_assessable"]) == {"junk"} and s["gate_failures"]["junk"]["0"]
