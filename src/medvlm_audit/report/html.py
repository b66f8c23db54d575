"""HTML building blocks (escaped tables, inline SVG figures, estimate formatting) and the self-contained report page.

The page has inline CSS, inline SVG figures and no script or external reference, so it opens from disk with no
server and no network. Missing values never print as "nan": estimates read "not estimable (n = 0)" or their note.
"""

from __future__ import annotations

import base64
import html as _html
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from medvlm_audit.report.sections import Section

__all__ = [
    "CATEGORY_COLORS",
    "CATEGORY_LABELS",
    "escape",
    "figure_to_html",
    "format_estimate",
    "format_number",
    "format_p",
    "is_missing",
    "render_report_html",
    "table_to_html",
]

#: category -> fill colour, as in the paper's figures (blue uses image, red ignores image, orange unstable).
CATEGORY_COLORS: dict[str, str] = {
    "uses_image": "#1f77b4",
    "ignores_image": "#d62728",
    "unstable": "#ff7f0e",
    "indeterminate": "#7f7f7f",
}
CATEGORY_LABELS: dict[str, str] = {
    "uses_image": "uses image",
    "ignores_image": "ignores image",
    "unstable": "unstable",
    "indeterminate": "indeterminate",
}

#: the headline metrics of the key-metrics table, in display order.
KEY_METRICS: tuple[tuple[str, str], ...] = (
    ("accuracy", "Accuracy"),
    ("sensitivity", "Sensitivity"),
    ("specificity", "Specificity"),
    ("parse_rate", "Parse rate"),
    ("cgr", "CGR"),
    ("uar", "UAR"),
    ("is", "IS"),
    ("gsp", "GSP"),
    ("auroc", "AUROC"),
    ("ece", "ECE"),
)

_NA = "—"


def escape(value: object) -> str:
    """HTML-escape any value's string form (quotes included)."""
    return _html.escape(str(value), quote=True)


def is_missing(value: object) -> bool:
    """True for None, NaN, NaT and pandas NA: the values that must never print as 'nan'."""
    if value is None:
        return True
    try:
        return bool(pd.isna(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _decimals(unit: str) -> int:
    return 3 if unit == "prob" else 1


def format_number(value: object, unit: str = "%", *, signed: bool = False) -> str:
    """One number at the unit's precision (1 decimal for % and pp, 3 for probabilities); '—' when missing."""
    if is_missing(value):
        return _NA
    x = float(value)  # type: ignore[arg-type]
    if not math.isfinite(x):
        return _NA
    d = _decimals(unit)
    if signed or unit == "pp":
        return f"{x:+.{d}f}"
    return f"{x:.{d}f}"


def _format_n(n: object) -> str:
    if is_missing(n):
        return "0"
    try:
        return f"{int(n):,}"  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return escape(n)


def format_estimate(
    point: object,
    se: object = None,
    ci_low: object = None,
    ci_high: object = None,
    n: object = None,
    unit: str = "%",
    note: object = "",
) -> str:
    """'78.3 ± 1.2 [75.9, 80.6] (n = 412)'; an undefined point gives the note or 'not estimable (n = k)'."""
    note_s = "" if is_missing(note) else str(note).strip()
    if is_missing(point) or not math.isfinite(float(point)):  # type: ignore[arg-type]
        if note_s:
            return note_s if "n =" in note_s else f"{note_s} (n = {_format_n(n)})"
        return f"not estimable (n = {_format_n(n)})"
    text = format_number(point, unit)
    if not is_missing(se) and math.isfinite(float(se)):  # type: ignore[arg-type]
        text += f" ± {format_number(se, unit).lstrip('+')}"
    if not (is_missing(ci_low) or is_missing(ci_high)):
        lo, hi = float(ci_low), float(ci_high)  # type: ignore[arg-type]
        if math.isfinite(lo) and math.isfinite(hi):
            text += f" [{format_number(lo, unit)}, {format_number(hi, unit)}]"
    if not is_missing(n):
        text += f" (n = {_format_n(n)})"
    return text


def format_p(p: object) -> str:
    """A p value as '0.012' or '< 0.001'; 'not estimable' when undefined."""
    if is_missing(p):
        return "not estimable"
    x = float(p)  # type: ignore[arg-type]
    if not math.isfinite(x):
        return "not estimable"
    if x < 0.001:
        return "< 0.001"
    return f"{x:.3f}"


def _default_cell(value: object) -> str:
    if is_missing(value):
        return _NA
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if not math.isfinite(x):
            return _NA
        if x == int(x) and abs(x) < 1e15:
            return f"{int(x)}"
        return f"{x:.3f}" if abs(x) < 1000 else f"{x:,.1f}"
    if isinstance(value, (int, np.integer)):
        return f"{int(value)}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_jsonable(value), sort_keys=True)
    return str(value)


def table_to_html(
    df: pd.DataFrame,
    *,
    caption: str | None = None,
    formatters: Mapping[str, Callable[[Any], str]] | None = None,
    html_columns: Iterable[str] = (),
    css_class: str = "tbl",
    table_id: str | None = None,
    max_rows: int | None = None,
) -> str:
    """Render a DataFrame as an escaped HTML table; missing cells print '—', never 'nan'.

    ``formatters`` map a column to a function of the cell value returning text (escaped afterwards);
    ``html_columns`` are columns whose formatted text is trusted markup (e.g. badges) and is not escaped.
    """
    formatters = dict(formatters or {})
    trusted = set(html_columns)
    rows = df if max_rows is None else df.head(max_rows)
    out: list[str] = [f'<div class="tblwrap"><table class="{escape(css_class)}"']
    if table_id:
        out.append(f' id="{escape(table_id)}"')
    out.append(">")
    if caption:
        out.append(f"<caption>{escape(caption)}</caption>")
    out.append("<thead><tr>")
    out.extend(f"<th>{escape(c)}</th>" for c in df.columns)
    out.append("</tr></thead><tbody>")
    cols = list(df.columns)
    for values in rows.itertuples(index=False, name=None):
        out.append("<tr>")
        for col, value in zip(cols, values):
            fmt = formatters.get(col)
            text = fmt(value) if fmt is not None else _default_cell(value)
            if text is None or (isinstance(text, float) and math.isnan(text)):
                text = _NA
            cell = str(text) if col in trusted else escape(text)
            out.append(f"<td>{cell}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    if max_rows is not None and len(df) > max_rows:
        out.append(f'<p class="muted">First {max_rows:,} of {len(df):,} rows shown; all rows are in the CSV.</p>')
    return "".join(out)


_XML_DECL = re.compile(r"<\?xml[^>]*\?>\s*", re.DOTALL)
_DOCTYPE = re.compile(r"<!DOCTYPE[^>]*>\s*", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.DOTALL)
_SVG_SIZE = re.compile(r'(<svg\b[^>]*?)\s(width|height)="[^"]*"', re.DOTALL)


def _svg_markup(fig: Figure, salt: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = _XML_DECL.sub("", svg)
    svg = _DOCTYPE.sub("", svg)
    svg = _METADATA.sub("", svg)
    svg = _COMMENT.sub("", svg)
    # drop the fixed pt size so CSS can scale the figure; the viewBox keeps its aspect ratio
    for _ in range(2):
        svg = _SVG_SIZE.sub(r"\1", svg, count=1)
    return svg.strip()


_FIG_COUNTER = [0]


def figure_to_html(
    fig: Figure,
    caption: str | None = None,
    *,
    fmt: str = "svg",
    title: str | None = None,
    number: int | None = None,
    dpi: int = 110,
) -> str:
    """Embed a matplotlib Figure as inline SVG (default) or a base64 PNG, with an escaped caption.

    The caption defaults to the one attached by the figure functions (see figures.caption_of).
    """
    from medvlm_audit.report.figures import caption_of

    if caption is None:
        caption = caption_of(fig)
    _FIG_COUNTER[0] += 1
    salt = f"medvlm-fig-{_FIG_COUNTER[0]}-{number if number is not None else ''}"
    if fmt == "svg":
        body = _svg_markup(fig, salt)
    elif fmt == "png":
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        alt = escape(title or caption or "figure")
        body = f'<img alt="{alt}" src="data:image/png;base64,{data}">'
    else:
        raise ValueError(f"figure format must be 'svg' or 'png', got {fmt!r}")
    label = f"Figure {number}. " if number is not None else ""
    head = f"<strong>{escape(label)}{escape(title)}.</strong> " if title else (
        f"<strong>{escape(label.strip())}</strong> " if label else ""
    )
    cap = f"<figcaption>{head}{escape(caption or '')}</figcaption>"
    return f'<figure class="fig">{body}{cap}</figure>'


# ----------------------------------------------------------------------------------------------------------------
# report page

_CSS = """
:root{--fg:#1b1f24;--muted:#5c6670;--line:#d6dbe0;--bg:#ffffff;--soft:#f5f7f9}
*{box-sizing:border-box}
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);background:var(--bg);
margin:0 auto;max-width:1180px;padding:24px}
h1{font-size:24px;margin:0 0 8px}h2{font-size:19px;margin:32px 0 10px;border-bottom:1px solid var(--line);
padding-bottom:4px}h3{font-size:15px;margin:20px 0 6px}
.muted{color:var(--muted)}
dl.runinfo{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0 16px;font-size:13px}
dl.runinfo dt{font-weight:600;color:var(--muted)}dl.runinfo dd{margin:0;word-break:break-word}
ul.verdicts{list-style:none;padding:0;margin:0}
ul.verdicts li{padding:7px 10px;border:1px solid var(--line);border-radius:6px;margin:6px 0;background:var(--soft)}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600;
margin-right:6px;white-space:nowrap}
.model{font-weight:600;margin-right:6px}
nav.toc{font-size:13px;margin:12px 0}nav.toc a{margin-right:12px}
figure.fig{margin:18px 0;padding:10px;border:1px solid var(--line);border-radius:6px;break-inside:avoid}
figure.fig svg,figure.fig img{display:block;max-width:100%;height:auto;margin:0 auto}
figcaption{font-size:13px;color:var(--fg);margin-top:6px}
.tblwrap{overflow-x:auto;margin:8px 0 16px}
table.tbl{border-collapse:collapse;font-size:12.5px}
table.tbl th,table.tbl td{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}
table.tbl th{background:var(--soft);position:sticky;top:0}
table.tbl caption{caption-side:top;text-align:left;font-weight:600;padding:4px 0}
details{margin:8px 0}summary{cursor:pointer;font-weight:600}
.notes{font-size:13px;background:#fff8e6;border:1px solid #f0d48a;border-radius:6px;padding:6px 10px;margin:8px 0}
.notes ul{margin:4px 0 0;padding-left:18px}
.failed{background:#fdecea;border:2px solid #c62828;border-radius:6px;padding:8px 12px;margin:12px 0;color:#7f1d1d}
.failed ul{margin:4px 0 0;padding-left:18px}
footer{margin-top:40px;font-size:12px;color:var(--muted)}
"""

#: (label, keys looked up in run_info then summary) for the run-information block, in display order.
_RUN_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Run id", ("run_id", "run_ids", "run")),
    ("Probe sets", ("probe_sets", "probe_set")),
    ("Models", ("models",)),
    ("Cases", ("n_cases", "cases")),
    ("Config", ("config", "config_summary")),
    ("Package version", ("package_version", "version")),
    ("Seeds", ("seeds", "seed")),
    ("Baselines", ("baselines",)),
    ("IS denominator", ("is_denominator", "is_denom", "is_denominator_used")),
    ("Resampling mode", ("resampling_mode", "mode", "resampling")),
    ("Resamples (B)", ("B", "b", "n_resamples", "n_boot", "bootstrap_resamples")),
    ("Permutations", ("n_permutations", "permutations")),
    ("Patient-clustered bootstrap", ("cluster_by_patient",)),
)


def _jsonable(value: Any) -> Any:
    """Plain-Python, JSON-safe copy: numpy scalars unwrapped, NaN/inf -> None, tuples -> lists."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        items = sorted(value, key=str) if isinstance(value, set) else value
        return [_jsonable(v) for v in items]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if value is None or isinstance(value, (str, int)):
        return value
    if is_missing(value):
        return None
    return str(value)


def _lookup(key_aliases: Sequence[str], *sources: Mapping[str, Any]) -> tuple[str | None, Any]:
    for src in sources:
        for key in key_aliases:
            if key not in src:
                continue
            value = src[key]
            if isinstance(value, (list, tuple, set, Mapping)) or not is_missing(value):
                return key, value
    return None, None


def _value_text(value: Any) -> str:
    if isinstance(value, Mapping):
        if value and all(isinstance(v, Mapping) for v in value.values()):
            return ", ".join(str(k) for k in value) or _NA  # e.g. {probe_set: {details}}: the names
        return "; ".join(f"{k}: {_value_text(v)}" for k, v in value.items()) or _NA
    if isinstance(value, (list, tuple, set)):
        return ", ".join(_value_text(v) for v in value) or _NA
    if is_missing(value):
        return "not recorded"
    if isinstance(value, float):
        return _default_cell(value)
    return str(value)


def _derived_cases(summary: Mapping[str, Any]) -> str | None:
    ps = summary.get("probe_sets")
    if not isinstance(ps, Mapping):
        return None
    parts = []
    for name, info in ps.items():
        if isinstance(info, Mapping) and "n_cases" in info and not is_missing(info["n_cases"]):
            extra = f", {int(info['n_boxed']):,} boxed" if _is_number(info.get("n_boxed")) else ""
            parts.append(f"{name}: {int(info['n_cases']):,}{extra}")
    return "; ".join(parts) or None


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not is_missing(x)


def _run_info_html(run_info: Mapping[str, Any], summary: Mapping[str, Any], derived: Mapping[str, Any]) -> str:
    # nested blocks first (e.g. summary["resampling"] = {"mode", "B", "seed", ...}), so scalars win over dicts
    resampling = summary.get("resampling")
    nested = [v for k in ("run_info", "run", "info") if isinstance(v := summary.get(k), Mapping)]
    sources: list[Mapping[str, Any]] = [run_info]
    if isinstance(resampling, Mapping):
        sources.append(resampling)
    sources += [*nested, summary, dict(derived, n_cases=_derived_cases(summary))]
    used: set[str] = set()
    items: list[str] = []
    for label, aliases in _RUN_FIELDS:
        key, value = _lookup(aliases, *sources)
        used.update(aliases)
        if key is None:
            text = "not recorded"
        else:
            text = _value_text(value)
            if key == "seed" and isinstance(resampling, Mapping) and resampling.get("seed") is value:
                text += " (resampling)"
        items.append(f"<dt>{escape(label)}</dt><dd>{escape(text)}</dd>")
    for key, value in run_info.items():
        if key not in used and not (is_missing(value) if not isinstance(value, (list, tuple, set, Mapping))
                                    else False):
            items.append(f"<dt>{escape(key)}</dt><dd>{escape(_value_text(value))}</dd>")
    return f'<dl class="runinfo">{"".join(items)}</dl>'


def _notes_html(summary: Mapping[str, Any]) -> str:
    notes = summary.get("notes")
    if isinstance(notes, str):
        notes = [notes]
    if not isinstance(notes, (list, tuple)) or not notes:
        return ""
    items = "".join(f"<li>{escape(_value_text(n))}</li>" for n in notes if not is_missing(n))
    return f'<div class="notes"><strong>Analysis notes</strong><ul>{items}</ul></div>' if items else ""


def badge(category: object) -> str:
    """A coloured category badge (trusted markup)."""
    cat = "indeterminate" if is_missing(category) else str(category)
    color = CATEGORY_COLORS.get(cat, CATEGORY_COLORS["indeterminate"])
    return f'<span class="badge" style="background:{color}">{escape(CATEGORY_LABELS.get(cat, cat))}</span>'


def model_order(analysis: Any) -> list[str]:
    """Models in first-seen order over categories, metrics and verdicts."""
    seen: dict[str, None] = {}
    for df in (analysis.categories, analysis.metrics):
        if isinstance(df, pd.DataFrame) and "model" in df.columns:
            for m in df["model"].tolist():
                if not is_missing(m):
                    seen.setdefault(str(m), None)
    for m in (analysis.verdicts or {}):
        seen.setdefault(str(m), None)
    return list(seen)


def probe_sets_of(analysis: Any) -> list[str]:
    """Probe sets in first-seen order over categories and metrics."""
    seen: dict[str, None] = {}
    for df in (analysis.categories, analysis.metrics):
        if isinstance(df, pd.DataFrame) and "probe_set" in df.columns:
            for p in df["probe_set"].tolist():
                if not is_missing(p):
                    seen.setdefault(str(p), None)
    return list(seen)


def _verdicts_html(analysis: Any) -> str:
    cats = analysis.categories
    items: list[str] = []
    multi = len(probe_sets_of(analysis)) > 1
    for model in model_order(analysis):
        rows = cats[cats["model"] == model] if len(cats) else cats
        badges = []
        for _, row in rows.iterrows():
            b = badge(row["category"])
            if multi:
                b = f'{b}<span class="muted">({escape(row["probe_set"])})</span> '
            badges.append(b)
        if not badges:
            badges.append(badge("indeterminate"))
        verdict = (analysis.verdicts or {}).get(model)
        text = escape(verdict) if verdict and not is_missing(verdict) else "no verdict recorded"
        items.append(f'<li><span class="model">{escape(model)}</span>{"".join(badges)} {text}</li>')
    return f'<ul class="verdicts">{"".join(items)}</ul>'


def _est_from_row(row: Mapping[str, Any]) -> str:
    return format_estimate(row.get("point"), row.get("se"), row.get("ci_low"), row.get("ci_high"),
                           row.get("n"), str(row.get("unit") or "%"), row.get("note", ""))


def key_metrics_table(metrics: pd.DataFrame, probe_set: str, models: Sequence[str]) -> pd.DataFrame:
    """Wide table of the headline metrics (subset 'all') for one probe set: one row per model, formatted."""
    m = metrics[(metrics["probe_set"] == probe_set) & (metrics["subset"] == "all")]
    present = [(k, lab) for k, lab in KEY_METRICS if (m["metric"] == k).any()]
    rows = []
    for model in models:
        mm = m[m["model"] == model]
        if mm.empty:
            continue
        rec: dict[str, str] = {"model": model, "modality": str(mm["modality"].iloc[0])}
        for key, label in present:
            hit = mm[mm["metric"] == key]
            rec[label] = _est_from_row(hit.iloc[0].to_dict()) if len(hit) else "not computed"
        rows.append(rec)
    return pd.DataFrame(rows, columns=["model", "modality", *[lab for _, lab in present]])


def metrics_long_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """All metric rows (one per model x metric x subset) with the estimate formatted; same row count as the CSV."""
    est = [_est_from_row(r) for r in metrics.to_dict("records")]
    return pd.DataFrame({
        "probe_set": metrics["probe_set"].to_numpy(),
        "model": metrics["model"].to_numpy(),
        "metric": metrics["metric"].to_numpy(),
        "subset": metrics["subset"].to_numpy(),
        "estimate": est,
        "unit": metrics["unit"].to_numpy(),
        "method": metrics["method"].to_numpy(),
        "note": metrics["note"].to_numpy(),
    })


def categories_table(categories: pd.DataFrame) -> pd.DataFrame:
    """Categories with their reasons and the CGR / UAR / IS / accuracy / GSP each rests on, formatted."""
    rows = []
    for r in categories.to_dict("records"):
        rows.append({
            "probe_set": r["probe_set"],
            "model": r["model"],
            "modality": r["modality"],
            "category": r["category"],
            "reason": r["reason"] if not is_missing(r["reason"]) else "no reason recorded",
            "CGR": format_estimate(r["cgr"], None, r["cgr_low"], r["cgr_high"], r["n_cgr"]),
            "UAR": format_estimate(r["uar"], None, r["uar_low"], r["uar_high"], r["n_uar"]),
            "IS": format_estimate(r["is_"], None, r["is_low"], r["is_high"], r["n_is"]),
            "accuracy": format_estimate(r["accuracy"], None, r["acc_low"], r["acc_high"], r["n_acc"]),
            "GSP (pp)": format_number(r["gsp"], "pp") if not is_missing(r["gsp"]) else "not estimable",
        })
    cols = ["probe_set", "model", "modality", "category", "reason", "CGR", "UAR", "IS", "accuracy", "GSP (pp)"]
    return pd.DataFrame(rows, columns=cols)


def comparisons_table(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Paired comparisons with family, difference (pp for rates) and raw and BH-adjusted p, formatted."""
    rows = []
    for r in comparisons.to_dict("records"):
        diff = r["diff"]
        if is_missing(diff):
            d = str(r["note"]).strip() if not is_missing(r["note"]) and str(r["note"]).strip() else "not estimable"
        else:
            d = format_estimate(diff, r["sd"], r["ci_low"], r["ci_high"], None, "pp")
        rows.append({
            "family": r["family"], "metric": r["metric"], "subset": r["subset"],
            "model_a": r["model_a"], "model_b": r["model_b"], "difference": d,
            "p": format_p(r["p"]), "p_adj (BH)": format_p(r["p_adj"]),
            "n": _format_n(r["n"]) if not is_missing(r["n"]) else "0", "test": r["test"],
            "note": "" if is_missing(r["note"]) else r["note"],
        })
    cols = ["family", "metric", "subset", "model_a", "model_b", "difference", "p", "p_adj (BH)", "n", "test", "note"]
    return pd.DataFrame(rows, columns=cols)


def failing_models_html(summary: Mapping[str, Any] | None) -> str:
    """A red box naming the models the run failed for (no answer, or too many errors), from the run summary
    dict (``last_summary`` of the store); empty when every model is fine or there is no summary."""
    from medvlm_audit.health import error_summary_lines, failing_models

    if not isinstance(summary, Mapping) or not summary.get("per_model"):
        return ""
    failing = failing_models(summary)
    if not failing:
        return ""
    detail = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in error_summary_lines(summary)}
    items = "".join(
        f"<li><span class=\"model\">{escape(m)}</span>{escape(why)}"
        + (f'<div class="muted">{escape(detail[m])}</div>' if m in detail else "") + "</li>"
        for m, why in failing.items()
    )
    return ('<div class="failed" role="alert"><strong>The run failed for these models: their results below are '
            f"incomplete or missing.</strong><ul>{items}</ul></div>")


def _section(title: str, body: str, anchor: str) -> str:
    return f'<section id="{escape(anchor)}"><h2>{escape(title)}</h2>{body}</section>'


def render_report_html(
    analysis: Any,
    *,
    title: str,
    run_info: Mapping[str, Any] | None = None,
    figures: Sequence[Figure] | None = None,
    extra_sections: Sequence[Section] | None = None,
    fmt: str = "svg",
) -> str:
    """The whole report page as one self-contained HTML string (figures built from the analysis if not given)."""
    from medvlm_audit import __version__
    from medvlm_audit.report.figures import build_figures, figure_title

    run_info = dict(run_info or {})
    summary = analysis.summary if isinstance(analysis.summary, Mapping) else {}
    models = model_order(analysis)
    probe_sets = probe_sets_of(analysis)
    derived = {"probe_sets": probe_sets, "models": models, "package_version": __version__}
    if figures is None:
        figures = build_figures(analysis)

    parts: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{escape(title)}</h1>",
        _run_info_html(run_info, summary, derived),
        _notes_html(summary),
        "</header>",
    ]
    nav = [("verdicts", "Verdicts"), ("figures", "Figures"), ("tables", "Tables")]
    nav += [(s.anchor, s.title) for s in (extra_sections or [])]
    parts.append('<nav class="toc">' + "".join(f'<a href="#{escape(a)}">{escape(t)}</a>' for a, t in nav) + "</nav>")
    parts.append(failing_models_html(run_info.get("last_summary")))
    parts.append(_section("Verdicts", _verdicts_html(analysis), "verdicts"))

    fig_html = [figure_to_html(f, number=i, title=figure_title(f), fmt=fmt) for i, f in enumerate(figures, 1)]
    parts.append(_section("Figures", "".join(fig_html) or '<p class="muted">No figures.</p>', "figures"))

    tables: list[str] = []
    met = analysis.metrics
    for ps in probe_sets:
        km = key_metrics_table(met, ps, models)
        if len(km):
            tables.append(f"<h3>Key metrics — {escape(ps)}</h3>")
            tables.append(table_to_html(km, table_id=f"key-metrics-{ps}"))
    if len(analysis.categories):
        tables.append("<h3>Categories and their reasons</h3>")
        ct = categories_table(analysis.categories)
        ct["category"] = [badge(c) for c in ct["category"]]
        tables.append(table_to_html(ct, html_columns=["category"], table_id="categories"))
    tables.append("<h3>Paired comparisons and tests</h3>")
    if len(analysis.comparisons):
        tables.append('<p class="muted">Differences in percentage points for rates; p_adj is Benjamini–Hochberg '
                      "within the family named in the first column.</p>")
        tables.append(table_to_html(comparisons_table(analysis.comparisons), table_id="comparisons"))
    else:
        tables.append('<p class="muted">No comparisons were computed for this run.</p>')
    sweep = analysis.threshold_sweep
    if isinstance(sweep, pd.DataFrame) and len(sweep):
        tables.append("<h3>Category under the IS threshold sweep</h3>")
        for ps in [p for p in probe_sets if (sweep["probe_set"] == p).any()]:
            piv = sweep[sweep["probe_set"] == ps].pivot_table(
                index="model", columns="threshold", values="category", aggfunc="first")
            piv = piv.reindex([m for m in models if m in piv.index])
            piv.columns = [f"IS<{int(c)}" if float(c).is_integer() else f"IS<{c}" for c in piv.columns]
            tables.append(table_to_html(piv.reset_index(), caption=f"{ps}: category at each unstable threshold"))
    rob = analysis.robustness
    if isinstance(rob, pd.DataFrame) and len(rob):
        tables.append("<h3>Robustness</h3>")
        kinds = rob["kind"].dropna().unique().tolist() if "kind" in rob.columns else [None]
        for kind in kinds:
            sub = rob if kind is None else rob[rob["kind"] == kind]
            sub = sub.dropna(axis=1, how="all")
            tables.append(table_to_html(sub, caption=f"Robustness: {kind}" if kind else "Robustness"))
    tables.append(f"<details><summary>All metrics ({len(met):,} rows: model × metric × subset)</summary>")
    tables.append(table_to_html(metrics_long_table(met), table_id="metrics-all"))
    tables.append("</details>")
    parts.append(_section("Tables", "".join(tables), "tables"))

    for sec in extra_sections or []:
        parts.append(_section(sec.title, sec.html, sec.anchor))
    parts.append(
        f"<footer>Generated by medvlm-audit {escape(__version__)}. Self-contained: figures are inline, nothing is "
        "loaded from the network, and no patient image is embedded.</footer></body></html>"
    )
    return "\n".join(parts)
