"""The report layout rules every suite goes through (issue 13, "Reports"): a figure that carries no information is
a one-line note, not an image; one with a single value per panel is collapsed; n lists travel as a counts table
under the figure; keys read as words in titles; wide tables are shaped to fit (constant columns named once, long
notes as footnotes, column groups)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from medvlm_audit.report.figures import captioned, information, key_in_words, n_table_of, new_figure
from medvlm_audit.report.html import figure_to_html
from medvlm_audit.report.sections import compact_table_html
from medvlm_audit.suites.grounding.figures import family_words, forest_figure

RAW_KEY = re.compile(r"^[\w.-]+:[\w.-]+:[\w.-]+")


def _scatter(xs: list[float], ys: list[float]):
    fig = new_figure(3, 2)
    ax = fig.add_subplot()
    ax.scatter(xs, ys)
    ax.axhline(0.5)  # a reference line is not data
    ax.plot([0, 1], [0, 1], linestyle="--")  # nor is a dashed identity line
    return fig


def test_information_rule() -> None:
    assert information(_scatter([np.nan, np.nan], [1.0, 2.0]))[0] == "none"  # every value nan
    assert information(_scatter([0.3], [0.4]))[0] == "little"  # a single point
    assert information(_scatter([0.3, 0.6], [0.4, 0.1]))[0] == "full"
    fig = new_figure(3, 2)
    fig.add_subplot().imshow(np.full((3, 4), np.nan))
    assert information(fig)[0] == "none"  # an all-nan heatmap
    fig = new_figure(3, 2)
    fig.add_subplot().plot([0, 1], [1, 0])  # a solid data line with two vertices
    assert information(fig)[0] == "full"
    fig = new_figure(3, 2)
    fig.add_subplot().bar(["a", "b"], [3.0, 0.0])  # a bar of height 0 is a value
    assert information(fig)[0] == "full"
    declared = captioned(_scatter([0.3, 0.6], [0.4, 0.1]), "Prompt phrasing", "not run.", empty="prompt variants not run")
    assert information(declared) == ("none", "prompt variants not run")


def test_a_figure_where_nothing_varies_is_one_sentence() -> None:
    fig = new_figure(3, 2)
    fig.add_subplot().imshow(np.full((3, 4), 100.0))  # every cell 100.0
    level, why = information(fig)
    assert level == "none" and why == "every value it would show is 100.0 (nothing varies)"
    html = figure_to_html(captioned(fig, "Parse rate", "Parse rate per model and condition."), number=2,
                          title="Parse rate")
    assert "<svg" not in html
    assert html == ('<p class="fignote"><strong>Figure 2. Parse rate:</strong> not drawn, '
                    'every value it would show is 100.0 (nothing varies).</p>')
    fig = new_figure(3, 2)
    fig.add_subplot().imshow(np.array([[100.0, 100.0], [100.0, 99.0]]))  # one cell differs: drawn
    assert information(fig)[0] == "full"
    # a forest-style panel: points on named rows, every value 0.0 on the measured axis
    fig = new_figure(3, 2)
    ax = fig.add_subplot()
    ax.scatter([0.0, 0.0, 0.0], [0, 1, 2])
    ax.set_yticks([0, 1, 2], ["model a", "model b", "model c"])
    assert information(fig) == ("none", "every value it would show is 0.0 (nothing varies)")
    ax.scatter([0.2], [1])  # one point moves: drawn
    assert information(fig)[0] == "full"
    # two measured axes: x constant but y varying is information (a vertical spread)
    assert information(_scatter([0.5, 0.5], [0.1, 0.9]))[0] == "full"
    fig = new_figure(3, 2)
    fig.add_subplot().bar(["a", "b", "c"], [100.0, 100.0, 100.0])  # equal bars
    assert information(fig)[0] == "none"
    fig = new_figure(3, 2)
    fig.add_subplot().barh(["a", "b"], [3.0, 4.0])  # horizontal bars: the lengths are the widths
    assert information(fig)[0] == "full"
    fig = new_figure(3, 2)
    fig.add_subplot().plot([1, 2, 3], [0.5, 0.5, 0.5], marker="o")  # a flat line: its x is where, not what
    assert information(fig) == ("none", "every value it would show is 0.5 (nothing varies)")


def test_figure_to_html_applies_the_rule_and_shows_the_counts_table() -> None:
    empty = captioned(_scatter([np.nan], [np.nan]), "Calibration", "Calibration on phantom.")
    html = figure_to_html(empty, number=3, title="Calibration")
    assert "<svg" not in html and "<img" not in html
    assert html == '<p class="fignote"><strong>Figure 3. Calibration:</strong> not drawn, no estimable value in this run.</p>'
    png = figure_to_html(captioned(_scatter([np.nan], [np.nan]), "t", "c"), fmt="png")
    assert "<img" not in png and "not drawn" in png

    one = captioned(_scatter([0.3], [0.4]), "Resolution", "One model.")
    html = figure_to_html(one, number=4, title="Resolution")
    assert html.startswith('<details class="figlittle"><summary>Figure 4. Resolution: one value per panel')
    assert "<svg" in html

    counts = pd.DataFrame({"model": ["a", "b"], "n": ["12", "1,300"]})
    full = captioned(_scatter([0.3, 0.6], [0.4, 0.1]), "Accuracy", "Accuracy; n per model in the table below.",
                     n_table=counts)
    assert n_table_of(full) is counts
    html = figure_to_html(full, number=1, title="Accuracy")
    cap_at, table_at = html.index("<figcaption>"), html.index('<details class="ntable" open>')
    assert cap_at < table_at < html.index("</figure>")  # under the figure, inside it
    assert "<td>1,300</td>" in html
    long = pd.DataFrame({"subgroup": [f"s{k}" for k in range(20)], "n": ["5"] * 20})
    html = figure_to_html(captioned(_scatter([0.3, 0.6], [0.4, 0.1]), "S", "c", n_table=long))
    assert '<details class="ntable">' in html  # long counts tables start collapsed


def test_key_in_words() -> None:
    assert family_words("baseline:phantom:accuracy:finding-prior") == (
        "Accuracy on phantom: each model vs text-only baseline finding-prior")
    assert family_words("baseline:phantom:accuracy:finding-prior|mcnemar") == (
        "Accuracy on phantom: each model vs text-only baseline finding-prior (exact McNemar test)")
    assert family_words("pairs:phantom:uar") == "UAR on phantom: every pair of models"
    assert family_words("subgroups:phantom:reader") == "Subgroup differences on phantom: reader"
    assert family_words("robustness:phantom:resolution:cgr") == "CGR on phantom: resolution robustness"
    assert key_in_words("tb_la:misleading", {"tb_la": "text cue"}) == "Text cue, misleading"
    assert key_in_words("flip_rate") == "Flip rate"


def test_forest_panel_titles_are_words() -> None:
    comp = pd.DataFrame({
        "family": ["baseline:ps:accuracy:prior", "pairs:ps:accuracy"], "probe_set": "ps", "metric": "accuracy",
        "subset": "all", "model_a": ["a", "a"], "model_b": ["prior", "b"], "diff": [3.0, -2.0], "sd": 1.0,
        "ci_low": [1.0, -4.0], "ci_high": [5.0, 0.0], "p": 0.01, "p_adj": 0.02, "n": 100, "test": "paired-bootstrap",
        "note": ""})
    fig = forest_figure(comp, families=list(comp["family"]), title="Paired differences")
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == ["Accuracy on ps: each model vs text-only baseline prior", "Accuracy on ps: every pair of models"]
    texts = [t.get_text() for ax in fig.axes for t in [*ax.texts, *ax.get_yticklabels(), ax.xaxis.label]]
    assert not [t for t in [*titles, *texts] if RAW_KEY.match(t)]
    empty = forest_figure(comp.iloc[:0], families=["pairs:ps:uar"], title="None")
    assert information(empty) == ("none", "no comparisons were computed")


def test_compact_table_fits() -> None:
    df = pd.DataFrame({
        "model": ["a", "b", "c"], "probe_set": ["ps"] * 3, "x1": [1, 2, 3], "x2": [4, 5, 6], "x3": [7, 8, 9],
        "empty": [None, None, None],
        "note": ["a long note that would wrap into a tall row of a narrow column, number one", "",
                 "a long note that would wrap into a tall row of a narrow column, number one"]})
    html = compact_table_html(df, keys=("model",), max_columns=3, table_id="t")
    assert "Same in every row: probe_set: ps." in html
    assert "empty" not in html  # a column with nothing in it is dropped
    tables = re.findall(r"<table.*?</table>", html)
    assert len(tables) == 2 and all("<th>model</th>" in t for t in tables)  # split, keys repeated
    assert 'id="t"' in tables[0] and 'id="t-2"' in tables[1]
    assert html.count("<td>[1]</td>") == 2 and '<ol class="tnotes"><li>a long note' in html
    assert "wrap into a tall row" not in "".join(tables)  # the note is under the table, not in a cell
    grouped = compact_table_html(df, keys=("model",), groups=(("First", ("x1",)), ("Rest", ("x2", "x3"))),
                                 drop_constant=False)
    assert "<caption>First</caption>" in grouped and "<caption>Rest</caption>" in grouped
    assert "<caption>Other columns</caption>" in grouped  # probe_set and note were in no group


def _tick_boxes(fig) -> list[tuple[str, object]]:
    """The drawn x tick labels of every panel with their boxes on the canvas (axis-aligned, as a browser measures)."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(r)) for ax in fig.axes for t in ax.get_xticklabels()
            if t.get_text().strip()]


def _overlapping(boxes: list[tuple[str, object]]) -> list[tuple[str, str]]:
    out = []
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            w = min(a.x1, b.x1) - max(a.x0, b.x0)
            h = min(a.y1, b.y1) - max(a.y0, b.y0)
            if w > 1 and h > 1:
                out.append((ta, tb))
    return out


def test_x_tick_labels_never_overlap() -> None:
    """Issue 24: x tick labels are wrapped to the space between ticks, staggered when a word is wider than that
    and vertical as a last resort; no two drawn labels overlap, the block's height in lines comes back for the
    bottom margin, and the labels inside the figure."""
    from medvlm_audit.report.figures import label_lines_in, margins, x_tick_labels

    findings = ["atelectasis", "cardiomegaly", "consolidation", "pulmonary edema", "lung opacity",
                "pleural effusion", "pneumonia", "pneumothorax", "lung nodule"]
    models = [f"{m}\n(n = 300)" for m in ("local-evidence", "finding-prior", "occlusion-unstable", "always-yes",
                                           "global-probe")]
    cases = [  # (width in inches, labels, expected regime)
        (6.0, models, "wrapped"),
        (7.5, findings, "staggered"),
        (3.0, findings, "vertical"),
    ]
    for width, labels, regime in cases:
        fig = new_figure(width, 3.0)
        ax = fig.add_subplot()
        ax.bar(range(len(labels)), np.arange(len(labels)) + 1.0)
        margins(fig, left=0.6, right=0.2)
        lines = x_tick_labels(ax, range(len(labels)), labels, size=7.5)
        margins(fig, left=0.6, right=0.2, bottom=label_lines_in(lines) + 0.2)
        boxes = _tick_boxes(fig)
        assert len(boxes) == len(labels)
        assert not _overlapping(boxes), (regime, _overlapping(boxes))
        assert all(b.y0 >= 0 for _, b in boxes), f"{regime}: a label below the figure's edge"
        texts = [t for t, _ in boxes]
        rotations = {ax.get_xticklabels()[0].get_rotation()}
        if regime == "wrapped":
            assert rotations == {0.0} and texts[2] == "occlusion-\nunstable\n(n = 300)" and lines == 3
        elif regime == "staggered":
            assert rotations == {0.0} and boxes[1][1].y1 < boxes[0][1].y0 and abs(boxes[2][1].y1 - boxes[0][1].y1) < 0.5
        else:
            assert rotations == {90.0} and texts == findings
    # the old way (30 degrees, anchored right) overlaps on the same crowded axis: the check can fail
    fig = new_figure(7.5, 3.0)
    ax = fig.add_subplot()
    ax.bar(range(len(findings)), np.arange(len(findings)) + 1.0)
    ax.set_xticks(range(len(findings)), findings, rotation=30, ha="right", fontsize=7.5)
    assert _overlapping(_tick_boxes(fig))
