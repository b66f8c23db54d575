"""The reports suite end to end: the embedded default (phantom images, IU reference corpus, the n-gram reference
generator), its CLI, the pre-run decoding check, and the reference generator's decoding as operations on its
next-token distribution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from medvlm_audit.errors import ConfigError

pytest.importorskip("sklearn")


def _iu_available() -> bool:
    from medvlm_audit.suites.reports.corpus import CorpusError, torchxrayvision_iu_reports

    try:
        torchxrayvision_iu_reports()
    except CorpusError:
        return False
    return True


needs_iu = pytest.mark.skipif(not _iu_available(), reason="torchxrayvision (IU X-ray reports) is not installed")


def _small_default(out: Path, n_images: int = 24, samples: int = 2) -> dict:
    from medvlm_audit.suites import get_suite

    cfg = get_suite("reports").embedded_config(out, n_images=n_images, samples=samples)
    cfg.update(B=100, n_perm=100)
    return cfg


@pytest.mark.slow
@needs_iu
def test_embedded_default_greedy_collapses_and_sampling_diversifies(tmp_path: Path) -> None:
    from medvlm_audit import api

    res = api.run(_small_default(tmp_path / "run"), progress=False)
    rep = api.report(res.run_dir)
    m = pd.read_csv(rep.parent / "metrics.csv")
    td = m[m["metric"] == "template_diversity"].set_index("subset")["point"]
    assert set(td.index) == {"greedy", "beam4", "t0.3", "t0.7", "top_k", "top_p"}
    # greedy and beam: one report per finding the reader names (at most 10 of 24 images)
    assert td["greedy"] <= 10 / 24 and td["beam4"] <= 10 / 24
    for s in ("t0.7", "top_k", "top_p"):
        assert td[s] >= 0.9 and td[s] >= 2.5 * td["greedy"], (s, td.to_dict())
    vocab = m[m["metric"] == "vocabulary_size"].set_index("subset")["point"]
    assert vocab["top_k"] > 3 * vocab["greedy"]
    # the collapsed strategies erase more sex-associated words (ungated) than sampling at T = 1
    er = m[m["metric"] == "erasure_count_ungated"].set_index("subset")["point"]
    assert er["greedy"] > er["top_k"]
    # shared schema, WAE with intervals, the extra tables
    assert list(m.columns[:13]) == ["suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low",
                                    "ci_high", "n", "unit", "method", "note"]
    w = m[m["metric"] == "wae_pred"]
    # an interval is printed only where one contains the point; the permutation test leads (issue 21)
    shown = w["ci_low"].notna()
    assert len(w) == 6 and ((w["ci_low"] <= w["point"]) & (w["point"] <= w["ci_high"]))[shown].all()
    assert w["note"].str.startswith("permutation test p = ").all()
    for c in ("erasure", "new_bias", "bias_flip", "preservation"):
        assert len(m[m["metric"] == f"{c}_count_headline"]) == 6 and len(m[m["metric"] == f"{c}_count_null"]) == 6
    for f in ("by_strategy.csv", "cad.csv", "cad_greedy.csv", "cad_t0_3.csv", "wae.csv", "diversity.csv"):
        assert (rep.parent / f).is_file(), f
    cad = pd.read_csv(rep.parent / "cad_greedy.csv")
    assert {"word", "z_ref", "z_pred", "z_disp", "p", "q", "category", "category_ungated"} <= set(cad.columns)
    html = rep.read_text()
    assert "CAD scatter" in html and "<svg" in html
    # every report is paired with its image's IU reference report (reference_id): BERTScore with intervals
    bsf = m[m["metric"] == "bertscore_f1"].set_index("subset")
    assert len(bsf) == 6 and ((bsf["ci_low"] <= bsf["point"]) & (bsf["point"] <= bsf["ci_high"])).all()
    assert (bsf.loc["greedy", "n"] == 24) and (bsf.loc["top_k", "n"] == 48)
    assert "Similarity to the reference reports" in html and "BERTScore F1" in html
    # the group is the patient's sex from the case metadata
    tidy = pd.read_parquet(res.results_parquet)
    assert set(tidy["group"]) == {"F", "M"} and tidy["report"].notna().all()


@pytest.mark.slow
@needs_iu
def test_cli_run_suite_reports_offline(tmp_path: Path) -> None:
    from medvlm_audit.cli import app

    run_dir = tmp_path / "cli-run"
    r = CliRunner().invoke(app, ["run", "--suite", "reports", "--run-dir", str(run_dir), "--no-progress",
                                 "--no-report"])
    assert r.exit_code == 0, r.output
    tidy = pd.read_parquet(run_dir / "results.parquet")
    assert len(tidy) == 40 * (2 + 4 * 3)  # 40 phantom images; greedy, beam once; 4 stochastic x 3 samples
    assert set(tidy["strategy"]) == {"greedy", "beam4", "t0.3", "t0.7", "top_k", "top_p"}


@pytest.mark.slow
@needs_iu
def test_a_clinical_metric_scores_each_strategy_against_the_paired_reports(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from test_reports_clinical_chexbert_radgraph import _tiny_chexbert

    from medvlm_audit import api

    _tiny_chexbert(tmp_path / "chexbert")
    cfg = _small_default(tmp_path / "run", n_images=8, samples=1)
    cfg.update(strategies=["greedy", "top_k"], bertscore="off",
               clinical_metrics=[{"name": "chexbert", "path": str(tmp_path / "chexbert")}])
    res = api.run(cfg, progress=False)
    rep = api.report(res.run_dir)
    m = pd.read_csv(rep.parent / "metrics.csv")
    ch = m[m["metric"] == "chexbert_f1_micro_14"].set_index("subset")
    assert set(ch.index) == {"greedy", "top_k"} and (ch["n"] == 8).all()
    assert ((ch["point"] >= 0) & (ch["point"] <= 1)).all() and "chexbert.pth in chexbert" in ch["method"].iloc[0]
    assert str(tmp_path) not in (rep.parent / "metrics.csv").read_text()  # methods name the folder, not its path
    assert "chexbert_f1_micro_14" in rep.read_text() and "bertscore_f1" not in set(m["metric"])
    bad = _small_default(tmp_path / "run2", n_images=4, samples=1)
    bad.update(clinical_metrics=[{"name": "chexbrt", "path": str(tmp_path)}])
    with pytest.raises(ConfigError, match="did you mean chexbert"):
        api.run(bad, progress=False)
    bad.update(clinical_metrics=[{"name": "chexbert", "path": str(tmp_path / "nowhere")}])
    with pytest.raises(ConfigError, match=r"option 'clinical_metrics' \(chexbert\): .*nowhere does not exist"):
        api.run(bad, progress=False)
    bad.update(clinical_metrics=[], bertscore_model=str(tmp_path))
    with pytest.raises(ConfigError, match="option 'bertscore_model': .* holds no config.json"):
        api.run(bad, progress=False)
    assert not (tmp_path / "run2" / "run.sqlite").exists()  # refused before anything was written


def test_cli_exposes_corpus_audit_and_build_iu_reports() -> None:
    from medvlm_audit.cli import app

    r = CliRunner().invoke(app, ["build", "--help"])
    assert r.exit_code == 0 and "iu-reports" in r.output
    r = CliRunner().invoke(app, ["corpus-audit", "--help"])
    assert r.exit_code == 0 and "--reference" in r.output


@pytest.mark.slow
def test_a_decoding_the_backend_cannot_do_fails_before_the_run(tmp_path: Path) -> None:
    from medvlm_audit import api
    from medvlm_audit.store import STORE_FILE

    run_dir = tmp_path / "run"
    cfg = {"suite": "reports", "run_dir": str(run_dir), "probe_sets": ["phantom"], "phantom_images": 4,
           "strategies": ["greedy", "top_k"],
           "models": [{"name": "gpt", "backend": "openai", "model": "m", "base_urls": "http://127.0.0.1:9/v1",
                       "server": "openai"}]}
    with pytest.raises(ConfigError, match=r"option 'strategies'.*'top_k'.*cannot be sent to server: openai"):
        api.run(cfg, progress=False)
    assert not (run_dir / STORE_FILE).exists()
    with pytest.raises(ConfigError, match=r"unknown decoding strategy 'nucleus'"):
        api.resolve_config({**cfg, "strategies": ["nucleus"]})


# ------------------------------------------------------------------------------------------------ the generator


def _toy_lm():
    from medvlm_audit.suites.reports.reference import ReportLM

    texts = ["The heart is normal. The lungs are clear."] * 6 + ["The heart is normal. No effusion."] * 3 + \
            ["There is a small left pleural effusion. The heart is normal."] * 4 + \
            ["Small right pleural effusion. Lungs otherwise clear."] * 2
    return ReportLM(order=3).fit(texts)


def test_greedy_is_the_argmax_path_and_beam_is_a_search():
    from medvlm_audit.suites.reports.reference import detokenize

    lm = _toy_lm()
    assert lm.class_sizes_ == {"normal": 9, "pleural_effusion": 6}
    assert detokenize(lm.words(lm.greedy(["normal"], 50))) == "The heart is normal. The lungs are clear."
    g = lm.greedy(["pleural_effusion"], 50)
    assert detokenize(lm.words(g)) == "There is a small left pleural effusion. The heart is normal."
    # the greedy path's every token is the argmax of the distribution given its prefix
    for i, w in enumerate(g):
        assert int(np.argmax(lm.step_distribution(g[:i], ["pleural_effusion"]))) == w
    b = lm.beam(["normal"], 50, 4)
    logp = lambda seq: sum(np.log(lm.step_distribution(seq[:i], ["normal"])[w])
                           for i, w in enumerate(list(seq) + [1]))
    g0 = lm.greedy(["normal"], 50)
    assert logp(b) / (len(b) + 1) >= logp(g0) / (len(g0) + 1) - 1e-9


def test_sampling_is_seeded_and_diversifies():
    from medvlm_audit.suites.reports.reference import filter_distribution

    lm = _toy_lm()
    draws = {tuple(lm.sample(["normal"], 50, 1.0, None, 1.0, np.random.default_rng(i))) for i in range(40)}
    assert len(draws) > 3
    same = [lm.sample(["normal"], 50, 1.0, None, 1.0, np.random.default_rng(5)) for _ in range(2)]
    assert same[0] == same[1]
    # top-p as transformers: the token that crosses the mass is kept; top-k keeps k; low T sharpens
    assert filter_distribution(np.array([0.5, 0.3, 0.2]), 1.0, None, 0.7).round(3).tolist() == [0.625, 0.375, 0.0]
    assert np.count_nonzero(filter_distribution(np.array([0.4, 0.3, 0.2, 0.1]), 1.0, 2, 1.0)) == 2
    q = filter_distribution(np.array([0.6, 0.4]), 0.5, None, 1.0)
    assert q[0] == pytest.approx(0.36 / 0.52)


def test_generator_refuses_beam_sampling_and_reads_only_pixels():
    from medvlm_audit.models.base import Decoding
    from medvlm_audit.suites.reports.reference import ReportGenerator

    m = ReportGenerator.__new__(ReportGenerator)
    m.name = "g"
    with pytest.raises(ConfigError, match="beam sampling"):
        m.check_decoding(Decoding(num_beams=4, temperature=0.7))
    m.check_decoding(Decoding(num_beams=4))
    m.check_decoding(Decoding(temperature=1.0, top_k=50))
