"""A run's health from its summary: the error summary per model and the models the run failed for.

A model fails a run when it was asked something and got no answer at all, or when the share of its inputs
that ended in an error (or were not asked because its circuit breaker stopped it) exceeds
``max_error_rate``. The shares are taken over the run's whole plan as the store holds it after the invocation
(the summary's ``stored``), so rerunning a failing run without ``--retry-errors`` fails again, and a
``--retry-errors`` rerun that fixes the errors passes. The command line prints :func:`error_summary_lines` at the end of every run and exits
non-zero when :func:`failing_models` is not empty; the report shows the same models in a red box.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

DEFAULT_MAX_ERROR_RATE = 0.05

#: exit status of a run that completed but failed for some model (2 is a usage / input error)
EXIT_MODEL_ERRORS = 1


def _counts(m: Mapping[str, Any]) -> tuple[int, int, int]:
    """(inputs, errors among them, inputs not asked): over the run's whole plan as the store holds it after the
    invocation when the summary records that (``stored``: a rerun that asked nothing still shows the errors an
    earlier invocation stored), else over the inputs tried in this invocation."""
    asked, errors, not_asked = int(m.get("asked") or 0), int(m.get("errors") or 0), int(m.get("not_asked") or 0)
    stored = m.get("stored")
    if isinstance(stored, Mapping) and stored.get("inputs"):
        inputs = int(stored["inputs"])
        return inputs, min(int(stored.get("errors") or 0), inputs - min(not_asked, inputs)), min(not_asked, inputs)
    return asked + not_asked, errors, not_asked


def _kinds(m: Mapping[str, Any]) -> Mapping[str, Any]:
    stored = m.get("stored")
    if isinstance(stored, Mapping) and stored.get("inputs"):
        return stored.get("error_kinds") or {}
    return m.get("error_kinds") or {}


def failing_models(summary: Mapping[str, Any], max_error_rate: float | None = None) -> dict[str, str]:
    """Model -> why the run failed for it (no answer, or an error share above ``max_error_rate``).

    ``max_error_rate`` defaults to the summary's own (the ``--max-error-rate`` of the run), else 5%.

    >>> failing_models({"per_model": {"a": {"asked": 40, "errors": 40},
    ...                               "b": {"asked": 100, "errors": 6},
    ...                               "c": {"asked": 100, "errors": 5}}})
    {'a': 'no answer: all 40 inputs asked ended in an error', 'b': '6.0% of 100 inputs failed (limit 5.0%)'}

    A rerun that asked nothing is judged on the errors its store holds for the run's plan (``stored``):

    >>> failing_models({"per_model": {"a": {"asked": 0, "errors": 0,
    ...                               "stored": {"inputs": 38, "errors": 38}}}})
    {'a': 'no answer: all 38 inputs asked ended in an error'}
    """
    limit = float(summary.get("max_error_rate", DEFAULT_MAX_ERROR_RATE) if max_error_rate is None
                  else max_error_rate)
    out: dict[str, str] = {}
    for name, m in (summary.get("per_model") or {}).items():
        tried, errors, not_asked = _counts(m)
        if tried == 0:
            continue
        failed = errors + not_asked
        if failed == tried:
            out[name] = (f"no answer: all {tried} inputs asked ended in an error" if not not_asked else
                         f"no answer: {errors} errors, {not_asked} inputs not asked (circuit breaker)")
        elif failed / tried > limit:
            out[name] = f"{failed / tried:.1%} of {tried} inputs failed (limit {limit:.1%})"
    return out


def error_summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per model with errors: counts by kind and one sample message each.

    >>> error_summary_lines({"per_model": {"vlm": {"asked": 3, "errors": 2, "error_kinds": {
    ...     "connection": {"n": 2, "sample": "ClientConnectorError from http://h/v1"}}}}})
    ["vlm: 2 of 3 inputs failed; connection x2 (e.g. 'ClientConnectorError from http://h/v1')"]
    """
    lines = []
    for name, m in (summary.get("per_model") or {}).items():
        tried, errors, not_asked = _counts(m)
        if not errors and not not_asked:
            continue
        kinds = _kinds(m)
        parts = [f"{kind} x{k['n']} (e.g. {str(k['sample'])[:240]!r})" for kind, k in kinds.items()]
        lines.append(f"{name}: {errors + not_asked} of {tried} inputs failed; " + "; ".join(parts))
    return lines


def report_health(summary: Mapping[str, Any], say: Callable[[str], Any]) -> int:
    """Print the error summary and the failing models; return the exit status the run should end with."""
    for line in error_summary_lines(summary):
        say(f"errors of {line}")
    failing = failing_models(summary)
    for name, why in failing.items():
        say(f"error: model {name!r} failed: {why}")
    if failing:
        say("fix the endpoint or model, then run the same command with --retry-errors: stored answers are "
            "kept, inputs not asked are asked and errored ones are asked again")
        return EXIT_MODEL_ERRORS
    return 0


#: exit status of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130
#: exit status of a run stopped by SIGTERM (128 + SIGTERM), after the same clean stop as Ctrl-C
EXIT_TERMINATED = 143


def stored_answers(run_dir: str | Path) -> int:
    """Answers (not errors) kept in a run's store; 0 when there is no store yet. Reads without writing."""
    path = Path(run_dir) / "run.sqlite"
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return int(db.execute("SELECT COUNT(*) FROM responses WHERE error_kind IS NULL").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def interrupted_line(run_dir: str | Path | None, resume: str = "run the same command to resume") -> str:
    """The one line a run stopped by Ctrl-C prints."""
    n = stored_answers(run_dir) if run_dir is not None else 0
    return f"interrupted: {n} answers kept; {resume}"


#: below this share of parsed answers a model is ``not assessable`` under a condition (DESIGN.md, every suite)
ASSESSABLE_PARSE_RATE = 0.5
#: parsed = an answer (an option, a yes/no) or an abstention (a wrong answer, DESIGN.md); refusals and unparsed
#: text are not (issue 21 item 3)
_PARSED = ("answer", "abstain")
#: a refusal where the image was removed ("I cannot answer without the image") is an answer there
_TEXT_ONLY_PARSED = ("answer", "abstain", "refusal")


def low_parse_rate_lines(tidy: Any, floor: float = ASSESSABLE_PARSE_RATE) -> list[str]:
    """One warning per model whose parse rate under some condition is below ``floor``, from a tidy table's
    Score ``status`` column (answers and abstentions are parsed, and refusals under a condition without the image,
    ``no_image`` or ``...+no_image``; other refusals and unparsed text are not; rows without a response or a
    status do not count). Empty when the table has no ``status`` column. (A stress model that chose an option in
    under half the trials of every condition is also not assessable: the analysis says so.)

    >>> import pandas as pd
    >>> t = pd.DataFrame({"model": ["m"] * 4 + ["k"] * 3 + ["r"] * 2, "condition": ["a"] * 7 + ["no_image"] * 2,
    ...                   "status": ["unparsed", "unparsed", "unparsed", "answer", "abstain", "refusal", "refusal",
    ...                              "refusal", "refusal"]})
    >>> low_parse_rate_lines(t)
    ["warning: model 'k' has a parse rate below 50% (33.3% under a, n = 3): not assessable there", "warning: model 'm' has a parse rate below 50% (25.0% under a, n = 4): not assessable there"]
    """
    if tidy is None or "status" not in getattr(tidy, "columns", ()) or "model" not in tidy.columns:
        return []
    cols = {c: tidy[c].tolist() for c in ("model", "condition", "strategy", "status") if c in tidy.columns}
    return parse_rate_lines_of(cols, floor)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def parse_rate_lines_of(cols: Mapping[str, list[Any]], floor: float = ASSESSABLE_PARSE_RATE) -> list[str]:
    """:func:`low_parse_rate_lines` of a table given as column lists (``model``, ``status``, and ``condition``
    or ``strategy`` where it has one), without pandas (what ``run`` prints after the run: issue 23)."""
    if "status" not in cols or "model" not in cols:
        return []
    cond = next((c for c in ("condition", "strategy") if c in cols), None)  # the reports suite: strategy
    n = len(cols["status"])
    groups: dict[Any, list[int]] = {}  # (model, condition) -> [parsed, size]; missing keys dropped, as groupby does
    for i in range(n):
        status, model = cols["status"][i], cols["model"][i]
        if _missing(status) or status == "no_response" or _missing(model):
            continue
        c = cols[cond][i] if cond else None
        if cond and _missing(c):
            continue
        parsed = status in _PARSED
        if cond == "condition":
            text_only = str(c) == "no_image" or str(c).endswith("+no_image")
            parsed = parsed or (text_only and status in _TEXT_ONLY_PARSED)
        acc = groups.setdefault((model, c), [0, 0])
        acc[0] += parsed
        acc[1] += 1
    lines = []
    for model in sorted({m for m, _ in groups}):
        low = [(c, p / size, size) for (m, c), (p, size) in sorted(groups.items()) if m == model and p / size < floor]
        if not low:
            continue
        where = ", ".join(f"{100 * mean:.1f}% under {c}, n = {size}" if cond else f"{100 * mean:.1f}%, n = {size}"
                          for c, mean, size in low)
        lines.append(f"warning: model {model!r} has a parse rate below {100 * floor:g}% ({where}): "
                     f"not assessable there")
    return lines


def low_judge_valid_lines(tidy: Any, floor: float = ASSESSABLE_PARSE_RATE) -> list[str]:
    """One warning per judge and axis whose share of valid outputs is below ``floor``, from a tidy table's
    ``judge_status`` column (one row per judgement; ``valid`` or the failure class: parse, schema, evidence,
    abstain, transport), grouped by ``model`` (the judge) and ``axis``. The judge's scores on that axis are not
    assessable. Empty when the table has no ``judge_status`` column.

    >>> import pandas as pd
    >>> t = pd.DataFrame({"model": ["j"] * 4 + ["k"] * 2, "axis": ["ca"] * 4 + ["cf"] * 2,
    ...                   "judge_status": ["parse", "parse", "transport", "valid", "valid", "schema"]})
    >>> low_judge_valid_lines(t)
    ["warning: judge 'j' gave a valid output in 25.0% of 4 judgements on axis ca (parse x2, transport x1): its ca scores are not assessable"]
    """
    if tidy is None or not {"model", "judge_status"} <= set(getattr(tidy, "columns", ())):
        return []
    t = tidy[tidy["judge_status"].notna()]
    if t.empty:
        return []
    keys = ["model", "axis"] if "axis" in t.columns else ["model"]
    lines = []
    for key, g in t.groupby(keys, sort=True):
        judge, axis = (key[0], key[1]) if len(keys) == 2 else ((key[0] if isinstance(key, tuple) else key), "")
        st = g["judge_status"].astype(str)
        share = float((st == "valid").mean())
        if share >= floor:
            continue
        fails = st[st != "valid"].value_counts()
        why = ", ".join(f"{k} x{int(v)}" for k, v in sorted(fails.items(), key=lambda kv: (-kv[1], kv[0])))
        on = f" on axis {axis}" if axis else ""
        lines.append(f"warning: judge {judge!r} gave a valid output in {100 * share:.1f}% of {len(st)} judgements"
                     f"{on} ({why}): its {axis + ' ' if axis else ''}scores are not assessable")
    return lines


def results_parse_rate_lines(results_parquet: str | Path) -> list[str]:
    """:func:`low_parse_rate_lines` and :func:`low_judge_valid_lines` of a run's exported ``results.parquet``
    (reads the columns they need only)."""
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(results_parquet).names)
        lines: list[str] = []
        if {"model", "status"} <= names:  # read with pyarrow: a run's path imports no pandas (issue 23)
            cols = [c for c in ("model", "condition", "strategy", "status") if c in names]
            table = pq.ParquetFile(results_parquet).read(columns=cols)
            lines += parse_rate_lines_of({c: table.column(c).to_pylist() for c in cols})
        if {"model", "judge_status"} <= names:
            import pandas as pd

            cols = [c for c in ("model", "axis", "judge_status") if c in names]
            lines += low_judge_valid_lines(pd.read_parquet(results_parquet, columns=cols))
        return lines
    except (OSError, ValueError):
        return []
