"""HTML building blocks (escaped tables, inline SVG figures, estimate formatting) and the self-contained report page.

The markup comes from the templates in ``report/templates/`` through the one Jinja2 environment of
:mod:`medvlm_audit.report.render` (autoescape on); this module prepares the values. The page has the one inline
stylesheet, inline SVG figures and no script or external reference, so it opens from disk with no server and no
network. Missing values never print as "nan": estimates read "not estimable (n = 0)" or their note.
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

__all__ = [
    "badge",
    "escape",
    "figure_to_html",
    "format_estimate",
    "format_interval",
    "format_number",
    "format_p",
    "is_missing",
    "render_page",
    "table_to_html",
    "verdict_list",
]

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


def interval_decimals(values: Iterable[object], unit: str = "%") -> int:
    """Decimals that print an estimate and its interval honestly: the unit's precision (:func:`format_number`),
    more where the interval is narrower than that, so that an interval of nonzero width never prints as zero width
    (its width shows to two significant digits) and a nonzero point never prints as 0 (two significant digits).
    ``values``: the point, then the interval's ends (either may be missing: then the point alone counts);
    at most 12 decimals.

    >>> interval_decimals([0.0039, 0.00055, 0.0092], "z"), interval_decimals([78.3, 75.9, 80.6])
    (4, 1)
    >>> interval_decimals([0.0, 0.0, 0.0]), interval_decimals([0.004, 0.004, 0.004], "z")
    (1, 4)
    """
    vals = [None if is_missing(v) or not math.isfinite(float(v)) else float(v)  # type: ignore[arg-type]
            for v in values]
    d = _decimals(unit)
    ends = [v for v in vals[1:3] if v is not None]
    if len(ends) == 2 and ends[1] - ends[0] > 0:
        d = max(d, math.ceil(-math.log10(ends[1] - ends[0])) + 1)
    point = vals[0] if vals else None
    if point is not None and point != 0.0 and round(point, d) == 0.0:
        d = max(d, math.ceil(-math.log10(abs(point))) + 1)
    return min(d, 12)


def format_interval(point: object, ci_low: object, ci_high: object, unit: str = "%", *,
                    signed: bool = False) -> str:
    """'0.0039 [0.00055, 0.0092]': a point and its interval at the decimals of :func:`interval_decimals` (the
    one formatter every report section uses for an estimate with an interval); the point alone where an end is
    missing; '—' for a missing point.

    >>> format_interval(0.0039, 0.00055, 0.0092, "z")
    '0.0039 [0.0006, 0.0092]'
    >>> format_interval(0.0828, 0.0784, 0.0833, "z"), format_interval(78.3, 75.9, 80.6)
    ('0.0828 [0.0784, 0.0833]', '78.3 [75.9, 80.6]')
    """
    if is_missing(point) or not math.isfinite(float(point)):  # type: ignore[arg-type]
        return _NA
    d = interval_decimals([point, ci_low, ci_high], unit)
    sign = "+" if signed or unit == "pp" else ""
    text = f"{float(point):{sign}.{d}f}"  # type: ignore[arg-type]
    if not (is_missing(ci_low) or is_missing(ci_high)):
        lo, hi = float(ci_low), float(ci_high)  # type: ignore[arg-type]
        if math.isfinite(lo) and math.isfinite(hi):
            text += f" [{lo:{sign}.{d}f}, {hi:{sign}.{d}f}]"
    return text


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
    """'78.3 ± 1.2 [75.9, 80.6] (n = 412)'; an undefined point gives the note or 'not estimable (n = k)'.

    Decimals as :func:`format_interval` (a narrow interval gets more, never printing as zero width); a zero SE
    beside an interval of nonzero width is left out (it would contradict the interval).

    >>> format_estimate(0.0, 0.0, 0.0, 39.0, 6)
    '0.0 [0.0, 39.0] (n = 6)'
    >>> format_estimate(78.3, 1.2, 75.9, 80.6, 412), format_estimate(-0.02, 0.01, -0.041, -0.004, 50, "pp")
    ('78.3 ± 1.2 [75.9, 80.6] (n = 412)', '-0.020 ± 0.010 [-0.041, -0.004] (n = 50)')
    """
    note_s = "" if is_missing(note) else str(note).strip()
    if is_missing(point) or not math.isfinite(float(point)):  # type: ignore[arg-type]
        if note_s:
            return note_s if "n =" in note_s else f"{note_s} (n = {_format_n(n)})"
        return f"not estimable (n = {_format_n(n)})"
    d = interval_decimals([point, ci_low, ci_high], unit)
    sign = "+" if unit == "pp" else ""
    text = f"{float(point):{sign}.{d}f}"  # type: ignore[arg-type]
    lo, hi = (math.nan if is_missing(v) else float(v) for v in (ci_low, ci_high))  # type: ignore[arg-type]
    has_ci = math.isfinite(lo) and math.isfinite(hi)
    if not is_missing(se) and math.isfinite(float(se)):  # type: ignore[arg-type]
        # a zero SE beside an interval of nonzero width is degenerate (e.g. sqrt(p(1-p)/n) at 0 events beside
        # Wilson's interval): it would contradict the interval, so the interval is printed alone
        if not (float(se) == 0.0 and has_ci and hi > lo):  # type: ignore[arg-type]
            text += f" ± {float(se):.{d}f}"  # type: ignore[arg-type]
    if has_ci:
        text += f" [{lo:{sign}.{d}f}, {hi:{sign}.{d}f}]"
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


#: columns whose numeric cells are p-values (or BH q-values): printed as '< 0.001', never '0.000'
P_VALUE_COLUMNS = frozenset({"p", "q", "p_adj", "p_perm", "p_value", "p_adj (BH)"})


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
    from medvlm_audit.report.render import macro, trusted

    formatters = dict(formatters or {})
    trusted_cols = set(html_columns)
    rows = df if max_rows is None else df.head(max_rows)
    cols = list(df.columns)
    body: list[list[tuple[str, bool]]] = []
    for values in rows.itertuples(index=False, name=None):
        cells: list[tuple[str, bool]] = []
        for col, value in zip(cols, values):
            fmt = formatters.get(col)
            if fmt is None and col in P_VALUE_COLUMNS and isinstance(value, (int, float, np.number)) \
                    and not isinstance(value, bool):
                fmt = format_p
            text = fmt(value) if fmt is not None else _default_cell(value)
            if text is None or (isinstance(text, float) and math.isnan(text)):
                text = _NA
            text = str(text)
            # long text wraps in a readable column; short cells stay on one line (the table scrolls in its box);
            # the length is that of the cell's markup less its tags (escaping only lengthens a text)
            if col in trusted_cols:
                cells.append((trusted(text), len(_TAG.sub("", text)) > 48))
            else:
                cells.append((text, len(text) > 48 or len(escape(text)) > 48))
        body.append(cells)
    more = None
    if max_rows is not None and len(df) > max_rows:
        more = f"First {max_rows:,} of {len(df):,} rows shown; all rows are in the CSV."
    return str(macro("table")([str(c) for c in cols], body, caption=caption or None, css_class=css_class,
                              table_id=table_id or None, more=more))


_TAG = re.compile(r"<[^>]+>")
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
    # drop the fixed pt size so CSS can scale the figure (the viewBox keeps its aspect ratio); it shows at
    # DISPLAY_PX_PER_PT px per point, shrunk only to fit the page: 7 pt text reads at >= 10 px
    for _ in range(2):
        svg = _SVG_SIZE.sub(r"\1", svg, count=1)
    width_px = round(float(fig.get_figwidth()) * 72 * DISPLAY_PX_PER_PT)
    svg = svg.replace("<svg ", f'<svg style="width:{width_px}px" ', 1)
    return svg.strip()


#: the on-page scale of figures: CSS px per figure point (a 7 pt label shows at 10.2 px; figures up to ~10.5 in
#: wide fit a 1280 px page unshrunk)
DISPLAY_PX_PER_PT = 1.45


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

    The caption defaults to the one attached by the figure functions (see figures.caption_of); a table of counts
    attached with ``captioned(..., n_table=)`` is shown right under the figure. Every figure passes the one rule of
    :func:`medvlm_audit.report.figures.information`: a figure with no data mark in this run is not drawn (a
    one-line note names it and why), a figure with at most one value per panel is drawn collapsed.
    """
    from medvlm_audit.report.figures import caption_of, information, n_table_of
    from medvlm_audit.report.render import macro, trusted

    if caption is None:
        caption = caption_of(fig)
    label = f"Figure {number}. " if number is not None else ""
    level, why = information(fig)
    if level == "none":
        return str(macro("fignote")(label, title or caption or "Figure", why))
    # the SVG ids of a numbered figure depend on its number only (the same page whatever the process drew before,
    # and in whichever worker process it is drawn); an unnumbered one takes the next value of a process counter
    _FIG_COUNTER[0] += 1
    salt = f"medvlm-fig-n{number}" if number is not None else f"medvlm-fig-{_FIG_COUNTER[0]}-"
    if fmt == "svg":
        body = trusted(_svg_markup(fig, salt))
    elif fmt == "png":
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        body = macro("png")(title or caption or "figure", data)
    else:
        raise ValueError(f"figure format must be 'svg' or 'png', got {fmt!r}")
    counts = n_table_of(fig)
    ntab = None
    if counts is not None:
        ntab = trusted(table_to_html(counts, css_class="tbl ntable"))
    return str(macro("figure")(body, label, title, caption or "", counts=ntab,
                               counts_open=counts is not None and len(counts) <= N_TABLE_OPEN_ROWS,
                               little=why if level == "little" else None))


#: n tables with at most this many rows are shown open under their figure; longer ones start collapsed
N_TABLE_OPEN_ROWS = 8


# ----------------------------------------------------------------------------------------------------------------
# report page

#: (label, keys looked up in run_info then summary) for the run-information block, in display order.
_RUN_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Run id", ("run_id", "run_ids", "run")),
    ("Suite", ("suite",)),
    ("Models", ("models",)),
    ("Cases", ("n_cases", "cases")),
    ("Package version", ("package_version", "version")),
    ("Seeds", ("seeds", "seed")),
    ("Baselines", ("baselines",)),
    ("IS denominator", ("is_denominator", "is_denom", "is_denominator_used")),
    ("Resampling mode", ("resampling_mode", "mode", "resampling")),
    ("Resamples (B)", ("B", "b", "n_resamples", "n_boot", "bootstrap_resamples")),
    ("Permutations", ("n_permutations", "permutations")),
    ("Patient-clustered bootstrap", ("cluster_by_patient",)),
)

#: run-info keys that are shown elsewhere (the config block, the failing-models box) or are internal
_HIDDEN_RUN_KEYS = frozenset({"config", "config_summary", "last_summary", "run_dir", "report_version",
                              "decoding_sent"})

#: human labels of the recorded run config's keys (unknown keys get their key in words)
_CONFIG_LABELS: dict[str, str] = {
    "suite": "Suite", "run_dir": "Run folder", "probe_sets": "Probe sets", "models": "Models",
    "decoding": "Decoding", "repeats": "Samples per input", "seed": "Construction seed",
    "workers": "Image render workers", "render_in": "Images rendered in", "store_lock_wait_s":
    "Store lock wait (s)", "conditions": "Conditions", "resolutions": "Resolutions (px)",
    "prompt_variants": "Prompt phrasings", "prompt_subsample": "Cases asked in the other phrasings",
    "prompt_subsample_from": "Phrasing cases drawn from", "res512_boxed_only": "512 px on boxed cases only",
}
_DECODING_LABELS: dict[str, str] = {
    "max_new_tokens": "max new tokens", "temperature": "temperature", "top_p": "top-p", "top_k": "top-k",
    "num_beams": "beams", "seed": "seed", "logprobs": "log-probabilities", "top_logprobs": "top log-probabilities",
}
#: model-entry keys that are paths (shown relative to the run folder)
_PATH_KEYS = frozenset({"train", "encoder_path", "cache_dir", "path", "model_path", "gguf"})


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


def _words(key: object) -> str:
    """A config key in words: 'max_error_rate' -> 'Max error rate'."""
    text = str(key).replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def _value_text(value: Any) -> str:
    """A value in words: yes / no for booleans, thousands separators, 'key: value' pairs for mappings."""
    if isinstance(value, Mapping):
        if value and all(isinstance(v, Mapping) for v in value.values()):
            return ", ".join(str(k) for k in value) or _NA  # e.g. {probe_set: {details}}: the names
        return "; ".join(f"{_words(k).lower()}: {_value_text(v)}" for k, v in value.items()) or _NA
    if isinstance(value, (list, tuple, set)):
        return ", ".join(_value_text(v) for v in value) or _NA
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if is_missing(value):
        return "not recorded"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:,}" if value == int(value) and abs(value) >= 1000 else _default_cell(value)
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


def _rel(path: object, run_dir: str | None) -> str:
    """A recorded path relative to the run folder ('../phantom/probeset'); names that are not paths unchanged."""
    import os

    text = str(path)
    if not run_dir or not os.path.isabs(text):
        return text
    try:
        rel = os.path.relpath(text, run_dir)
    except ValueError:  # another drive (Windows)
        return text
    return "." if rel == "." else rel


def _decoding_text(dec: Mapping[str, Any], sent: Mapping[str, Sequence[Any]] | None = None) -> str:
    """A decoding in words. ``sent``: each field's distinct values in the run's requests; a field the run asked
    otherwise than ``dec`` says so, with the value(s) sent first and the config's value after.

    >>> _decoding_text({"max_new_tokens": 16, "temperature": 0.0}, {"max_new_tokens": [2048, 512],
    ...                "temperature": [0.0]})
    'max new tokens 512, 2,048 as sent (config 16), temperature 0'
    """
    sent = sent or {}
    parts = []
    for k, v in dec.items():
        label = _DECODING_LABELS.get(k, _words(k).lower())
        got = [x for x in sent.get(k, ()) if x is not None]
        if got and list(got) != [v]:
            shown = ", ".join(_value_text(x) for x in sorted(got, key=lambda x: (str(type(x)), x)))
            parts.append(f"{label} {shown} as sent (config {_value_text(v) if v is not None else 'not set'})")
            continue
        if v is None:
            continue  # the backend's default
        if k == "top_logprobs" and not dec.get("logprobs"):
            continue
        parts.append(f"{label} {_value_text(v)}")
    return ", ".join(parts) or "backend defaults"


def _model_text(entry: Mapping[str, Any], run_dir: str | None) -> str:
    bits = [f"backend {entry.get('backend', 'not recorded')}"]
    for k, v in entry.items():
        if k in ("name", "backend") or v is None or v is False or v == [] or v == {}:
            continue
        if k == "decoding":
            bits.append(f"decoding: {_decoding_text(v) if isinstance(v, Mapping) else _value_text(v)}")
        elif k in _PATH_KEYS:
            bits.append(f"{_words(k).lower()} {_rel(v, run_dir)}")
        elif k == "base_urls" and isinstance(v, (list, tuple)):
            bits.append(f"endpoint{'s' if len(v) > 1 else ''} {', '.join(map(str, v))}")
        else:
            bits.append(f"{_words(k).lower()} {_value_text(v)}")
    return "; ".join(bits)


def config_rows(config: Mapping[str, Any], run_dir: str | None = None,
                sent: Mapping[str, Sequence[Any]] | None = None) -> list[tuple[str, str]]:
    """The resolved run config as (label, text) rows in words: human labels, yes / no, paths relative to the
    run folder, one line per model; the shared decoding says what the requests were sent (``sent``: field ->
    distinct values) where a suite overrode it."""
    rows: list[tuple[str, str]] = []
    for key, value in config.items():
        label = _CONFIG_LABELS.get(key, _words(key))
        if key == "run_dir":
            continue  # the report sits in it; paths below are relative to it
        if key == "models" and isinstance(value, (list, tuple)):
            for m in value:
                if isinstance(m, Mapping):
                    rows.append((f"Model {m.get('name', '?')}", _model_text(m, run_dir)))
            continue
        if key == "decoding" and isinstance(value, Mapping):
            rows.append((label, _decoding_text(value, sent)))
            continue
        if key == "probe_sets" and isinstance(value, (list, tuple)):
            rows.append((label, ", ".join(_rel(v, run_dir) for v in value) or _NA))
            continue
        if key == "render_in":  # "auto" is a rule (per invocation), not what was used: left out
            if value in ("threads", "processes"):
                rows.append((label, f"worker {value}"))
            continue
        rows.append((label, _value_text(value)))
    return rows


def _run_totals(last: Mapping[str, Any]) -> str | None:
    if not isinstance(last, Mapping) or "n_trials" not in last:
        return None
    text = f"{int(last['n_trials']):,} trials"
    skipped = last.get("n_skipped")
    if _is_number(skipped) and skipped:
        text += f", {int(skipped):,} conditions skipped (not applicable to the case)"
    if _is_number(last.get("elapsed_s")):
        text += f"; last invocation {float(last['elapsed_s']):.1f} s"
    return text


def _run_info_html(run_info: Mapping[str, Any], summary: Mapping[str, Any], derived: Mapping[str, Any]) -> str:
    """The run's metadata in a collapsible block: identity, analysis settings, then the resolved config."""
    resampling = summary.get("resampling")
    nested = [v for k in ("run_info", "run", "info") if isinstance(v := summary.get(k), Mapping)]
    sources: list[Mapping[str, Any]] = [run_info]
    if isinstance(resampling, Mapping):
        sources.append(resampling)
    sources += [*nested, summary, dict(derived, n_cases=_derived_cases(summary))]
    used: set[str] = set()
    items: list[tuple[str, str]] = []
    for label, aliases in _RUN_FIELDS:
        key, value = _lookup(aliases, *sources)
        used.update(aliases)
        if key is None:
            continue  # a field this suite does not have: not shown rather than "not recorded"
        text = _value_text(value)
        if key == "seeds" and isinstance(value, Mapping):
            text = "; ".join(f"{k}: {_value_text(v)}" for k, v in value.items())
        if key == "seed" and isinstance(resampling, Mapping) and resampling.get("seed") is value:
            text += " (resampling)"
        items.append((label, text))
    totals = _run_totals(run_info.get("last_summary") or {})
    if totals:
        items.append(("Trials", totals))
    config = run_info.get("config")
    in_config = set(config) if isinstance(config, Mapping) else set()
    for key, value in run_info.items():
        if key in used or key in _HIDDEN_RUN_KEYS or key in in_config:
            continue
        if not isinstance(value, (list, tuple, set, Mapping)) and is_missing(value):
            continue
        items.append((_CONFIG_LABELS.get(key, _words(key)), _value_text(value)))
    from medvlm_audit.report.render import macro

    run_dir = run_info.get("run_dir")
    has_config = isinstance(config, Mapping) and bool(config)
    sent = run_info.get("decoding_sent")
    rows = config_rows(config, str(run_dir) if run_dir else None,  # type: ignore[arg-type]
                       sent if isinstance(sent, Mapping) else None) if has_config else []
    where = " Paths are relative to the run folder." if run_dir else ""
    return str(macro("run_details")(items, rows, has_config, where))


def _notes_html(summary: Mapping[str, Any]) -> str:
    notes = summary.get("notes")
    if isinstance(notes, str):
        notes = [notes]
    if not isinstance(notes, (list, tuple)) or not notes:
        return ""
    from medvlm_audit.report.render import macro

    items = [_value_text(n) for n in notes if not is_missing(n)]
    return str(macro("notes")(items)) if items else ""


def badge(category: object, colors: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None) -> str:
    """A coloured category badge (trusted markup); ``colors`` / ``labels`` map categories to fill and text."""
    colors = colors or {}
    cat = "indeterminate" if is_missing(category) else str(category)
    from medvlm_audit.report.render import macro

    return str(macro("badge")(colors.get(cat, "#7f7f7f"), (labels or {}).get(cat, cat)))


def verdict_list(items: Sequence[tuple[str, str, str]]) -> str:
    """The verdict block: one line per (model, badges markup, verdict text)."""
    from medvlm_audit.report.render import macro, trusted

    return str(macro("verdicts")([(m, trusted(b), t) for m, b, t in items]))


def failing_models_html(summary: Mapping[str, Any] | None) -> str:
    """A red box naming the models the run failed for (no answer, or too many errors), from the run summary
    dict (``last_summary`` of the store); empty when every model is fine or there is no summary."""
    from medvlm_audit.health import error_summary_lines, failing_models

    if not isinstance(summary, Mapping) or not summary.get("per_model"):
        return ""
    failing = failing_models(summary)
    if not failing:
        return ""
    from medvlm_audit.report.render import macro

    detail = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in error_summary_lines(summary)}
    return str(macro("failed")([(m, why, detail.get(m)) for m, why in failing.items()]))


def render_page(
    *,
    title: str,
    sections: Sequence[Any],
    run_info: Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
    intro: str = "",
    derived: Mapping[str, Any] | None = None,
    run_details: bool = True,
    intro_title: str = "How to read this report",
) -> str:
    """The one report page, as one self-contained HTML string (the one inline stylesheet, no script, nothing
    loaded from the network), rendered from ``report/templates/page.html``: the title, a red box for failed
    models, the verdicts (the sections anchored ``verdicts``), "how to read this" (``intro``, trusted markup),
    the run's details and resolved config in a collapsible block (``run_details``; a page that is not one run's
    report, such as the reader-study report, leaves it out), the analysis notes, a table of contents and the
    other sections. Section bodies are trusted markup built with the helpers of this module."""
    from medvlm_audit import __version__
    from medvlm_audit.report.render import render, stylesheet, trusted

    run_info = dict(run_info or {})
    summary = summary if isinstance(summary, Mapping) else {}
    derived = {"package_version": __version__, **dict(derived or {})}

    def view(sec: Any) -> dict[str, Any]:
        return {"anchor": sec.anchor, "title": sec.title, "html": trusted(sec.html)}

    return render(
        "page.html",
        title=title,
        css=trusted(stylesheet()),
        failed=trusted(failing_models_html(run_info.get("last_summary"))),
        first=[view(s) for s in sections if s.anchor == "verdicts"],
        intro=trusted(intro) if intro else "",
        intro_title=intro_title,
        details=trusted(_run_info_html(run_info, summary, derived)) if run_details else "",
        notes=trusted(_notes_html(summary)),
        rest=[view(s) for s in sections if s.anchor != "verdicts"],
        version=__version__,
    )
