"""``corpus_audit``: CAD per word, WAE with bootstrap intervals and permutation p, diversity, surface metrics and
baselines for one reference and one prediction corpus (DESIGN.md "Report audit"; paper 002).

Everything association-based works on one sparse report x word count matrix per corpus, built once
(:func:`medvlm_audit.suites.reports.terms.report_count_matrices`); resamples reweight its rows (counts-based), nothing is
re-tokenised. Files are written together, atomically:

* ``cad.csv``: word, z_ref, z_pred, z_disp, p, q, category (BH-gated: ``stable`` where q >= p*, ``absent`` where
  q >= p* and the predictions never write the word), category_ungated,
  s_ref, s_pred and the word's counts per group and corpus;
* ``wae.csv``: weighting (pred, ref), group (all, F, M, delta = F - M), value, ci_low, ci_high (percentile
  bootstrap over reports, stratified by group), p_perm (label-permutation null; one-sided for WAE, two-sided for
  the delta), and the bootstrap's bias beside them: resampling adds sampling noise to every z_disp², so bootstrap
  WAEs run above the observed one and the percentile interval can miss its point (``point_outside_ci``);
  ``boot_bias``, ``value_bias_corrected`` and the basic interval ``ci_low_basic``/``ci_high_basic``
  (:func:`medvlm_audit.stats.bootstrap_bias`) say by how much;
* ``diversity.csv``: one row per corpus with template_diversity, ttr, one_minus_self_bleu, semantic_diversity;
* ``surface.csv`` (only when predictions pair with reference reports by id): one row per metric: BLEU,
  ROUGE-1, ROUGE-L and BERTScore P / R / F1 (local backbone), means with cluster-bootstrap intervals;
* ``clinical.csv`` (only with clinical-metric adapters and pairs): CheXbert F1, RadGraph F1, RaTEScore, GREEN;
* ``baselines.csv``: ΔDIR and WEAT (statistic and effect size) per corpus;
* ``summary.json``: category counts gated and ungated, parameters, which rule the headline uses.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.atomic import csv_bytes, write_files_atomic
from medvlm_audit.suites.reports.baselines import male_female_token_ratio, weat
from medvlm_audit.suites.reports.cad import CAD_CATEGORIES, cad
from medvlm_audit.suites.reports.corpus import Corpus, CorpusError, read_corpus
from medvlm_audit.suites.reports.diversity import (
    _sample_indices,
    self_bleu,
    semantic_diversity,
    template_diversity,
    type_token_ratio,
)
from medvlm_audit.suites.reports.surface import corpus_bleu, rouge_pair_scores
from medvlm_audit.suites.reports.terms import report_count_matrices
from medvlm_audit.suites.reports.wae import corpus_resample_wae, wae_table

WEAT_FEMALE = ("woman", "female", "she", "her", "mother", "girl", "lady", "wife")
WEAT_MALE = ("man", "male", "he", "his", "father", "boy", "gentleman", "husband")
#: DESIGN.md, report audit: erasure = BH-gated erasures plus the words strong in the reference (|z_ref| > 2) that the
#: predictions never write (the gate cannot flag those); new bias, bias flip and preservation = BH-gated only
HEADLINE_RULE = "headline"
HEADLINE_NOTE = ("headline counts: erasure = BH-gated erasures plus words strong in the reference (|z_ref| > 2) that "
                 "the predictions never write (a word never written has |z_disp| < ~0.9 at alpha = 0.1, so the gate "
                 "cannot flag it); new bias, bias flip and preservation = BH-gated only (ungated, two random halves of "
                 "the IU reports show 129 new-bias words and 28 flips with no model involved). categories_null: the "
                 "same counts on the reference corpus split in two at random (seed 0), what chance gives")


@dataclass
class CorpusAudit:
    cad: pd.DataFrame
    wae: pd.DataFrame
    diversity: pd.DataFrame
    surface: pd.DataFrame | None
    baselines: pd.DataFrame
    clinical: pd.DataFrame | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    #: the files :func:`write_audit` wrote (empty until then)
    written: list[Path] = field(default_factory=list)

    @property
    def assessable(self) -> bool:
        """False where the predictions are degenerate (assess.py's rule): no category, WAE or diversity."""
        return bool(self.summary.get("assessable", True))

    def category_counts(self, gated: bool | str) -> dict[str, int]:
        """Counts per category: ``True`` BH-gated, ``False`` ungated, ``"headline"`` the headline rule."""
        col = "category_headline" if gated == "headline" else "category" if gated else "category_ungated"
        vc = self.cad[col].value_counts()
        return {c: int(vc.get(c, 0)) for c in CAD_CATEGORIES}


#: the columns of cad.csv, wae.csv, diversity.csv and baselines.csv, kept (header only) where the predictions
#: are not assessable
CAD_COLUMNS = ("word", "z_ref", "z_pred", "z_disp", "p", "q", "category", "category_ungated", "s_ref", "s_pred",
               "count_ref_F", "count_ref_M", "count_pred_F", "count_pred_M", "category_headline", "absent_strong")
WAE_COLUMNS = ("weighting", "group", "value", "ci_low", "ci_high", "p_perm", "n_boot", "n_perm", "null_median",
               "null_p95", "point_outside_ci", "boot_bias", "value_bias_corrected", "ci_low_basic", "ci_high_basic",
               "ci_low_bc", "ci_high_bc", "ci_low_print", "ci_high_print", "ci_print_method")
DIVERSITY_COLUMNS = ("corpus", "n_reports", "template_diversity", "ttr", "one_minus_self_bleu", "semantic_diversity",
                     "vocabulary_size", "self_bleu_sample", "semantic_note")
BASELINES_COLUMNS = ("metric", "corpus", "value", "note")


def predictions_assessability(reference: Corpus, predictions: Corpus) -> tuple[dict[str, int], int, int, str]:
    """The reports suite's not-assessable rule (assess.py) on a predictions corpus: (count per report status,
    assessable reports, reports, reason); the reason is "" where at least half the reports are assessable.

    >>> ref = Corpus(("r1", "r2"), ("Clear lungs bilaterally.", "Small left effusion."), ("F", "M"), "ref.jsonl")
    >>> pred = Corpus(("p1", "p2", "p3"), ("Yes", "Yes", "Clear lungs."), ("F", "M", "F"), "p.jsonl")
    >>> predictions_assessability(ref, pred)
    ({'answer': 1, 'too_short': 2}, 1, 3, 'not assessable (1 of 3 reports assessable, 33.3% < 50%: too short 2)')
    """
    from medvlm_audit.suites.reports.assess import (
        REPORT_STATUSES,
        assessability,
        report_status,
        with_vocabulary,
    )
    from medvlm_audit.suites.reports.terms import report_tokens

    vocabulary = {w for t in reference.texts for w in report_tokens(t)}
    statuses = with_vocabulary([report_status(t) for t in predictions.texts], predictions.texts, vocabulary)
    k, n, reason = assessability(statuses)
    return {c: statuses.count(c) for c in REPORT_STATUSES if c in statuses}, k, n, reason


def headline_categories(cadf: pd.DataFrame, z_strong: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """(headline category, absent strong word) per CAD row: the BH-gated category, plus ``erasure`` for every
    word strong in the reference (|z_ref| > z_strong) that the predictions never write; ``none`` elsewhere."""
    absent = ((np.abs(cadf["z_ref"].to_numpy(dtype=float)) > z_strong)
              & ((cadf["count_pred_F"].to_numpy() + cadf["count_pred_M"].to_numpy()) == 0))
    gated = cadf["category"].astype(str).to_numpy()
    out = np.where(np.isin(gated, ("stable", "absent")), "none", gated).astype(object)
    out[absent] = "erasure"
    return out, absent


ABSENT_NULL_DRAWS = 200


def _strong_mask(cadf: pd.DataFrame, vocab: list[str], z_strong: float = 2.0) -> np.ndarray:
    """|z_ref| > z_strong per column of the count matrices (``vocab`` order; ``cadf`` is sorted by |z_disp|)."""
    z = cadf.set_index("word")["z_ref"].reindex(vocab).to_numpy(dtype=float)
    return np.abs(z) > z_strong


def absent_strong_null(C_ref: Any, female: np.ndarray, strong: np.ndarray, n_female: int, n_male: int, *,
                       draws: int = ABSENT_NULL_DRAWS, seed: int = 0) -> dict[str, float]:
    """How many of the reference's strong words (``strong``: a mask over the vocabulary) a corpus of the
    predictions' size leaves unwritten by chance: ``draws`` random samples of ``n_female`` F and ``n_male`` M
    reference reports (``numpy.random.default_rng(seed)``; without replacement, with it when a group asks for
    more reports than the reference has), the number of strong words none of them writes; mean and 95th
    percentile, and ``strong``, how many strong words there are. A word absent from 40 reports may be a rare word, not an erased one: the split-half null
    (each half ~half the reference) cannot say so for a small predictions corpus.

    >>> import scipy.sparse as sp
    >>> C = sp.csr_matrix(np.array([[1, 0], [0, 1], [1, 0], [1, 0]]))  # word 1 is written in one report of four
    >>> r = absent_strong_null(C, np.array([True, True, False, False]), np.array([False, True]), 1, 1, draws=400)
    >>> 0.4 < r["mean"] < 0.6 and r["p95"] == 1.0
    True
    """
    rng = np.random.default_rng(seed)
    C = C_ref.tocsr()
    f_idx, m_idx = np.flatnonzero(female), np.flatnonzero(~female)
    cols = np.flatnonzero(strong)
    out = np.zeros(draws)
    if len(cols) == 0:
        return {"mean": 0.0, "p5": 0.0, "p95": 0.0, "draws": float(draws), "strong": 0.0}
    Cs = C[:, cols]
    for i in range(draws):
        rows = []
        for idx, k in ((f_idx, n_female), (m_idx, n_male)):
            if k > 0 and len(idx):
                rows.append(rng.choice(idx, size=k, replace=k > len(idx)))
        pick = np.concatenate(rows) if rows else np.zeros(0, dtype=int)
        written = np.asarray(Cs[pick].sum(axis=0)).ravel() > 0
        out[i] = float((~written).sum())
    return {"mean": float(out.mean()), "p5": float(np.percentile(out, 5)), "p95": float(np.percentile(out, 95)),
            "draws": float(draws),
            "strong": float(len(cols))}


def null_split(C_ref: Any, female: np.ndarray, vocab: list[str], alpha: float = 0.1, p_star: float = 0.05,
               seed: int = 0) -> pd.DataFrame:
    """CAD of the reference corpus against itself: its reports split in two at random
    (``numpy.random.default_rng(seed).permutation``; the first half as the reference, the second as the
    predictions), with the headline categories: what chance gives with no model involved."""
    n = C_ref.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    a, b = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
    cf_a, cm_a = _group_counts(C_ref[a], female[a])
    cf_b, cm_b = _group_counts(C_ref[b], female[b])
    df = cad_frame(vocab, cf_a, cm_a, cf_b, cm_b, alpha, p_star)
    df["category_headline"], df["absent_strong"] = headline_categories(df)
    return df


def _as_corpus(x: Corpus | str | Path, what: str) -> Corpus:
    if isinstance(x, Corpus):
        return x
    try:
        return read_corpus(x)
    except CorpusError as e:
        raise CorpusError(f"{what}: {e}") from e


def _group_counts(C: Any, female: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cf = np.asarray(C[np.flatnonzero(female)].sum(axis=0)).ravel().astype(np.int64)
    cm = np.asarray(C[np.flatnonzero(~female)].sum(axis=0)).ravel().astype(np.int64)
    return cf, cm


def cad_frame(vocab: list[str], cf_r: np.ndarray, cm_r: np.ndarray, cf_p: np.ndarray, cm_p: np.ndarray,
              alpha: float = 0.1, p_star: float = 0.05) -> pd.DataFrame:
    """One CAD row per vocabulary word (sorted by |z_disp|, largest first)."""
    out = cad(cf_r, cm_r, cf_p, cm_p, alpha=alpha, p_star=p_star)
    df = pd.DataFrame({
        "word": vocab, "z_ref": out["z_ref"], "z_pred": out["z_pred"], "z_disp": out["z_disp"], "p": out["p"],
        "q": out["q"], "category": out["category"].astype(str), "category_ungated": out["category_ungated"].astype(str),
        "s_ref": out["s_ref"], "s_pred": out["s_pred"],
        "count_ref_F": cf_r, "count_ref_M": cm_r, "count_pred_F": cf_p, "count_pred_M": cm_p,
    })
    order = np.lexsort((df["word"].to_numpy(), -np.abs(df["z_disp"].to_numpy())))
    return df.iloc[order].reset_index(drop=True)


def wae_frame(point: dict[str, float], draws: dict[str, dict[str, np.ndarray]], alpha_ci: float = 0.05) -> pd.DataFrame:
    rows = []
    for weighting in ("pred", "ref"):
        for group in ("all", "F", "M", "delta"):
            key = f"{weighting}_{group}"
            b = draws["bootstrap"][key]
            b = b[~np.isnan(b)]
            lo, hi = stats.percentile_interval(b, alpha_ci) if b.shape[0] else (math.nan, math.nan)
            bias, corrected, basic_lo, basic_hi = stats.bootstrap_bias(float(point[key]), b, alpha_ci)
            null = draws["permutation"][key]
            p = (stats.permutation_p_two_sided(point[key], null) if group == "delta"
                 else stats.permutation_p_upper(point[key], null))
            v = float(point[key])
            nl = null[~np.isnan(null)]
            bc_lo, bc_hi = stats.bias_corrected_interval(v, b, alpha_ci)
            shown = _printed_interval(v, (bc_lo, bc_hi), (basic_lo, basic_hi), clip=group != "delta")
            rows.append({"weighting": weighting, "group": group, "value": v, "ci_low": lo,
                         "ci_high": hi, "p_perm": p, "n_boot": int(b.shape[0]), "n_perm": int(null.shape[0]),
                         "null_median": float(np.median(nl)) if nl.shape[0] else math.nan,
                         "null_p95": float(np.percentile(nl, 95)) if nl.shape[0] else math.nan,
                         "point_outside_ci": bool(b.shape[0]) and not lo <= v <= hi,
                         "boot_bias": bias, "value_bias_corrected": corrected, "ci_low_basic": basic_lo,
                         "ci_high_basic": basic_hi, "ci_low_bc": bc_lo, "ci_high_bc": bc_hi,
                         "ci_low_print": shown[0], "ci_high_print": shown[1], "ci_print_method": shown[2]})
    return pd.DataFrame(rows)


def _printed_interval(point: float, bc: tuple[float, float], basic: tuple[float, float], clip: bool
                      ) -> tuple[float, float, str]:
    """The interval printed beside a WAE point (DESIGN.md: it must contain the point): the bias-corrected
    percentile interval if it does, else the basic interval (clipped at 0 for a WAE, a sum of squares), else
    none (the permutation test leads; every interval stays in wae.csv)."""
    if all(map(math.isfinite, bc)) and bc[0] <= point <= bc[1]:
        return bc[0], bc[1], "bias-corrected percentile (BCa, acceleration 0)"
    lo, hi = basic
    if clip and math.isfinite(lo):
        lo, hi = max(0.0, lo), max(0.0, hi)
    if math.isfinite(lo) and math.isfinite(hi) and lo <= point <= hi and hi > lo:
        return lo, hi, "basic bootstrap" + (", clipped at 0" if clip else "")
    return math.nan, math.nan, "none: no bootstrap interval contains the point (see wae.csv; the permutation test leads)"


def _semantic(texts: tuple[str, ...], max_texts: int, seed: int) -> tuple[float, str]:
    from medvlm_audit.suites.reports import embeddings

    why = embeddings.unavailable_reason()
    if why is not None:
        return math.nan, why
    norm = [" ".join(t.split()) for t in texts]
    uniq, counts = np.unique(np.asarray(norm, dtype=object), return_counts=True)
    note = f"{embeddings.BACKBONE}; {len(uniq)} distinct reports"
    if len(uniq) > max_texts:  # a seeded sample of reports (its distinct texts carry their multiplicity)
        idx = np.random.default_rng(seed).choice(len(norm), size=max_texts, replace=False)
        uniq, counts = np.unique(np.asarray([norm[i] for i in idx], dtype=object), return_counts=True)
        note += f"; seeded sample of {max_texts} reports"
    E = embeddings.embed([str(u) for u in uniq])
    return semantic_diversity(E, counts), note


def diversity_row(name: str, corpus: Corpus, vocab_size: int, semantic: bool, self_bleu_max: int,
                  semantic_max: int, seed: int) -> dict[str, Any]:
    sb = self_bleu(corpus.texts, max_n=self_bleu_max, seed=seed)
    sem, note = _semantic(corpus.texts, semantic_max, seed) if semantic else (math.nan, "not computed (semantic=False)")
    return {"corpus": name, "n_reports": len(corpus), "template_diversity": template_diversity(corpus.texts),
            "ttr": type_token_ratio(corpus.texts), "one_minus_self_bleu": max(0.0, 1.0 - sb),
            "semantic_diversity": sem, "vocabulary_size": vocab_size,
            "self_bleu_sample": min(len(corpus), self_bleu_max), "semantic_note": note}


def paired_reports(reference: Corpus, predictions: Corpus, reference_ids: Sequence[str] | None = None
                   ) -> tuple[list[str], list[str], list[str]]:
    """(hypotheses, references, reference ids) of the predictions whose reference report is found: by
    ``reference_ids[i]`` when given (e.g. the image's own report), else by the prediction's id."""
    ref: dict[str, str] = {}
    for i, t in zip(reference.ids, reference.texts):
        ref.setdefault(i, t)
    keys = predictions.ids if reference_ids is None else [str(k) for k in reference_ids]
    if len(keys) != len(predictions):
        raise CorpusError(f"{predictions.source}: {len(keys)} reference ids for {len(predictions)} reports")
    hyp, refs, rid = [], [], []
    for k, t in zip(keys, predictions.texts):
        if k in ref:
            hyp.append(t)
            refs.append(ref[k])
            rid.append(k)
    return hyp, refs, rid


def surface_frame(reference: Corpus, predictions: Corpus, max_pairs: int | None = 1000, seed: int = 0,
                  reference_ids: Sequence[str] | None = None, bertscore: bool = False,
                  bertscore_model: str | Path | None = None, bertscore_layers: int | None = None,
                  B: int = 1000) -> pd.DataFrame | None:
    """Surface similarity of each prediction to its paired reference report (None if nothing pairs): corpus
    BLEU, mean ROUGE-1 / ROUGE-L and, when ``bertscore``, mean BERTScore precision / recall / F1 (see
    :mod:`.bertscore`), on a seeded sample of ``max_pairs`` pairs when there are more (None: every pair).
    Means carry percentile cluster-bootstrap intervals over reference reports (the samples of one image share
    its reference); BLEU is a corpus statistic and has none.

    One row per metric: metric, value, ci_low, ci_high, n_pairs (paired), n_scored, n_references, method.
    """
    hyp, refs, rid = paired_reports(reference, predictions, reference_ids)
    if not hyp:
        return None
    n_all = len(hyp)
    idx = _sample_indices(n_all, max_pairs, seed)
    hyp, refs, rid = [hyp[i] for i in idx], [refs[i] for i in idx], [rid[i] for i in idx]
    n_ref = len(set(rid))
    base = {"n_pairs": n_all, "n_scored": len(hyp), "n_references": n_ref}
    sample = f"; seeded sample of {len(hyp)} of {n_all} pairs" if len(hyp) < n_all else ""
    rows = [{"metric": "bleu", "value": corpus_bleu(hyp, refs), "ci_low": math.nan, "ci_high": math.nan,
             **base, "method": "corpus BLEU (sacrebleu 13a, exp smoothing), one reference each" + sample}]
    per = rouge_pair_scores(hyp, refs)
    for name, label in (("rouge1", "ROUGE-1"), ("rougeL", "ROUGE-L")):
        e = stats.mean_estimate(per[name], B=B, seed=seed, clusters=rid)
        lo, hi, how = e.ci_low, e.ci_high, e.method
        v = np.asarray(per[name], dtype=np.float64)
        if v.size and (np.all(v == 0.0) or np.all(v == 1.0)):
            # every pair scores 0 (or 1): the cluster bootstrap's [0, 0] has zero width; the exact bound of a
            # [0, 1] mean over the n_ref independent reference reports instead (stats.bounded_mean_interval_at_edge)
            lo, hi = stats.bounded_mean_interval_at_edge(n_ref, float(v[0]))
            how = (f"every pair scores {v[0]:g}: the cluster bootstrap is degenerate, so the exact 95% bound of a "
                   f"mean in [0, 1] over {n_ref} reference reports (Clopper-Pearson's for {v[0]:g} on each)")
        rows.append({"metric": name, "value": e.point, "ci_low": lo, "ci_high": hi, **base,
                     "method": f"mean {label} F (rouge-score, stemmed); {how}{sample}"})
    if bertscore:
        from medvlm_audit.suites.reports import bertscore as bs

        P, R, F = bs.bertscore(hyp, refs, bertscore_model, bertscore_layers)
        what = bs.describe(bertscore_model, bertscore_layers)
        for name, v in (("bertscore_precision", P), ("bertscore_recall", R), ("bertscore_f1", F)):
            e = stats.mean_estimate(v, B=B, seed=seed, clusters=rid)
            rows.append({"metric": name, "value": e.point, "ci_low": e.ci_low, "ci_high": e.ci_high, **base,
                         "method": f"mean {what}; {e.method}{sample}"})
    return pd.DataFrame(rows)


def clinical_frame(metrics: Sequence[Any], reference: Corpus, predictions: Corpus,
                   reference_ids: Sequence[str] | None = None, max_pairs: int | None = 1000, seed: int = 0,
                   B: int = 1000) -> pd.DataFrame | None:
    """Rows of the loaded clinical metrics (:mod:`.clinical`) on the paired reports (None if none pairs or no
    metric is given): metric, value, ci_low, ci_high, n_scored, unit, method, note."""
    if not metrics:
        return None
    hyp, refs, _ = paired_reports(reference, predictions, reference_ids)
    if not hyp:
        return None
    idx = _sample_indices(len(hyp), max_pairs, seed)
    hyp, refs = [hyp[i] for i in idx], [refs[i] for i in idx]
    rows = []
    for m in metrics:
        for sc in m.score(hyp, refs, B=B, seed=seed):
            rows.append({"metric": sc.metric, "value": sc.point, "ci_low": sc.ci_low, "ci_high": sc.ci_high,
                         "n_scored": sc.n, "unit": sc.unit, "method": sc.method, "note": sc.note})
    return pd.DataFrame(rows)


def _weat_for(z: np.ndarray, vocab: list[str], k: int = 8) -> tuple[float, float, str]:
    from medvlm_audit.suites.reports import embeddings

    why = embeddings.unavailable_reason()
    if why is not None:
        return math.nan, math.nan, why
    order = np.argsort(z)
    X = [vocab[i] for i in order[::-1][:k] if z[i] > 2]
    Y = [vocab[i] for i in order[:k] if z[i] < -2]
    if not X or not Y:
        return math.nan, math.nan, "no word with |z| > 2 in one of the groups"
    E = embeddings.embed(X + Y + list(WEAT_FEMALE) + list(WEAT_MALE))
    nx, ny, nf = len(X), len(Y), len(WEAT_FEMALE)
    S, es = weat(E[:nx], E[nx:nx + ny], E[nx + ny:nx + ny + nf], E[nx + ny + nf:])
    return S, es, f"targets: top {k} words with z > 2 (F) and z < -2 (M); attributes: gendered words; {embeddings.BACKBONE}"


def baselines_frame(C_ref: Any, fr: np.ndarray, C_pred: Any, fp: np.ndarray, cadf: pd.DataFrame,
                    weat_on: bool) -> pd.DataFrame:
    lr = np.asarray(C_ref.sum(axis=1)).ravel()
    lp = np.asarray(C_pred.sum(axis=1)).ravel()
    d_ref = male_female_token_ratio(lr, fr)
    d_pred = male_female_token_ratio(lp, fp)
    rows = [{"metric": "dir", "corpus": "reference", "value": d_ref, "note": "mean tokens per M report / per F report"},
            {"metric": "dir", "corpus": "predictions", "value": d_pred, "note": "mean tokens per M report / per F report"},
            {"metric": "delta_dir", "corpus": "predictions", "value": d_pred - d_ref, "note": "DIR(pred) - DIR(ref)"}]
    if weat_on:
        vocab = cadf["word"].tolist()
        for name, zcol in (("reference", "z_ref"), ("predictions", "z_pred")):
            S, es, note = _weat_for(cadf[zcol].to_numpy(), vocab)
            rows.append({"metric": "weat_s", "corpus": name, "value": S, "note": note})
            rows.append({"metric": "weat_es", "corpus": name, "value": es, "note": note})
    return pd.DataFrame(rows)


def _bertscore_on(flag: bool | str, model: str | Path | None) -> bool:
    from medvlm_audit.suites.reports import bertscore as bs

    why = bs.unavailable_reason(model)
    if flag is True and why is not None:
        raise CorpusError(f"BERTScore was required but {why}")
    return flag is True or (flag == "auto" and why is None)


def corpus_audit(reference: Corpus | str | Path, predictions: Corpus | str | Path, out_dir: str | Path | None = None,
                 B: int = 1000, n_perm: int = 1000, seed: int = 0, alpha: float = 0.1, p_star: float = 0.05,
                 semantic: bool | str = "auto", self_bleu_max: int = 1000, semantic_max: int = 500,
                 surface_max: int | None = 1000, workers: int | None = None,
                 reference_ids: Sequence[str] | None = None, bertscore: bool | str = "auto",
                 bertscore_model: str | Path | None = None, bertscore_layers: int | None = None,
                 clinical: Sequence[Any] = (), assess: bool = True) -> CorpusAudit:
    """Audit ``predictions`` against ``reference`` (Corpus objects or JSONL paths); write the files to ``out_dir``.

    ``semantic``: "auto" computes semantic diversity and WEAT when the ``reports`` extra is installed; True
    requires it; False skips both (nan with a note). Self-BLEU uses a seeded sample of ``self_bleu_max`` reports,
    semantic diversity at most ``semantic_max`` and the paired surface metrics at most ``surface_max`` id pairs
    (their costs are quadratic, per embedding and per pair; None lifts a cap).

    Paired metrics (surface, BERTScore, ``clinical`` adapters) pair each prediction with the reference report of
    id ``reference_ids[i]`` (default: the prediction's own id). ``bertscore``: "auto" computes it when the
    ``reports`` extra is installed (or ``bertscore_model`` is given), True requires it, False skips it.

    ``assess`` applies the reports suite's not-assessable rule (assess.py) to the predictions first: where fewer
    than half are assessable reports (mostly empty, refusals, too short, no word of the reference), nothing is
    computed; the tables keep their header only and ``summary`` says ``assessable: false`` with the reason and
    the count of each status (the suite's analysis applies the rule itself and passes False).
    """
    ref = _as_corpus(reference, "reference")
    pred = _as_corpus(predictions, "predictions")
    statuses, k, n, reason = predictions_assessability(ref, pred)
    shares = {"statuses": statuses, "assessable_reports": k, "reports_with_text": n}
    if assess and reason:
        res = CorpusAudit(pd.DataFrame(columns=list(CAD_COLUMNS)), pd.DataFrame(columns=list(WAE_COLUMNS)),
                          pd.DataFrame(columns=list(DIVERSITY_COLUMNS)), None,
                          pd.DataFrame(columns=list(BASELINES_COLUMNS)))
        res.summary = {
            "reference": {"source": ref.source, "n": len(ref), **ref.counts()},
            "predictions": {"source": pred.source, "n": len(pred), **pred.counts()},
            "assessable": False, "reason": reason, **shares,
            "note": "the predictions are degenerate (the reports suite's rule, docs/reports.md): no CAD category, "
                    "WAE, diversity or baseline is computed",
        }
        if out_dir is not None:
            write_audit(res, out_dir)
        return res
    if semantic is True:
        from medvlm_audit.suites.reports import embeddings

        why = embeddings.unavailable_reason()
        if why is not None:
            raise CorpusError(f"semantic diversity was required but {why}")
    sem_on = semantic is True or (semantic == "auto")
    bs_on = _bertscore_on(bertscore, bertscore_model)
    (C_ref, C_pred), vocab = report_count_matrices(ref.texts, pred.texts)
    if not vocab:
        raise CorpusError(f"{ref.source} and {pred.source}: no word left after stop-word removal")
    fr, fp = ref.female, pred.female
    cf_r, cm_r = _group_counts(C_ref, fr)
    cf_p, cm_p = _group_counts(C_pred, fp)
    cadf = cad_frame(vocab, cf_r, cm_r, cf_p, cm_p, alpha, p_star)
    cadf["category_headline"], cadf["absent_strong"] = headline_categories(cadf)
    nullf = null_split(C_ref, fr, vocab, alpha, p_star, seed)
    null_counts = nullf["category_headline"].value_counts()
    point = wae_table(cf_r, cm_r, cf_p, cm_p, alpha)
    draws = corpus_resample_wae(C_ref, fr, C_pred, fp, B=B, n_perm=n_perm, seed=seed, alpha=alpha,
                                      workers=workers)
    waef = wae_frame(point, draws)
    used_ref = int((np.asarray(C_ref.sum(axis=0)).ravel() > 0).sum())
    used_pred = int((np.asarray(C_pred.sum(axis=0)).ravel() > 0).sum())
    div = pd.DataFrame([
        diversity_row("reference", ref, used_ref, sem_on, self_bleu_max, semantic_max, seed),
        diversity_row("predictions", pred, used_pred, sem_on, self_bleu_max, semantic_max, seed),
    ])
    surf = surface_frame(ref, pred, surface_max, seed, reference_ids, bs_on, bertscore_model, bertscore_layers, B)
    clin = clinical_frame(clinical, ref, pred, reference_ids, surface_max, seed, B)
    base = baselines_frame(C_ref, fr, C_pred, fp, cadf, sem_on)
    res = CorpusAudit(cadf, waef, div, surf, base, clin)
    res.summary = {
        "reference": {"source": ref.source, "n": len(ref), **ref.counts()},
        "predictions": {"source": pred.source, "n": len(pred), **pred.counts()},
        "assessable": True, **shares,
        "vocabulary": len(vocab), "alpha": alpha, "p_star": p_star, "z_neutral": 1.0, "z_strong": 2.0,
        "B": B, "n_perm": n_perm, "seed": seed,
        "categories_gated": res.category_counts(True) | {"stable": int((cadf["category"] == "stable").sum()),
                                                         "absent": int((cadf["category"] == "absent").sum())},
        "categories_ungated": res.category_counts(False),
        "categories_headline": res.category_counts("headline"),
        "categories_null": {c: int(null_counts.get(c, 0)) for c in CAD_CATEGORIES},
        "absent_strong": int(cadf["absent_strong"].sum()),
        "absent_strong_null": int(nullf["absent_strong"].sum()),
        "absent_strong_null_matched": absent_strong_null(
            C_ref, fr, _strong_mask(cadf, vocab), int(fp.sum()), int((~fp).sum()), seed=seed),
        "null_split": {"seed": seed, "n_reference_half": int(C_ref.shape[0] // 2),
                       "n_prediction_half": int(C_ref.shape[0] - C_ref.shape[0] // 2)},
        "headline_rule": HEADLINE_RULE,
        "headline_note": HEADLINE_NOTE,
        "wae_note": ("WAE falls when associated words are erased: a word the predictions never write has "
                     "z_disp^2 < 0.8, so a low WAE is not 'no erasure'; read it with absent_strong"),
        "stop_words": "NLTK English list (REPORT_STOP_WORDS)",
    }
    if out_dir is not None:
        write_audit(res, out_dir)
    return res


def write_audit(res: CorpusAudit, out_dir: str | Path) -> list[Path]:
    """Write the tables and summary.json together (atomically); return (and keep in ``res.written``) their paths."""
    payloads = [("cad.csv", csv_bytes(res.cad)), ("wae.csv", csv_bytes(res.wae)),
                ("diversity.csv", csv_bytes(res.diversity)), ("baselines.csv", csv_bytes(res.baselines)),
                ("summary.json", (json.dumps(res.summary, indent=2, default=float) + "\n").encode())]
    if res.surface is not None:
        payloads.append(("surface.csv", csv_bytes(res.surface)))
    if res.clinical is not None:
        payloads.append(("clinical.csv", csv_bytes(res.clinical)))
    write_files_atomic(Path(out_dir), payloads)
    for stale in ("surface.csv", "clinical.csv"):  # an earlier audit's table this one does not have: not kept
        if stale not in {name for name, _ in payloads}:
            (Path(out_dir) / stale).unlink(missing_ok=True)
    res.written = [Path(out_dir) / name for name, _ in payloads]
    return res.written
