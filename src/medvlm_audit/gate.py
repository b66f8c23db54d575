"""A deployment gate over a run's report: rules on the long metrics schema of any suite.

A rule reads ``[SUITE:]METRIC[.FIELD] OP VALUE [or undefined] [where CONDITION [and CONDITION ...]]``::

    grounding:cgr.ci_low >= 0.20 where finding in [pneumothorax, pleural_effusion]
    grounding:category == uses_image where model = local-evidence
    stress:robustness.point >= 0.8 where subset = mean
    faithfulness:sham_fpr.ci_high <= 0.1 or undefined

- METRIC is a ``metric`` of ``metrics.parquet|csv`` (the shared long schema), or a column of one of the report's
  extra tables that has a ``model`` column (e.g. ``category`` of ``categories.csv``).
- FIELD is ``point`` (default), ``ci_low``, ``ci_high``, ``se`` or ``n`` (metrics only).
- OP is ``>= <= > < == !=`` or ``in [a, b]`` / ``not in [a, b]``; numbers compare as numbers, words as text.
- A metric in percent (unit ``%``) takes a proportion (``0.20``) or a percentage (``20%``); a bare number above 1
  is refused as ambiguous.
- A column found in several extra tables is read from the one named by ``where table = NAME`` (e.g.
  ``stress:support == strong where table = stress_chance``); without it, from the report's verdicts table
  (``verdicts.csv`` or ``SUITE_verdicts.csv``) when that is one of them; otherwise the rule is refused, naming
  every table that holds the column.
- ``where`` keeps rows: a key that is a column (``model``, ``probe_set``, ``subset``, ...) filters that column;
  any other key ``k`` selects the subset ``k=v`` (``finding in [a, b]`` = subsets ``finding=a`` and
  ``finding=b``). Without a subset condition the subset ``all`` is used (or the metric's only subset).
- Every row kept is one check (one per model x probe set x subset) and every check must pass.
- A model of the run (``summary.json``'s ``run_info.models``) without a row kept is one undefined check per
  subset: never skipped. A table with ``strategy`` and no ``subset`` column shows the strategy as the subset.
- A value that is undefined (NaN, or a note saying "not assessable" / "not estimable") fails the check, unless
  the rule says ``or undefined``.

Exit codes of :func:`gate`: 0 every check passes, 1 a check fails, 2 a bad rule, an unknown metric, model or
subset, or a run without a report (each named in one line).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from medvlm_audit.errors import AuditError
from medvlm_audit.registry import did_you_mean

__all__ = ["Check", "GateError", "Rule", "evaluate", "junit_xml", "load_rules", "parse_rule", "table_text"]

FIELDS = ("point", "ci_low", "ci_high", "se", "n")
NUMERIC_OPS = (">=", "<=", ">", "<", "==", "!=")
_METRIC_FILES = ("metrics.parquet", "metrics.csv")
_NOT_TABLES = {"metrics", "comparisons"}
_UNDEFINED_NOTES = ("not assessable", "not estimable")


class GateError(AuditError):
    """A bad rule, a rule naming something the run does not have, or a run without a report (exit 2)."""


@dataclass(frozen=True)
class Condition:
    key: str
    op: str  # "=", "!=", "in", "not in"
    values: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    text: str
    suite: str | None
    metric: str
    field: str
    op: str  # one of NUMERIC_OPS, "in", "not in"
    values: tuple[str, ...]
    allow_undefined: bool = False
    where: tuple[Condition, ...] = ()
    name: str = ""
    #: where the rule was written (``FILE, rule N`` / ``FILE, line N``); every error about the rule starts with it
    origin: str = ""

    @property
    def label(self) -> str:
        return self.name or self.text


@dataclass
class Check:
    """One rule applied to one row: ``status`` is ``pass``, ``fail`` or ``undefined`` (fails unless allowed)."""

    rule: Rule
    run: str
    probe_set: str
    model: str
    subset: str
    value: Any
    unit: str
    status: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass" or (self.status == "undefined" and self.rule.allow_undefined)


@dataclass
class GateResult:
    checks: list[Check] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if all(c.passed for c in self.checks) else 1


# --------------------------------------------------------------------------------------------- parsing rules

_TOKEN = re.compile(r'\s*(?:(?P<q>"[^"]*"|\'[^\']*\')|(?P<op>>=|<=|==|!=|=|>|<)|(?P<p>[\[\],])|(?P<w>[^\s\[\],<>=!"\']+))')


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise GateError(f"bad rule {text!r}: cannot read from {text[pos:]!r}")
        pos = m.end()
        tok = m.group(0).strip()
        if tok:
            out.append(tok)
    return out


def _word(tok: str) -> str:
    return tok[1:-1] if len(tok) >= 2 and tok[0] == tok[-1] and tok[0] in "\"'" else tok


def _values(toks: list[str], i: int, text: str) -> tuple[tuple[str, ...], int]:
    """A single word, or a bracketed comma-separated list, starting at toks[i]."""
    if i >= len(toks):
        raise GateError(f"bad rule {text!r}: a value is missing at the end")
    if toks[i] != "[":
        if toks[i] in ("]", ",") or toks[i] in NUMERIC_OPS or toks[i] == "=":
            raise GateError(f"bad rule {text!r}: expected a value, found {toks[i]!r}")
        return (_word(toks[i]),), i + 1
    vals: list[str] = []
    i += 1
    while i < len(toks) and toks[i] != "]":
        if toks[i] != ",":
            vals.append(_word(toks[i]))
        i += 1
    if i >= len(toks):
        raise GateError(f"bad rule {text!r}: a list is not closed with ']'")
    if not vals:
        raise GateError(f"bad rule {text!r}: an empty list")
    return tuple(vals), i + 1


def _op(toks: list[str], i: int, text: str, *, where: bool) -> tuple[str, int]:
    if i >= len(toks):
        raise GateError(f"bad rule {text!r}: a comparison is missing")
    t = toks[i].lower()
    if t == "in":
        return "in", i + 1
    if t == "not" and i + 1 < len(toks) and toks[i + 1].lower() == "in":
        return "not in", i + 2
    if where and t in ("=", "=="):
        return "=", i + 1
    if where and t == "!=":
        return "!=", i + 1
    if not where and t in NUMERIC_OPS:
        return t, i + 1
    if not where and t == "=":
        return "==", i + 1
    known = "=, !=, in, not in" if where else ">=, <=, >, <, ==, !=, in, not in"
    raise GateError(f"bad rule {text!r}: {toks[i]!r} is not a comparison (use {known})")


def parse_rule(text: str, *, name: str = "", allow_undefined: bool = False, origin: str = "") -> Rule:
    """Parse one rule (grammar in the module docstring); a bad rule raises :class:`GateError` naming it.
    ``origin`` (e.g. ``rules.yaml, rule 2``) is kept on the rule so that errors found later, against a run,
    name it too."""
    text = " ".join(str(text).split())
    if not text:
        raise GateError("bad rule: it is empty")
    toks = _tokens(text)
    head = toks[0]
    suite, _, rest = head.rpartition(":") if ":" in head else ("", "", head)
    metric, _, fld = rest.partition(".")
    fld = fld or "point"
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", metric or "-/-"):
        raise GateError(f"bad rule {text!r}: {head!r} is not [SUITE:]METRIC[.FIELD]")
    if fld not in FIELDS:
        raise GateError(f"bad rule {text!r}: unknown field {fld!r}{did_you_mean(fld, FIELDS)}; known: "
                        f"{', '.join(FIELDS)}")
    op, i = _op(toks, 1, text, where=False)
    values, i = _values(toks, i, text)
    if op in NUMERIC_OPS and len(values) != 1:
        raise GateError(f"bad rule {text!r}: {op} takes one value, not a list (use 'in [...]')")
    if i + 1 < len(toks) and toks[i].lower() == "or" and toks[i + 1].lower() in ("undefined", "not"):
        allow_undefined = True
        i += 2
        if toks[i - 1].lower() == "not":
            if i < len(toks) and toks[i].lower() == "assessable":
                i += 1
            else:
                raise GateError(f"bad rule {text!r}: write 'or undefined' or 'or not assessable'")
    conds: list[Condition] = []
    if i < len(toks):
        if toks[i].lower() != "where":
            raise GateError(f"bad rule {text!r}: unexpected {toks[i]!r} (expected 'where', 'or undefined' or the end)")
        i += 1
        while True:
            if i >= len(toks):
                raise GateError(f"bad rule {text!r}: a condition is missing after 'where'/'and'")
            key = toks[i]
            if not re.fullmatch(r"[A-Za-z0-9_\-]+", key):
                raise GateError(f"bad rule {text!r}: {key!r} is not a column or subset key")
            cop, i = _op(toks, i + 1, text, where=True)
            vals, i = _values(toks, i, text)
            if cop in ("=", "!=") and len(vals) != 1:
                raise GateError(f"bad rule {text!r}: '{key} {cop}' takes one value (use 'in [...]')")
            conds.append(Condition(key, cop, vals))
            if i >= len(toks):
                break
            if toks[i].lower() != "and":
                raise GateError(f"bad rule {text!r}: unexpected {toks[i]!r} (conditions are joined by 'and')")
            i += 1
    return Rule(text=text, suite=suite or None, metric=metric, field=fld, op=op, values=values,
                allow_undefined=allow_undefined, where=tuple(conds), name=name, origin=origin)


def load_rules(path: str | Path) -> list[Rule]:
    """Rules from a file: ``.yaml``/``.yml`` (a list, or ``rules:`` a list, of rule strings or mappings with
    ``rule`` and optional ``name`` and ``allow_undefined``), ``.toml`` (``rules = [...]`` or ``[[rules]]``
    tables), or plain text (one rule a line, ``#`` comments). An error names the file and the rule or line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise GateError(f"cannot read the rules file {p}: {e.strerror or e}") from None
    if p.suffix.lower() in (".yaml", ".yml", ".toml"):
        try:
            if p.suffix.lower() == ".toml":
                import tomllib

                data: Any = tomllib.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text)
        except Exception as e:  # noqa: BLE001 - the parser's own message names the line
            raise GateError(f"{p}: not valid {p.suffix.lstrip('.').upper()}: {str(e).splitlines()[0]}") from None
        if isinstance(data, dict):
            if set(data) - {"rules"}:
                raise GateError(f"{p}: unknown key(s) {sorted(set(data) - {'rules'})}; expected 'rules'")
            data = data.get("rules")
        if not isinstance(data, list) or not data:
            raise GateError(f"{p}: expected a non-empty list of rules (or 'rules:' holding one)")
        rules = []
        for k, item in enumerate(data, 1):
            origin = f"{p}, rule {k}"
            try:
                if isinstance(item, str):
                    rules.append(parse_rule(item, origin=origin))
                elif isinstance(item, dict) and isinstance(item.get("rule"), str):
                    extra = set(item) - {"rule", "name", "allow_undefined"}
                    if extra:
                        raise GateError(f"unknown key(s) {sorted(extra)}; known: rule, name, allow_undefined")
                    rules.append(parse_rule(item["rule"], name=str(item.get("name") or ""),
                                            allow_undefined=bool(item.get("allow_undefined", False)),
                                            origin=origin))
                else:
                    raise GateError("expected a rule string or a mapping with 'rule'")
            except GateError as e:
                raise GateError(f"{origin}: {e}") from None
        return rules
    rules = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            try:
                rules.append(parse_rule(line, origin=f"{p}, line {n}"))
            except GateError as e:
                raise GateError(f"{p}, line {n}: {e}") from None
    if not rules:
        raise GateError(f"{p}: no rules in the file")
    return rules


# --------------------------------------------------------------------------------------------- reading runs

@dataclass
class _Report:
    run: str
    folder: Path
    metrics: Any  # DataFrame
    tables: dict[str, Any]
    suites: tuple[str, ...]
    #: the models of the run (``summary.json``'s ``report.run_info.models``; judges are not among them), or ()
    run_models: tuple[str, ...] = ()


def _report_folder(run: str | Path) -> Path:
    p = Path(run)
    for cand in (p / "report", p):
        if any((cand / f).is_file() for f in _METRIC_FILES):
            return cand
    if not p.exists():
        raise GateError(f"{p}: no such run folder")
    raise GateError(f"{p}: no report (metrics.parquet or metrics.csv in {p / 'report'}); write it with "
                    f"`medvlm-audit report {p}`")


def _read_report(run: str | Path) -> _Report:
    import pandas as pd

    folder = _report_folder(run)
    try:
        if (folder / "metrics.parquet").is_file():
            metrics = pd.read_parquet(folder / "metrics.parquet")
        else:
            metrics = pd.read_csv(folder / "metrics.csv", keep_default_na=True)
    except Exception as e:  # noqa: BLE001
        raise GateError(f"{folder}: cannot read the metrics table: {e}") from None
    missing = [c for c in ("suite", "model", "metric", "subset", "point") if c not in metrics.columns]
    if missing:
        raise GateError(f"{folder}: the metrics table lacks column(s) {missing}")
    for c in ("suite", "model", "metric", "subset", "probe_set", "unit", "note"):
        if c in metrics.columns:
            metrics[c] = metrics[c].fillna("").astype(str)
    tables: dict[str, Any] = {}
    for f in sorted(folder.glob("*.csv")):
        if f.stem in _NOT_TABLES:
            continue
        try:
            df = pd.read_csv(f)
        except Exception:  # noqa: BLE001,S112 - an unreadable extra table is not a metric source
            continue
        if "model" in df.columns:
            tables[f.stem] = df
    suites = tuple(sorted(set(metrics["suite"]))) if len(metrics) else ()
    return _Report(str(run), folder, metrics, tables, suites, _run_models(folder))


def _run_models(folder: Path) -> tuple[str, ...]:
    """The models the run audited, from ``summary.json`` (``report.run_info.models``, else a ``models`` list
    or mapping); () when the summary does not say (then only the models with rows are checked)."""
    import json

    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    if not isinstance(summary, dict):
        return ()
    report = summary.get("report")
    info = report.get("run_info") if isinstance(report, dict) else None
    for models in ((info or {}).get("models") if isinstance(info, dict) else None, summary.get("models")):
        if isinstance(models, (list, tuple, dict)) and models:
            return tuple(dict.fromkeys(str(m) for m in models))
    return ()


def _subset_column(df: Any) -> str | None:
    """The column naming a row's subset: ``subset``, else ``strategy`` (the reports suite's verdicts table has one
    row per model x decoding strategy)."""
    return "subset" if "subset" in df.columns else "strategy" if "strategy" in df.columns else None


# --------------------------------------------------------------------------------------------- evaluating

def _number(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None


def _bound(rule: Rule, word: str, unit: str) -> float:
    """The rule's number in the metric's unit (percent metrics: proportions or N%)."""
    pct = word.endswith("%")
    x = _number(word[:-1] if pct else word)
    if x is None:
        raise GateError(f"bad rule {rule.text!r}: {word!r} is not a number ({rule.metric} is numeric)")
    if unit == "%":
        if pct:
            return x
        if abs(x) > 1:
            raise GateError(f"bad rule {rule.text!r}: {rule.metric} is in percent: write {word}% or "
                            f"{x / 100:g} (a proportion)")
        return x * 100
    if pct:
        raise GateError(f"bad rule {rule.text!r}: {rule.metric} is not in percent (unit {unit or 'none'}); "
                        f"drop the %")
    return x


def _compare(op: str, value: Any, bounds: Sequence[Any]) -> bool:
    if op == "in":
        return value in bounds
    if op == "not in":
        return value not in bounds
    b = bounds[0]
    return {">=": value >= b, "<=": value <= b, ">": value > b, "<": value < b,
            "==": value == b, "!=": value != b}[op]


def _is_undefined(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _select(rule: Rule, df: Any, where_table: str, *, subset_default: bool,
            run_models: Sequence[str] = ()) -> Any:
    """Rows of ``df`` kept by the rule's conditions; unknown values are named. A model of the run
    (``run_models``) that has no row in ``df`` is known (it keeps no row; the caller reports it as not
    assessable); ``subset`` on a table without that column but with ``strategy`` filters ``strategy``."""
    keep = df
    subset_given = False
    sub_col = _subset_column(df)
    for c in rule.where:
        col = c.key if c.key in df.columns else sub_col if c.key == "subset" else None
        if col is None:
            if "subset" not in df.columns:
                raise GateError(f"rule {rule.text!r}: {where_table} has no column {c.key!r}"
                                f"{did_you_mean(c.key, df.columns)}; columns: {', '.join(map(str, df.columns))}")
            col, vals = "subset", tuple(f"{c.key}={v}" for v in c.values)
        else:
            vals = c.values
        if col == sub_col:
            subset_given = True
        present = set(df[col].astype(str))
        if c.op in ("=", "in"):
            known = present | set(run_models) if col == "model" else present
            for v in vals:
                if v not in known:
                    shown = sorted(known) if len(known) <= 30 else sorted(known)[:30] + ["..."]
                    where = f"the run's models nor {where_table}" if col == "model" and run_models else where_table
                    raise GateError(f"rule {rule.text!r}: no {col} {v!r} in {where}{did_you_mean(v, known)}"
                                    f"; known: {', '.join(shown)}")
            keep = keep[keep[col].astype(str).isin(vals)]
        else:
            keep = keep[~keep[col].astype(str).isin(vals)]
    if subset_default and not subset_given and "subset" in keep.columns and len(keep):
        subsets = sorted(set(keep["subset"]))
        if "all" in subsets:
            keep = keep[keep["subset"] == "all"]
        elif len(subsets) > 1:
            raise GateError(f"rule {rule.text!r}: {rule.metric} has no subset 'all' but {len(subsets)} subsets "
                            f"({', '.join(subsets[:12])}{', ...' if len(subsets) > 12 else ''}); name one with "
                            f"'where subset = ...'")
    return keep


def _missing_models(rule: Rule, rep: _Report, all_rows: Any, kept: Any, source: str) -> list[Check]:
    """A ``FAIL (not assessable)`` check for each model of the run the rule applies to (its ``model``
    conditions) that kept no row: a rule applies to every model of the run, never silently to fewer. Only
    when the metric is about the run's models (some row names one): a judge's metric is not asked of them."""
    run_models = list(rep.run_models)
    if not run_models or "model" not in all_rows.columns:
        return []
    if not set(all_rows["model"].astype(str)) & set(run_models):
        return []
    wanted = run_models
    for c in rule.where:
        if c.key == "model":
            inside = c.op in ("=", "in")
            wanted = [m for m in wanted if (m in c.values) == inside]
    have = set(kept["model"].astype(str)) if len(kept) else set()
    sub_col = _subset_column(kept)
    subsets = sorted(set(kept[sub_col].astype(str))) if sub_col and len(kept) else []
    if not subsets:
        named = [v for c in rule.where if c.key == "subset" and c.op in ("=", "in") for v in c.values]
        subsets = named or ["all" if source == "the metrics table" else f"{source}"]
    src = kept if len(kept) else all_rows
    probe_sets = sorted(set(src["probe_set"].astype(str))) if "probe_set" in src.columns and len(src) else []
    probe_set = probe_sets[0] if len(probe_sets) == 1 else ""
    checks = []
    for m in wanted:
        if m in have:
            continue
        for sub in subsets:
            checks.append(Check(rule=rule, run=rep.run, probe_set=probe_set, model=m, subset=sub, value=None,
                                unit="", status="undefined",
                                detail=f"{m} has no {rule.metric} row in {source} (not assessable)"))
    return checks


def _eval_metric(rule: Rule, rep: _Report, rows: Any) -> list[Check]:
    checks = []
    for _, r in rows.iterrows():
        unit = str(r.get("unit", "") or "")
        value = r.get(rule.field)
        value = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
        note = str(r.get("note", "") or "")
        base = {"rule": rule, "run": rep.run, "probe_set": str(r.get("probe_set", "")), "model": str(r["model"]),
                    "subset": str(r["subset"]), "value": value, "unit": unit}
        if value is None or any(w in note.lower() for w in _UNDEFINED_NOTES):
            checks.append(Check(**base, status="undefined", detail=note or "no value"))
            continue
        if rule.op in ("in", "not in"):
            bounds = [_bound(rule, v, unit) for v in rule.values]
        else:
            bounds = [_bound(rule, rule.values[0], unit)]
        checks.append(Check(**base, status="pass" if _compare(rule.op, value, bounds) else "fail", detail=note))
    return checks


def _eval_table(rule: Rule, rep: _Report, name: str, rows: Any) -> list[Check]:
    checks = []
    for _, r in rows.iterrows():
        raw = r[rule.metric]
        base = {"rule": rule, "run": rep.run, "probe_set": str(r.get("probe_set", "") or ""), "model": str(r["model"]),
                    "subset": str(r.get("subset", "") or r.get("strategy", "") or f"{name}.csv"),
                "value": raw, "unit": ""}
        if _is_undefined(raw) or str(raw).strip().lower() == "not assessable":
            base["value"] = None
            checks.append(Check(**base, status="undefined", detail=f"no {rule.metric} in {name}.csv"))
            continue
        num = _number(str(raw)) if not isinstance(raw, str) else None
        if num is not None and all(_number(v) is not None for v in rule.values):
            ok = _compare(rule.op, num, [float(v) for v in rule.values])  # type: ignore[arg-type]
        elif rule.op in ("==", "!=", "in", "not in"):
            ok = _compare(rule.op, str(raw), list(rule.values))
        else:
            raise GateError(f"bad rule {rule.text!r}: {rule.metric} holds words ({raw!r}); compare it with ==, !=, "
                            f"in or not in")
        checks.append(Check(**base, status="pass" if ok else "fail"))
    return checks


def _is_verdicts(name: str) -> bool:
    return name == "verdicts" or name.endswith("_verdicts")


def _pick_table(rule: Rule, rep: _Report, holders: list[str], table: Condition | None) -> str:
    """The one extra table ``rule.metric`` is read from: the one named by ``where table = NAME``; else the only
    table holding the column; else the report's verdicts table (``verdicts.csv`` / ``SUITE_verdicts.csv``) when
    it is one of them; else an error naming every table that holds it."""
    listed = ", ".join(f"{h}.csv" for h in holders)
    if table is not None:
        if table.op not in ("=", "in") or len(table.values) != 1:
            raise GateError(f"rule {rule.text!r}: write 'where table = NAME' (one table, one of {listed})")
        want = table.values[0].removesuffix(".csv")
        if want not in holders:
            raise GateError(f"rule {rule.text!r}: no table {want!r} with a column {rule.metric!r} in {rep.folder}"
                            f"{did_you_mean(want, holders)}; tables with it: {listed}")
        return want
    if len(holders) == 1:
        return holders[0]
    verdicts = [h for h in holders if _is_verdicts(h)]
    if len(verdicts) == 1:
        return verdicts[0]
    raise GateError(f"rule {rule.text!r}: {rule.metric!r} is a column of {len(holders)} tables in {rep.folder} "
                    f"({listed}); name one with 'where table = {holders[0]}'")


def _apply(rule: Rule, reports: Sequence[_Report]) -> list[Check]:
    targets = [r for r in reports if rule.suite is None or rule.suite in r.suites]
    if not targets:
        have = sorted({s for r in reports for s in r.suites})
        raise GateError(f"rule {rule.text!r}: no run of suite {rule.suite!r}{did_you_mean(rule.suite or '', have)}; "
                        f"the runs given are of suite(s) {', '.join(have) or 'none'}")
    checks: list[Check] = []
    tables = [c for c in rule.where if c.key == "table"]
    if len(tables) > 1:
        raise GateError(f"rule {rule.text!r}: name one table ('where table = NAME' once)")
    table = tables[0] if tables else None
    plain = replace(rule, where=tuple(c for c in rule.where if c.key != "table")) if table else rule
    for rep in targets:
        m = rep.metrics
        if rule.suite is not None:
            m = m[m["suite"] == rule.suite]
        rows = m[m["metric"] == rule.metric]
        if len(rows) and table is None:
            kept = _select(rule, rows, "the metrics table", subset_default=True, run_models=rep.run_models)
            checks += _eval_metric(rule, rep, kept)
            checks += _missing_models(rule, rep, rows, kept, "the metrics table")
            continue
        holders = [n for n, t in rep.tables.items() if rule.metric in t.columns]
        if holders:
            name = _pick_table(rule, rep, holders, table)
            if rule.field != "point":
                raise GateError(f"bad rule {rule.text!r}: {rule.metric} comes from {name}.csv, which has no "
                                f"{rule.field}; compare the value itself")
            kept = _select(plain, rep.tables[name], f"{name}.csv", subset_default=False, run_models=rep.run_models)
            checks += _eval_table(rule, rep, name, kept)
            checks += _missing_models(plain, rep, rep.tables[name], kept, f"{name}.csv")
            continue
        if table is not None and len(rows):
            raise GateError(f"rule {rule.text!r}: {rule.metric} is a metric of the metrics table, not a column of "
                            f"an extra table; drop 'where table = ...'")
        known = sorted(set(m["metric"]))
        cols = sorted({c for t in rep.tables.values() for c in t.columns if c != "model"})
        raise GateError(f"rule {rule.text!r}: unknown metric {rule.metric!r} in {rep.folder}"
                        f"{did_you_mean(rule.metric, [*known, *cols])}; metrics: {', '.join(known)}"
                        + (f"; table columns: {', '.join(cols)}" if cols else ""))
    if not checks:
        raise GateError(f"rule {rule.text!r}: no row matches (every row was filtered out by its 'where')")
    return checks


def evaluate(runs: Iterable[str | Path], rules: Sequence[Rule]) -> GateResult:
    """Apply every rule to every run of its suite. Raises :class:`GateError` (exit 2) before any check is
    reported when a rule is bad or names what the runs lack."""
    reports = [_read_report(r) for r in runs]
    if not reports:
        raise GateError("no run given")
    if not rules:
        raise GateError("no rule given: use --rule RULE (repeatable) or --rules FILE")
    res = GateResult()
    for rule in rules:
        try:
            res.checks += _apply(rule, reports)
        except GateError as e:
            if rule.origin:  # a rule from a file: the error names the file and the rule / line
                raise GateError(f"{rule.origin}: {e}") from None
            raise
    return res


# --------------------------------------------------------------------------------------------- output

def _fmt(v: Any, unit: str) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        s = f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        return f"{s}%" if unit == "%" else s
    return str(v)


def _bound_text(c: Check) -> str:
    r = c.rule
    vals = r.values
    if r.op in ("in", "not in"):
        return f"{r.op} [{', '.join(vals)}]"
    v = vals[0]
    if c.unit == "%" and not v.endswith("%") and _number(v) is not None:
        v = f"{float(v) * 100:g}%"
    return f"{r.field} {r.op} {v}" if r.field != "point" else f"{r.op} {v}"


def _result_text(c: Check) -> str:
    if c.status == "undefined":
        return "pass (undefined, allowed)" if c.rule.allow_undefined else "FAIL (not assessable)"
    return "pass" if c.status == "pass" else "FAIL"


def table_text(result: GateResult) -> str:
    """The rules, numbered, then a plain text table (rule number, model, probe set, subset, value, bound, result)
    and one summary line."""
    labels: list[str] = []
    for c in result.checks:
        if c.rule.label not in labels:
            labels.append(c.rule.label)
    head = ("rule", "model", "probe_set", "subset", "value", "bound", "result")
    rows = [(f"#{labels.index(c.rule.label) + 1}", c.model, c.probe_set, c.subset, _fmt(c.value, c.unit),
             _bound_text(c), _result_text(c)) for c in result.checks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out = [f"#{k}: {lab}" for k, lab in enumerate(labels, 1)] + [""]
    out += ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    n_fail = sum(not c.passed for c in result.checks)
    out.append(f"gate: {len(result.checks) - n_fail} of {len(result.checks)} checks pass"
               + (f", {n_fail} fail" if n_fail else ""))
    return "\n".join(out)


def junit_xml(result: GateResult) -> str:
    """JUnit XML: one ``testsuite`` per rule, one ``testcase`` per check, ``failure`` on each failed check."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="medvlm-audit gate", tests=str(len(result.checks)),
                      failures=str(sum(not c.passed for c in result.checks)))
    by_rule: dict[str, list[Check]] = {}
    for c in result.checks:
        by_rule.setdefault(c.rule.label, []).append(c)
    for label, checks in by_rule.items():
        ts = ET.SubElement(root, "testsuite", name=label, tests=str(len(checks)),
                           failures=str(sum(not c.passed for c in checks)), errors="0", skipped="0")
        for c in checks:
            name = " ".join(x for x in (c.model, c.probe_set, c.subset) if x)
            tc = ET.SubElement(ts, "testcase", classname=label, name=name or label)
            text = f"value {_fmt(c.value, c.unit)}, rule {_bound_text(c)}" + (f" ({c.detail})" if c.detail else "")
            if not c.passed:
                msg = "not assessable" if c.status == "undefined" else f"{_fmt(c.value, c.unit)} fails {_bound_text(c)}"
                ET.SubElement(tc, "failure", message=msg, type="gate").text = text
            else:
                ET.SubElement(tc, "system-out").text = text
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
