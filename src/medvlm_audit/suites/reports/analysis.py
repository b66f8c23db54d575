"""Analysis of a report-generation run: per model x strategy, :func:`~medvlm_audit.suites.reports.audit.corpus_audit`
of the model's reports (grouped by the patient's sex from the case metadata) against the reference corpus, in
the shared long metrics schema (``subset`` = the strategy) with the report's table and figures."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.report.html import format_number
from medvlm_audit.report.sections import Section, figure_to_html, table_to_html
from medvlm_audit.suites.base import METRICS_COLUMNS, SuiteResult
from medvlm_audit.suites.reports.audit import CorpusAudit, corpus_audit
from medvlm_audit.suites.reports.corpus import (
    Corpus,
    CorpusError,
    iu_reference_corpus,
    make_corpus,
    read_corpus,
)
from medvlm_audit.suites.reports.decoding import STRATEGIES, effective_table

CATEGORIES = ("erasure", "new_bias", "bias_flip", "preservation")
STOCHASTIC = frozenset(n for n, s in STRATEGIES.items() if s.stochastic)


def reference_corpus(spec: str) -> Corpus:
    return iu_reference_corpus() if spec == "iu" else read_corpus(spec)


def predictions_corpus(rows: pd.DataFrame, source: str) -> tuple[Corpus, list[str]]:
    """A model x strategy's reports as a corpus (id ``case#sample``, the report, the patient's sex) and each
    report's paired reference id (the tidy table's ``reference_id``, else the case id)."""
    ok = rows[rows["report"].notna() & rows["group"].isin(["F", "M"])]
    ref_ids = ok["reference_id"] if "reference_id" in ok else ok["case_id"]
    corpus = make_corpus(({"id": f"{r.case_id}#{r.sample_index}", "text": str(r.report), "group": r.group}
                          for r in ok.itertuples(index=False)), source)
    return corpus, [str(x) for x in ref_ids]


PAIRED_LABELS = {"bleu": "BLEU", "rouge1": "ROUGE-1", "rougeL": "ROUGE-L", "bertscore_precision": "BERTScore P",
                 "bertscore_recall": "BERTScore R", "bertscore_f1": "BERTScore F1"}


def paired_rows(res: CorpusAudit, model: str, strategy: str, probe_set: str) -> list[dict[str, Any]]:
    """Metrics rows of the surface and clinical metrics (reports paired with their reference report)."""
    rows: list[dict[str, Any]] = []
    for frame in (res.surface, res.clinical):
        if frame is None:
            continue
        for r in frame.to_dict("records"):
            n = int(r.get("n_scored", 0))
            note = str(r.get("note", "") or "")
            if "n_pairs" in r and int(r["n_pairs"]) > n:
                note = (note + "; " if note else "") + f"{n} of {int(r['n_pairs'])} pairs scored (seeded sample)"
            rows.append(_row(model, str(r["metric"]), strategy, r["value"], n=n, unit=str(r.get("unit", "fraction")),
                             method=str(r["method"]), note=note, ci=(r["ci_low"], r["ci_high"]), probe_set=probe_set))
    return rows


def _row(model: str, metric: str, subset: str, point: float, *, n: int, unit: str, method: str, note: str = "",
         ci: tuple[float, float] = (math.nan, math.nan), probe_set: str = "") -> dict[str, Any]:
    return {"suite": "reports", "probe_set": probe_set, "model": model, "metric": metric, "subset": subset,
            "point": float(point), "se": math.nan, "ci_low": float(ci[0]), "ci_high": float(ci[1]), "n": int(n),
            "unit": unit, "method": method, "note": note}


def metric_rows(res: CorpusAudit, model: str, strategy: str, probe_set: str, B: int, n_perm: int) -> list[dict[str, Any]]:
    div = res.diversity.set_index("corpus").loc["predictions"]
    n = int(div["n_reports"])
    rows = [
        _row(model, "template_diversity", strategy, div["template_diversity"], n=n, unit="fraction",
             method="share of unique reports", probe_set=probe_set),
        _row(model, "ttr", strategy, div["ttr"], n=n, unit="fraction", method="corpus type-token ratio",
             probe_set=probe_set),
        _row(model, "one_minus_self_bleu", strategy, div["one_minus_self_bleu"], n=n, unit="fraction",
             method=f"1 - Self-BLEU (sacrebleu; sample of {int(div['self_bleu_sample'])})", probe_set=probe_set),
        _row(model, "vocabulary_size", strategy, div["vocabulary_size"], n=n, unit="words",
             method="distinct words, stop words removed", probe_set=probe_set),
    ]
    if not math.isnan(float(div["semantic_diversity"])):
        rows.append(_row(model, "semantic_diversity", strategy, div["semantic_diversity"], n=n, unit="fraction",
                         method="1 - mean pairwise cosine", note=str(div["semantic_note"]), probe_set=probe_set))
    V = len(res.cad)
    gated, ungated = res.category_counts(True), res.category_counts(False)
    for c in CATEGORIES:
        rows.append(_row(model, f"{c}_count", strategy, gated[c], n=V, unit="words",
                         method="CAD, gated: BH q < p* = 0.05", probe_set=probe_set))
        rows.append(_row(model, f"{c}_count_ungated", strategy, ungated[c], n=V, unit="words",
                         method="CAD, ungated (headline rule)", probe_set=probe_set))
    w = res.wae.set_index(["weighting", "group"])
    meth = f"percentile bootstrap over reports (B = {B}); p: label permutation ({n_perm})"
    for metric, key in (("wae_pred", ("pred", "all")), ("wae_ref", ("ref", "all")), ("delta_wae", ("pred", "delta")),
                        ("delta_wae_ref", ("ref", "delta")), ("wae_pred_F", ("pred", "F")),
                        ("wae_pred_M", ("pred", "M"))):
        r = w.loc[key]
        note = f"p_perm = {r['p_perm']:.4g}"
        if bool(r.get("point_outside_ci", False)):
            note += (f"; the point lies outside its percentile interval (bootstrap bias {r['boot_bias']:+.3g}: "
                     f"resampling inflates squared z); bias-corrected {r['value_bias_corrected']:.3g}, basic "
                     f"interval [{r['ci_low_basic']:.3g}, {r['ci_high_basic']:.3g}]")
        rows.append(_row(model, metric, strategy, r["value"], n=n, unit="z^2", method=meth,
                         note=note, ci=(r["ci_low"], r["ci_high"]), probe_set=probe_set))
    base = res.baselines.set_index(["metric", "corpus"])
    if ("delta_dir", "predictions") in base.index:
        rows.append(_row(model, "delta_dir", strategy, base.loc[("delta_dir", "predictions"), "value"], n=n,
                         unit="ratio", method="DIR(pred) - DIR(ref); DIR = tokens per M / per F report",
                         probe_set=probe_set))
    return rows


def strategy_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per model x strategy with the headline numbers (for the report and ``by_strategy.csv``)."""
    wide = metrics.pivot_table(index=["model", "subset"], columns="metric", values="point", aggfunc="first")
    lo = metrics.pivot_table(index=["model", "subset"], columns="metric", values="ci_low", aggfunc="first")
    hi = metrics.pivot_table(index=["model", "subset"], columns="metric", values="ci_high", aggfunc="first")
    n = metrics[metrics["metric"] == "template_diversity"].set_index(["model", "subset"])["n"]
    out = wide.copy()
    for m in ("wae_pred", "wae_ref", "delta_wae"):
        out[f"{m}_ci_low"], out[f"{m}_ci_high"] = lo[m], hi[m]
    out["n_reports"] = n
    out = out.reset_index().rename(columns={"subset": "strategy"})
    order = {s: i for i, s in enumerate(STRATEGIES)}
    out["_o"] = out["strategy"].map(order)
    return out.sort_values(["model", "_o"]).drop(columns="_o").reset_index(drop=True)


def _ci(point: Any, lo: Any, hi: Any) -> str:
    """``point [lo, hi]``, marked † when the point lies outside its interval (see the table's caption)."""
    mark = "" if any(map(math.isnan, (point, lo, hi))) or lo <= point <= hi else " †"
    return f"{format_number(point, 'z')} [{format_number(lo, 'z')}, {format_number(hi, 'z')}]{mark}"


def _table_html(t: pd.DataFrame, ref_div: dict[str, Any]) -> str:
    show = pd.DataFrame({
        "model": t["model"], "strategy": t["strategy"], "reports": t["n_reports"].astype(int),
        "template div.": t["template_diversity"].map(lambda v: f"{v:.3f}"),
        "TTR": t["ttr"].map(lambda v: f"{v:.4f}"),
        "1 - Self-BLEU": t["one_minus_self_bleu"].map(lambda v: f"{v:.3f}"),
        "vocabulary": t["vocabulary_size"].astype(int),
        "erasure (ungated / gated)": [f"{int(a)} / {int(b)}" for a, b in zip(t["erasure_count_ungated"], t["erasure_count"])],
        "new bias": [f"{int(a)} / {int(b)}" for a, b in zip(t["new_bias_count_ungated"], t["new_bias_count"])],
        "bias flip": [f"{int(a)} / {int(b)}" for a, b in zip(t["bias_flip_count_ungated"], t["bias_flip_count"])],
        "preservation": [f"{int(a)} / {int(b)}" for a, b in zip(t["preservation_count_ungated"], t["preservation_count"])],
        "WAE_pred [95% CI]": [_ci(*x) for x in zip(t["wae_pred"], t["wae_pred_ci_low"], t["wae_pred_ci_high"])],
        "WAE_ref [95% CI]": [_ci(*x) for x in zip(t["wae_ref"], t["wae_ref_ci_low"], t["wae_ref_ci_high"])],
        "ΔWAE [95% CI]": [_ci(*x) for x in zip(t["delta_wae"], t["delta_wae_ci_low"], t["delta_wae_ci_high"])],
    })
    ref = {"model": "reference corpus", "strategy": "—", "reports": ref_div["n_reports"],
           "template div.": f"{ref_div['template_diversity']:.3f}", "TTR": f"{ref_div['ttr']:.4f}",
           "1 - Self-BLEU": f"{ref_div['one_minus_self_bleu']:.3f}", "vocabulary": ref_div["vocabulary_size"]}
    show = pd.concat([show, pd.DataFrame([ref])], ignore_index=True)
    cap = ("By decoding strategy: diversity, CAD category counts (ungated / BH-gated) and WAE with "
           "percentile-bootstrap intervals. Headlines use the ungated counts.")
    wae_cols = ("WAE_pred [95% CI]", "WAE_ref [95% CI]", "ΔWAE [95% CI]")
    if any(isinstance(c, str) and c.endswith(" †") for col in wae_cols for c in show[col]):
        cap += (" † The observed value lies outside its percentile interval: each resample adds sampling noise to "
                "every squared z_disp, so bootstrap WAEs run high. wae.csv gives the bootstrap bias, the bias-corrected "
                "value and the basic interval; the permutation p-value is the test.")
    return table_to_html(show, caption=cap)


def paired_table_html(metrics: pd.DataFrame, names: set[str]) -> str:
    """Similarity of each model x strategy's reports to their paired reference reports (the paper's "clinical
    accuracy" block): one column per paired metric, mean [95% CI]; a sentence when nothing paired."""
    paired = metrics[metrics["metric"].isin(list(names))]
    if paired.empty:
        return ("<p>No report paired with a reference report (by the image set's <code>reference_id</code> or the "
                "case id), so BLEU, ROUGE and BERTScore were not computed.</p>")
    order = {s: i for i, s in enumerate(STRATEGIES)}
    cols = [m for m in PAIRED_LABELS if m in set(paired["metric"])]
    cols += sorted(set(paired["metric"]) - set(cols))
    out = []
    for (model, strategy), g in sorted(paired.groupby(["model", "subset"]), key=lambda kv: (kv[0][0],
                                                                                           order.get(kv[0][1], 99))):
        g = g.set_index("metric")
        row: dict[str, Any] = {"model": model, "strategy": strategy, "pairs": int(g["n"].max())}
        for m in cols:
            if m not in g.index:
                row[PAIRED_LABELS.get(m, m)] = "—"
                continue
            r = g.loc[m]
            v = f"{r['point']:.3f}"
            if not (math.isnan(r["ci_low"]) or math.isnan(r["ci_high"])):
                v += f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
            row[PAIRED_LABELS.get(m, m)] = v
        out.append(row)
    methods = paired.drop_duplicates("metric").set_index("metric")["method"]
    bs = methods.get("bertscore_f1")
    cap = ("Similarity of each report to its image's reference report: corpus BLEU, mean ROUGE and BERTScore with "
           "95% cluster-bootstrap intervals over reference reports.")
    if isinstance(bs, str):
        cap += " " + bs.split("; percentile")[0].removeprefix("mean ") + "."
    return table_to_html(pd.DataFrame(out), caption=cap)


def analyse_reports(tidy: pd.DataFrame, opts: Any, *, fmt: str = "svg") -> SuiteResult:
    """Run the corpus audit per model x strategy and assemble the suite result."""
    from medvlm_audit.suites.reports.clinical import load_clinical_metric
    from medvlm_audit.suites.reports.figures import cad_scatter_figure, vocabulary_transition_figure

    ref = reference_corpus(opts.reference)
    flags = {"auto": "auto", "on": True, "off": False}
    sem = flags[opts.semantic]
    clinical = [load_clinical_metric(c.name, c.path, where=f"option 'clinical_metrics' ({c.name})", **c.params)
                for c in opts.clinical_metrics]
    probe_set = ",".join(sorted(tidy["probe_set"].dropna().astype(str).unique())) or "reports"
    rows: list[dict[str, Any]] = []
    cads, waes, divs = [], [], []
    skipped: dict[str, str] = {}
    paired_names: set[str] = set()
    ref_div: dict[str, Any] = {}
    order = {s: i for i, s in enumerate(STRATEGIES)}
    for model in sorted(tidy["model"].unique()):
        m = tidy[tidy["model"] == model]
        for strategy in sorted(m["strategy"].unique(), key=lambda s: order.get(s, 99)):
            g = m[m["strategy"] == strategy]
            try:
                pred, ref_ids = predictions_corpus(g, f"{model} / {strategy}")
            except CorpusError as e:
                skipped[f"{model} / {strategy}"] = str(e)
                continue
            res = corpus_audit(ref, pred, None, B=opts.B, n_perm=opts.n_perm, seed=0, semantic=sem,
                               reference_ids=ref_ids, bertscore=flags[opts.bertscore],
                               bertscore_model=opts.bertscore_model, bertscore_layers=opts.bertscore_layers,
                               clinical=clinical, surface_max=opts.surface_max)
            rows += metric_rows(res, model, strategy, probe_set, opts.B, opts.n_perm)
            rows += paired_rows(res, model, strategy, probe_set)
            paired_names |= {str(m) for f in (res.surface, res.clinical) if f is not None for m in f["metric"]}
            cads.append(res.cad.assign(model=model, strategy=strategy))
            waes.append(res.wae.assign(model=model, strategy=strategy))
            d = res.diversity.assign(model=model, strategy=strategy)
            divs.append(d[d["corpus"] == "predictions"])
            if not ref_div:
                ref_div = res.diversity.set_index("corpus").loc["reference"].to_dict()
                divs.insert(0, d[d["corpus"] == "reference"].assign(model="", strategy=""))
    metrics = pd.DataFrame(rows, columns=list(METRICS_COLUMNS))
    if metrics.empty:
        raise CorpusError("no model x strategy has reports of both groups to audit: "
                          + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    table = strategy_table(metrics)
    cad = pd.concat(cads, ignore_index=True)
    front = ["model", "strategy"]
    cad = cad[front + [c for c in cad.columns if c not in front]]
    tables = {"by_strategy": table, "cad": cad, "wae": pd.concat(waes, ignore_index=True)[
        ["model", "strategy", *waes[0].columns.drop(["model", "strategy"])]],
        "diversity": pd.concat(divs, ignore_index=True)}
    for s in cad["strategy"].unique():
        tables["cad_" + re.sub(r"[^A-Za-z0-9]", "_", s)] = cad[cad["strategy"] == s].reset_index(drop=True)
    sections = [Section("By decoding strategy", _table_html(table, ref_div)),
                Section("Similarity to the reference reports", paired_table_html(metrics, paired_names))]
    verdicts: dict[str, str] = {}
    for model in table["model"].unique():
        t = table[table["model"] == model].set_index("strategy")
        strategies = list(t.index)
        labels = {s: STRATEGIES[s].label for s in strategies if s in STRATEGIES}
        sections.append(Section(f"CAD scatter: {model}", figure_to_html(
            cad_scatter_figure(cad, model, strategies, labels), fmt=fmt)))
        sections.append(Section(f"Vocabulary and transitions: {model}", figure_to_html(
            vocabulary_transition_figure(table, int(ref_div.get("vocabulary_size", 0)), model, labels), fmt=fmt)))
        det = [s for s in strategies if s not in STOCHASTIC]
        sto = [s for s in strategies if s in STOCHASTIC]
        if det and sto:
            td = ", ".join(f"{s} {t.loc[s, 'template_diversity']:.3f} (n = {int(t.loc[s, 'n_reports'])})"
                           for s in strategies)
            er = ", ".join(f"{s} {int(t.loc[s, 'erasure_count_ungated'])}" for s in strategies)
            wae = ", ".join(f"{s} {_ci(t.loc[s, 'wae_pred'], t.loc[s, 'wae_pred_ci_low'], t.loc[s, 'wae_pred_ci_high'])}"
                            for s in (det[0], sto[-1]))
            verdicts[model] = (f"unique reports (template diversity) {td}; sex-associated words erased (ungated "
                               f"CAD, word counts) {er}; WAE_pred [95% CI] {wae}")
            if "†" in wae:
                verdicts[model] += " († the point lies outside its percentile interval: see the table's note)"
    summary = {"reference": {"spec": opts.reference, "source": ref.source, "n": len(ref), **ref.counts()},
               "reference_diversity": {k: (float(v) if isinstance(v, (int, float, np.floating, np.integer)) else v)
                                       for k, v in ref_div.items()},
               "B": opts.B, "n_perm": opts.n_perm, "headline_rule": "ungated", "skipped": skipped,
               "strategies": {s: STRATEGIES[s].label for s in table["strategy"].unique() if s in STRATEGIES}}
    eff = effective_table(tidy, getattr(opts, "max_new_tokens", None))
    if len(eff):
        tables["effective_decoding"] = eff
        flagged = eff[(eff["mismatch"].astype(str).str.len() > 0) & (eff["mismatch"] != "not recorded")]
        summary["decoding_mismatches"] = {f"{r.model} / {r.strategy}": r.mismatch for r in flagged.itertuples()}
        for r in flagged.itertuples():
            if r.model in verdicts:
                verdicts[r.model] += f"; decoding of {r.strategy} differs from its label ({r.mismatch})"
        show = eff.drop(columns=["stop"]).fillna("server default")
        cap = ("What each engine was asked per model and strategy, read off the sent request as that engine reads "
               "it (top_k 0 = off; 'server default' = not sent, left to the server or the model's generation "
               "config). 'mismatch' lists the fields that differ from the strategy's label: a flagged row is not "
               "the strategy its label names.")
        sections.append(Section("Decoding as run", table_to_html(show, caption=cap)))
    intro = ("Reports written per image under each decoding strategy, audited against the reference corpus: "
             "template diversity, type-token ratio and 1 - Self-BLEU measure collapse; CAD counts sex-associated "
             "words erased, newly biased, flipped or preserved (ungated rule for headlines, BH-gated beside it); "
             "WAE is the mean squared displacement weighted by prediction (WAE_pred) or reference (WAE_ref) counts.")
    return SuiteResult(metrics=metrics, sections=sections, verdicts=verdicts, summary=summary, tables=tables,
                       intro=intro)
