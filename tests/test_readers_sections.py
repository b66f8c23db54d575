"""The reader-study sections (run report and `readers analyse` page) are written like every suite's: a verdict per
reader in words, compact tables instead of the long metrics schema (no method repeated per row), figure text of
at least 7.5 pt (>= 10 px on the page) and no two texts of a figure overlapping (panel c names its points in a
legend)."""

from __future__ import annotations

import re
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_readers_analysis import MODEL, READER_A, READER_B, _export, _tidy

from medvlm_audit.readers.analysis import analyse_exports, reader_sections, write_analysis
from medvlm_audit.readers.sections import metrics_html, reader_verdicts
from medvlm_audit.report.html import DISPLAY_PX_PER_PT

B = 200
MODELS = ["local-evidence", "finding-prior", "sees-the-image-a-little", "uniform-yes", "m"]
ALT = {"c1": (1, 1, 1), "c2": (1, 0, 1), "c3": (1, 1, 1), "c4": (0, 1, 0)}


def _exports(base: Path) -> tuple[list[Path], pd.DataFrame]:
    reads = pd.concat([_tidy("reader:a", READER_A, "reader"), _tidy("reader:b", READER_B, "reader")])
    ans = [{"reader": m[7:], "case_id": r.case_id, "condition": r.condition, "answer": "yes" if r.parsed else "no",
            "probe_set": "ps"} for m, g in reads.groupby("model") for r in g.itertuples()]
    fp = _export(base / "fp", "finding-presence", ans, reads=reads)
    bv = [{"reader": rd, "case_id": c, "finding": f, "answer": v, "probe_set": "ps"} for rd in ("a", "b")
          for c, f, v in (("c1", "edema", "accurate"), ("c3", "edema", "accurate"), ("c2", "nodule", "partial"),
                          ("c4", "nodule", "not_assessable"))]
    fm = [{"reader": "a", "case_id": f"c{i}", "model": mm, "answer": v, "probe_set": "ps"} for mm in MODELS[:3]
          for i, v in enumerate(["ambiguous_case", "ambiguous_case", "clear_model_failure", "other"])]
    run = pd.concat([_tidy(n, MODEL if i % 2 == 0 else ALT, "multimodal") for i, n in enumerate(MODELS)])
    return [fp, _export(base / "bv", "box-validation", bv), _export(base / "fm", "failure-modes", fm)], run


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    dirs, run = _exports(tmp_path_factory.mktemp("reads"))
    return analyse_exports(dirs, run_tidy=run, B=B)


def _section(res, title: str) -> str:
    return next(s.html for s in res.sections if s.title == title)


def test_sections_open_on_a_verdict_per_reader_in_words(analysed) -> None:
    assert analysed.sections[0].title == "Readers: verdicts"
    html = analysed.sections[0].html
    items = re.findall(r"<li>.*?</li>", html, re.DOTALL)
    assert len(items) == 2  # readers a and b
    a = next(i for i in items if "reader a" in i)
    assert 'class="badge"' in a and "uncertain agreement" in a
    assert "Agreement with b: almost perfect at worst" in a and "reaches down to moderate" in a
    assert "No model could be tested against this reader (too few shared cases" in a


def test_verdict_says_where_the_models_stand() -> None:
    comp = pd.DataFrame([{"family": "f", "probe_set": "ps", "metric": "accuracy", "subset": "all", "model_a": m,
                          "model_b": "reader:a", "diff": d, "sd": 1.0, "ci_low": lo, "ci_high": hi, "p": 0.01,
                          "p_adj": 0.02, "n": 40, "test": "paired-bootstrap", "note": ""}
                         for m, d, lo, hi in (("up", 10.0, 4.0, 16.0), ("down", -9.0, -15.0, -2.0),
                                              ("same", 1.0, -3.0, 5.0))])
    (name, cat, text), = reader_verdicts(pd.DataFrame(columns=["model", "metric", "subset", "point", "ci_low",
                                                                 "ci_high", "n", "unit", "note"]), comp)
    assert (name, cat) == ("a", "single reader")
    assert ("Models against this reader: on accuracy, above it: up; below it: down; 1 model not distinguishable "
            "from it.") in text


def test_metrics_are_compact_tables_not_the_long_schema(analysed) -> None:
    html = _section(analysed, "Reader-study metrics")
    assert "<th>method</th>" not in html and "<th>metric</th>" not in html and "<th>se</th>" not in html
    tables = re.findall(r"<table.*?</table>", html, re.DOTALL)
    head = tables[0]
    assert "Headline metrics on reader-sample" in head
    assert [h for h in re.findall(r"<th>(.*?)</th>", head)] == ["model", "accuracy", "sensitivity", "specificity",
                                                                 "cgr", "is"]
    assert len(re.findall(r"<tr>", head)) == 1 + 2 + len(MODELS)  # header, two readers, the models
    assert "75.0 [30.1, 95.4] (n = 4)" in head  # reader a's accuracy 3/4 with its Wilson interval
    # every metric's method is said once, in the list under the tables, not per row
    assert html.count("analytic SE sqrt(p(1-p)/n)") == len(set(analysed.metrics["metric"]) - {"kappa", "kappa_w"})
    # one note shared by every row is a line, not a column; a table per failure mode with readers' notes
    assert "Every row: classified by reader a." in html
    assert re.search(r"failure mode share by mode \(ps\)", html)
    cmp_html = _section(analysed, "Model minus reader (paired bootstrap, BH within metric and reader)")
    assert "Each model minus reader:a on all" in cmp_html and "<th>model_b</th>" not in cmp_html
    assert "+25.0 (n = 4)" in cmp_html  # local-evidence 4/4 minus reader a 3/4


def test_metrics_html_keeps_every_row_number() -> None:
    rows = [{"suite": "readers", "probe_set": "ps", "model": m, "metric": k, "subset": "all", "point": p,
             "se": 1.0, "ci_low": p - 5, "ci_high": p + 5, "n": 20, "unit": "%", "method": f"{int(p)}/20; Wilson",
             "note": ""} for m, k, p in (("reader:a", "accuracy", 80.0), ("reader:a", "cgr", 40.0),
                                         ("m", "accuracy", 70.0), ("m", "cgr", 55.0))]
    html = metrics_html(pd.DataFrame(rows))
    for text in ("80.0 [75.0, 85.0] (n = 20)", "55.0 [50.0, 60.0] (n = 20)"):
        assert text.count(text) == 1 and text in html
    assert html.count("Wilson") == 2  # once per metric (the counts 16/20, 8/20 stripped)


def _kappa(pair: str, point: float, lo: float, hi: float) -> dict:
    return {"suite": "readers", "probe_set": "ps", "model": pair, "metric": "kappa", "subset": "t", "point": point,
            "se": 0.1, "ci_low": lo, "ci_high": hi, "n": 50, "unit": "kappa", "method": "", "note": ""}


def test_reader_verdict_categories() -> None:
    met = pd.DataFrame([_kappa("a vs b", 0.85, 0.7, 0.95), _kappa("a vs c", 0.15, 0.0, 0.3),
                        {**_kappa("reader:d", 70.0, 60.0, 80.0), "metric": "accuracy", "unit": "%"}])
    got = {n: (c, t) for n, c, t in reader_verdicts(met, pd.DataFrame())}
    # a's pair with c stays below 0.4: inconsistent; b's only pair is tight; c shares a's poor pair
    assert {n: c for n, (c, _) in got.items()} == {"a": "inconsistent reference", "b": "consistent reference",
                                                   "c": "inconsistent reference", "d": "single reader"}
    assert "slight at worst (κ 0.150 [0.000, 0.300] on t, n = 50): its interval stays below 0.4" in got["a"][1]
    assert got["b"][1] == "Agreement with a: almost perfect at worst (κ 0.850 [0.700, 0.950] on t, n = 50)."
    # a high kappa on few items is not a disagreement: its interval is too wide to tell
    met = pd.DataFrame([_kappa("a vs b", 0.8, -0.5, 0.95)])
    assert {c for _, c, _ in reader_verdicts(met, pd.DataFrame())} == {"uncertain agreement"}
    met = pd.DataFrame([_kappa("a vs b", 0.6, 0.35, 0.8)])
    assert {c for _, c, _ in reader_verdicts(met, pd.DataFrame())} == {"uncertain agreement"}


def test_figure_text_is_readable_and_never_overlaps(analysed) -> None:
    assert {"finding-presence", "box-validation", "failure-modes", "agreement"} <= set(analysed.figures)
    for key, fig in analysed.figures.items():
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)  # lay the texts out as the page shows them
        texts = [t for t in fig.findobj(lambda o: hasattr(o, "get_text") and hasattr(o, "get_fontsize"))
                 if t.get_visible() and t.get_text().strip()]
        scale = min(1.0, 10.5 / fig.get_figwidth())  # a figure wider than the page is shrunk to fit it
        small = [(t.get_text(), t.get_fontsize()) for t in texts
                 if t.get_fontsize() * DISPLAY_PX_PER_PT * scale < 10.0]
        assert not small, f"{key}: text under 10 px on the page: {small[:5]}"
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
        overlaps = [(a, b) for (a, ba), (b, bb) in combinations(boxes, 2)
                    if ba.width and bb.width and ba.overlaps(bb)
                    and min(ba.x1, bb.x1) - max(ba.x0, bb.x0) > 1 and min(ba.y1, bb.y1) - max(ba.y0, bb.y0) > 1]
        assert not overlaps, f"{key}: overlapping texts: {overlaps[:5]}"
    c = analysed.figures["finding-presence"].axes[2]
    assert not c.texts  # panel c writes no name beside a point ...
    assert [t.get_text() for t in c.get_legend().get_texts()] == ["reader:a", "reader:b", *MODELS]  # ... a legend


def _overlapping_texts(fig) -> list[tuple[str, str]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    texts = [t for t in fig.findobj(lambda o: hasattr(o, "get_text") and hasattr(o, "get_fontsize"))
             if t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for (a, ba), (b, bb) in combinations(boxes, 2)
            if min(ba.x1, bb.x1) - max(ba.x0, bb.x0) > 1 and min(ba.y1, bb.y1) - max(ba.y0, bb.y0) > 1]


def test_benchmark_landscape_labels_a_shared_cell_once(tmp_path: Path) -> None:
    scales = ("reasoning_complexity", "visual_detail_required")
    ratings = {"vqa-rad": ("1", "3"), "slake": ("1", "3"), "pmc-vqa": ("2", "1"), "nejm": ("3", "3")}
    ans = [{"reader": r, "case_id": b, "benchmark": b, "scale": sc, "answer": v}
           for b, vs in ratings.items() for sc, v in zip(scales, vs) for r in "xy"]
    res = analyse_exports([_export(tmp_path / "bp", "benchmark-profile", ans, scales=scales)], B=B)
    ax = res.figures["benchmark-profile"].axes[0]
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["nejm", "pmc-vqa", "slake\nvqa-rad"]  # one label for the two benchmarks at (1, 3)
    assert not _overlapping_texts(res.figures["benchmark-profile"])
    html = _section(res, "Reader-study metrics")
    assert "<th>method</th>" not in html


def test_each_subset_several_metrics_share_is_one_table(tmp_path: Path) -> None:
    """CoT ratings on two scales by three readers: a table per scale (a row per reader pair and Fleiss' row, a
    column per agreement metric) and one of the readers' means (a column per scale), never a row per metric."""
    ans = [{"reader": r, "item_id": f"i{k}", "case_id": f"i{k}", "scale": sc, "answer": v}
           for sc in ("completeness", "plausibility")
           for r, vals in (("a", "123434"), ("b", "124443"), ("c", "223444")) for k, v in enumerate(vals)]
    res = analyse_exports([_export(tmp_path / "cot", "cot-rating", ans, scales=("completeness", "plausibility"))],
                          B=B)
    html = _section(res, "Reader-study metrics")
    caps = re.findall(r"<caption>(.*?)</caption>", html)
    assert caps == ["Headline metrics on axis=completeness (cot-rating)", "Metrics on axis=plausibility (cot-rating)",
                    "Metrics on all (cot-rating)"]
    tables = re.findall(r"<table.*?</table>", html, re.DOTALL)
    assert re.findall(r"<th>(.*?)</th>", tables[0]) == ["model", "kappa w", "percent agreement", "fleiss kappa"]
    assert re.findall(r"<tr><td>(.*?)</td>", tables[0]) == [
        "a vs b", "a vs c", "b vs c", "readers"]  # the reader pairs, then Fleiss' row
    assert re.findall(r"<th>(.*?)</th>", tables[2]) == ["model", "mean:completeness", "mean:plausibility"]


def test_run_report_hook_and_readers_analyse_page_use_the_same_sections(tmp_path: Path, analysed) -> None:
    run_dir = tmp_path / "run"
    dirs, run = _exports(run_dir / "readers")
    secs = reader_sections(run_dir, run, B=B)
    assert sorted(s.title for s in secs) == sorted(s.title for s in analysed.sections)
    assert secs[0].title == "Readers: verdicts"
    write_analysis(analysed, tmp_path / "out")
    page = (tmp_path / "out" / "readers-report.html").read_text()
    assert 'class="verdicts"' in page and "Headline metrics on reader-sample" in page
    assert "<th>method</th>" not in page
    assert np.isfinite(analysed.metrics["point"].astype(float)).any()
