"""Report-audit statistics (stats.py "report audit" block) against hand-computed values and planted corpora."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medvlm_audit import stats
from medvlm_audit.suites.reports.baselines import male_female_token_ratio, weat
from medvlm_audit.suites.reports.cad import cad, cad_category
from medvlm_audit.suites.reports.diversity import (
    self_bleu,
    semantic_diversity,
    template_diversity,
    type_token_ratio,
)
from medvlm_audit.suites.reports.surface import corpus_bleu, rouge_scores
from medvlm_audit.suites.reports.terms import report_count_matrices, report_tokens
from medvlm_audit.suites.reports.wae import corpus_resample_wae, wae, wae_table


def test_tokens_drop_stop_words_and_keep_hyphenated_words():
    assert report_tokens("There is NO pleural effusion; the x-ray is clear.") == [
        "pleural", "effusion", "x-ray", "clear"]
    assert report_tokens("The heart", stop_words=None) == ["the", "heart"]


def test_count_matrices_share_a_sorted_vocabulary():
    (A, B), vocab = report_count_matrices(["effusion and effusion", "heart"], ["mastectomy heart"])
    assert vocab == ["effusion", "heart", "mastectomy"]
    assert A.toarray().tolist() == [[2, 0, 0], [0, 1, 0]]
    assert B.toarray().tolist() == [[0, 1, 1]]


def test_word_association_and_cad_equal_hand_computation():
    # reference: F counts [4, 1], M counts [1, 3]; predictions: F [2, 2], M [2, 2]; alpha = 0.5, V = 2
    a = 0.5
    nf, nm = 5 + 2 * a, 4 + 2 * a
    s_ref0 = math.log((4 + a) / nf) - math.log((1 + a) / nm)
    v_ref0 = 1 / (4 + a) + 1 / (1 + a)
    s_pred0 = math.log((2 + a) / (4 + 2 * a)) - math.log((2 + a) / (4 + 2 * a))  # = 0
    v_pred0 = 2 / (2 + a)
    out = cad([4, 1], [1, 3], [2, 2], [2, 2], alpha=a)
    assert out["s_ref"][0] == pytest.approx(s_ref0)
    assert out["z_ref"][0] == pytest.approx(s_ref0 / math.sqrt(v_ref0))
    assert out["z_pred"][0] == pytest.approx(0.0)
    zd0 = (s_pred0 - s_ref0) / math.sqrt(v_pred0 + v_ref0)
    assert out["z_disp"][0] == pytest.approx(zd0)
    p0 = math.erfc(abs(zd0) / math.sqrt(2))
    assert out["p"][0] == pytest.approx(p0)
    # BH with m = 2: q = min over ranks of m p / r
    p = sorted(out["p"])
    assert sorted(out["q"]) == pytest.approx([min(2 * p[0], p[1]), p[1]])


def test_categories_are_the_four_disjoint_rules():
    z_ref = [2.5, -2.5, 0.5, 0.0, 1.2, -1.5, 1.5, 1.5, 2.0]
    z_pred = [0.9, 0.0, 1.0, -3.0, -1.0, -1.0, 1.0, 0.5, 0.5]
    assert cad_category(z_ref, z_pred).tolist() == [
        "erasure", "erasure", "new_bias", "new_bias", "bias_flip", "preservation", "preservation", "none",
        "none"]  # last: |z_ref| = 2 is not > z_strong


def test_gate_marks_stable_words():
    out = cad([50, 50], [5, 50], [0, 5], [0, 5], alpha=0.1)
    assert out["category_ungated"][0] == "erasure"
    # never written: |z_disp| < 0.9, so q >= 0.05; gated `absent` (not generated), not `stable` (issue 21, defect 6)
    assert out["category"][0] == "absent" and out["category"][1] == "stable"
    assert abs(out["z_disp"][0]) < 0.9


def test_wae_hand_computed():
    zd = np.array([1.0, -2.0, 3.0])
    assert wae(zd, [2, 1, 1]) == pytest.approx((2 * 1 + 4 + 9) / 4)
    assert wae(zd, [2, 1, 1], mask=[False, True, True]) == pytest.approx((4 + 9) / 2)
    assert math.isnan(wae(zd, [0, 0, 0]))


def test_wae_table_groups_follow_reference_sign():
    cf_r, cm_r, cf_p, cm_p = [30, 2, 10], [2, 30, 10], [10, 10, 10], [10, 10, 10]
    t = wae_table(cf_r, cm_r, cf_p, cm_p, alpha=0.1)
    out = cad(cf_r, cm_r, cf_p, cm_p, alpha=0.1)
    zd, zr = out["z_disp"], out["z_ref"]
    w_pred = np.array([20, 20, 20.0])
    assert t["pred_all"] == pytest.approx(float((w_pred * zd**2).sum() / w_pred.sum()))
    f = zr > 0
    assert f.tolist() == [True, False, False] or f.tolist() == [True, False, True]
    assert t["pred_F"] == pytest.approx(float((w_pred[f] * zd[f] ** 2).sum() / w_pred[f].sum()))
    m = zr < 0
    assert t["ref_M"] == pytest.approx(float(((np.array([32, 32, 20.0]) * zd**2)[m]).sum() / np.array([32, 32, 20.0])[m].sum()))
    assert t["pred_delta"] == pytest.approx(t["pred_F"] - t["pred_M"])


def test_diversity_hand_computed():
    texts = ["No acute disease.", "no acute  disease.", "Small left effusion.", "Heart is normal."]
    assert template_diversity(texts) == pytest.approx(3 / 4)
    # tokens: no acute disease no acute disease small left effusion heart is normal -> 12 tokens, 9 types
    assert type_token_ratio(texts) == pytest.approx(9 / 12)
    assert semantic_diversity(np.eye(3)) == pytest.approx(1.0)
    assert semantic_diversity([[1.0, 0.0]], weights=[5]) == pytest.approx(0.0)


def test_self_bleu_equals_sacrebleu_sentence_scores():
    from sacrebleu.metrics import BLEU

    texts = ["the heart is normal in size", "the heart is enlarged", "no pleural effusion or pneumothorax",
             "the heart is normal in size", "small left pleural effusion", "lungs are clear"]
    b = BLEU(effective_order=True)
    expected = np.mean([b.sentence_score(h, texts[:i] + texts[i + 1:]).score for i, h in enumerate(texts)]) / 100
    assert self_bleu(texts) == pytest.approx(expected, abs=1e-12)
    assert self_bleu(["only one"]) != self_bleu(["only one"])  # nan


def test_surface_metrics():
    assert corpus_bleu(["the heart is normal"], ["the heart is normal"]) == pytest.approx(1.0)
    r = rouge_scores(["heart normal"], ["heart size normal"])
    assert r["rouge1"] == pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))
    assert r["rougeL"] == pytest.approx(0.8)


def test_weat_and_token_ratio_hand_computed():
    S, es = weat([[1, 0], [1, 1]], [[0, 1]], [[1, 0]], [[0, 1]])
    s = [1.0, 0.0, -1.0]  # s(x1), s(x2) (cos 45 deg to both), s(y)
    assert S == pytest.approx(s[0] + s[1] - s[2])
    assert es == pytest.approx((0.5 - (-1.0)) / np.std(s, ddof=1))
    assert male_female_token_ratio([10, 20, 30, 10], [True, True, False, False]) == pytest.approx(20 / 15)


def _planted(n_per_group: int, rng: np.random.Generator):
    """Reference with planted F terms (mastectomy, breast: 30 % of F reports, 3 % of M) and M terms (aicd,
    prostate: the mirror image), and neutral text identical across groups (every other word has z_ref = 0)."""
    neutral = ["heart size normal", "lungs clear", "pleural effusion small", "pneumothorax absent",
               "osseous structures intact", "nodule right apex"]
    base = [" ".join(rng.choice(neutral, size=3)) for _ in range(n_per_group)]
    f_texts, m_texts = list(base), list(base)
    k, k_other = n_per_group * 3 // 10, n_per_group * 3 // 100
    for i in range(k):
        f_texts[i] += " mastectomy breast"
        m_texts[i] += " aicd prostate"
    for i in range(k, k + k_other):
        f_texts[i] += " aicd prostate"
        m_texts[i] += " mastectomy breast"
    for i in range(k + k_other, 2 * k + k_other):  # present in the reference, not sex-associated
        f_texts[i] += " consolidation atelectasis"
        m_texts[i] += " consolidation atelectasis"
    texts = f_texts + m_texts
    female = np.r_[np.ones(n_per_group, bool), np.zeros(n_per_group, bool)]
    return texts, female, neutral


def _audit(ref_texts, ref_f, pred_texts, pred_f):
    (A, B), vocab = report_count_matrices(ref_texts, pred_texts)
    cf = lambda C, f: np.asarray(C[np.flatnonzero(f)].sum(0)).ravel()
    out = cad(cf(A, ref_f), cf(A, ~ref_f), cf(B, pred_f), cf(B, ~pred_f))
    return vocab, out, (A, B)


def test_collapsed_predictions_erase_exactly_the_planted_terms():
    rng = np.random.default_rng(1)
    ref, rf, _ = _planted(200, rng)
    # template collapse: two templates assigned identically in both groups (no sex signal at all)
    templates = ["heart size normal lungs clear", "heart size normal lungs clear breast"]
    pred = [templates[i % 2] for i in range(200)] * 2
    pf = rf.copy()
    vocab, out, _ = _audit(ref, rf, pred, pf)
    ung = {w for w, c in zip(vocab, out["category_ungated"]) if c == "erasure"}
    assert ung == {"mastectomy", "breast", "aicd", "prostate"}
    assert {w for w, c in zip(vocab, out["category_ungated"]) if c not in ("erasure", "none")} == set()
    # gated: only the word the model still writes (neutrally) is significantly displaced; the never-written
    # planted terms cannot pass the gate (DESIGN.md: ungated counts are the erasure headline)
    gated = {w for w, c in zip(vocab, out["category"]) if c == "erasure"}
    assert gated == {"breast"}


def test_sampled_predictions_show_exactly_the_planted_new_bias():
    rng = np.random.default_rng(2)
    ref, rf, _ = _planted(300, rng)
    # a sampler that keeps every reference association but invents two new ones (symmetric, so the token totals
    # stay equal): consolidation stays in F reports only, atelectasis in M reports only
    n = 300
    pred, kept = [], {"F": 0, "M": 0}
    for i, t in enumerate(ref):
        g, drop = ("F", " atelectasis") if i < n else ("M", " consolidation")
        if drop in t:
            kept[g] += 1
            if kept[g] > 9:  # a tenth of the other group's mentions remain
                t = t.replace(drop, "")
        pred.append(t)
    vocab, out, _ = _audit(ref, rf, pred, rf)
    cat = dict(zip(vocab, out["category_ungated"]))
    assert {w for w, c in cat.items() if c == "new_bias"} == {"consolidation", "atelectasis"}
    assert {w for w, c in cat.items() if c == "preservation"} == {"mastectomy", "breast", "aicd", "prostate"}
    assert {w for w, c in cat.items() if c in ("erasure", "bias_flip")} == set()
    gated = dict(zip(vocab, out["category"]))
    assert {w for w, c in gated.items() if c == "new_bias"} == {"consolidation", "atelectasis"}


def test_resampling_is_counts_based_deterministic_and_thread_independent():
    rng = np.random.default_rng(3)
    ref, rf, _ = _planted(120, rng)
    pred = ["heart size normal lungs clear", "heart size normal mastectomy aicd"] * 120  # sex-blind templates
    (A, B), _ = report_count_matrices(ref, pred)
    d1 = corpus_resample_wae(A, rf, B, rf, B=200, n_perm=200, seed=0, workers=1)
    d2 = corpus_resample_wae(A, rf, B, rf, B=200, n_perm=200, seed=0, workers=2)
    for kind in ("bootstrap", "permutation"):
        for k in d1[kind]:
            np.testing.assert_array_equal(d1[kind][k], d2[kind][k])
    cf = lambda C, f: np.asarray(C[np.flatnonzero(f)].sum(0)).ravel()
    point = wae_table(cf(A, rf), cf(A, ~rf), cf(B, rf), cf(B, ~rf))
    # the planted associations are real and the templates erase them: WAE_ref lies above the label-permuted null
    assert stats.permutation_p_upper(point["ref_all"], d1["permutation"]["ref_all"]) < 0.05
    lo, hi = stats.percentile_interval(d1["bootstrap"]["ref_all"])
    assert lo < point["ref_all"] < hi


def test_bootstrap_draw_equals_the_statistic_of_resampled_reports():
    """One bootstrap draw from multiplicities equals wae_table on the explicitly resampled (re-tokenised) corpus."""
    rng = np.random.default_rng(4)
    ref, rf, _ = _planted(40, rng)
    pred = [ref[i] if i % 3 else "heart size normal" for i in range(len(ref))]
    (A, B), vocab = report_count_matrices(ref, pred)
    draws = corpus_resample_wae(A, rf, B, rf, B=1, n_perm=1, seed=7, workers=1)
    # replay the kernel's draws: block 0 of SeedSequence(7), F then M of the reference, then of the predictions
    g = np.random.default_rng(np.random.SeedSequence(7).spawn(1)[0])
    picks = []
    for f in (rf, rf):
        for idx in (np.flatnonzero(f), np.flatnonzero(~f)):
            picks.append(idx[g.integers(0, idx.shape[0], size=(1, idx.shape[0]))[0]])
    r_idx = np.r_[picks[0], picks[1]]
    p_idx = np.r_[picks[2], picks[3]]
    ref_b = [ref[i] for i in r_idx]
    pred_b = [pred[i] for i in p_idx]
    (A2, B2), vocab2 = report_count_matrices(ref_b + ref + pred, pred_b)  # same vocabulary
    A2 = A2[: len(ref_b)]
    assert vocab2 == vocab
    rf_b, pf_b = rf[r_idx], rf[p_idx]
    cf = lambda C, f: np.asarray(C[np.flatnonzero(f)].sum(0)).ravel()
    t = wae_table(cf(A2, rf_b), cf(A2, ~rf_b), cf(B2, pf_b), cf(B2, ~pf_b))
    for k, v in t.items():
        assert draws["bootstrap"][k][0] == pytest.approx(v, nan_ok=True)


def test_bootstrap_bias_and_basic_interval_hand_computed():
    # draws 2, 3, 4, 5 (mean 3.5) around an observed 2: bias 1.5, corrected 0.5; alpha 0.5 -> q.25 = 2.75,
    # q.75 = 4.25 (linear interpolation), basic interval [2*2 - 4.25, 2*2 - 2.75] = [-0.25, 1.25]
    b, corrected, lo, hi = stats.bootstrap_bias(2.0, [2.0, 3.0, 4.0, np.nan, 5.0], alpha=0.5)
    assert (b, corrected, lo, hi) == pytest.approx((1.5, 0.5, -0.25, 1.25))
    assert all(math.isnan(x) for x in stats.bootstrap_bias(1.0, [np.nan]))


def test_wae_file_flags_a_point_the_inflated_bootstrap_misses():
    """Resampling adds noise to every squared z_disp: with pure-noise groups the bootstrap WAEs run above the
    observed WAE; wae.csv flags the point outside its percentile interval and gives the bias beside it."""
    from medvlm_audit.suites.reports.audit import corpus_audit
    from medvlm_audit.suites.reports.corpus import make_corpus

    rng = np.random.default_rng(3)
    words = [f"term{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(60)]

    def corpus(name):
        return make_corpus([{"id": f"{name}{i}", "text": " ".join(rng.choice(words, 12)), "group": "FM"[i % 2]}
                            for i in range(200)], name)

    res = corpus_audit(corpus("r"), corpus("p"), None, B=300, n_perm=100, semantic=False, bertscore=False)
    w = res.wae.set_index(["weighting", "group"])
    for key in (("pred", "all"), ("ref", "all")):
        r = w.loc[key]
        assert r["boot_bias"] > 0 and r["value_bias_corrected"] == pytest.approx(r["value"] - r["boot_bias"])
        assert r["point_outside_ci"] == (not r["ci_low"] <= r["value"] <= r["ci_high"])
        assert r["ci_low_basic"] < r["ci_high_basic"]
    assert w["point_outside_ci"].any()  # the case the columns exist for
