"""Generators of hostile answers for property-based tests of any suite's analysis and report (issue 22).

The generators work on a finished run store, not on a suite's tidy table, so a new suite gets them for free:
run the suite once on a small input (its embedded default), then every example

1. keeps a subset of the run's models, cases and conditions (a single model, a single item, a condition
   missing, the baseline missing: whatever the draw gives; at least one trial is kept), and
2. rewrites every kept answer as one of :data:`ANSWER_KINDS`: the model's own answer (``kept``), text off
   the suite's vocabulary (``unparsed``), a refusal, an empty answer, a transport error (``errored``), a
   one-word answer, or, for the whole table at once, the same answer everywhere (``identical``).

:func:`apply_edit` writes the edited copy of the store into a new run folder; the suite's own ``tidy``,
``analyse`` and the one report writer then run on it exactly as ``medvlm-audit report`` would
(:func:`report_of`). :func:`check_report` states what every such report must satisfy: report.html,
metrics.csv and a strict-JSON summary.json exist; an undefined quantity is a missing value (never ``inf``,
never the text ``nan`` in the page) and, where its n is not zero, its note says why.

Hypothesis is imported lazily (it is a test dependency, not a runtime one).
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: what one rewritten answer may be
ANSWER_KINDS: tuple[str, ...] = ("kept", "unparsed", "refused", "empty", "errored", "one_word")

UNPARSED = ("Maybe.", "The image quality is insufficient to say.", "Yes and no", "42", "¯\\_(ツ)_/¯",
            "Answer: (E)", "{\"answer\": null}", "I think so, possibly, but not sure", "NaN", "inf",
            "no yes no yes", "Définitivement peut-être", "\u200b", "<b>yes</b>?", "A" * 300)
REFUSED = ("I'm sorry, but I can't help with interpreting medical images.",
           "As an AI, I cannot provide a diagnosis.", "I cannot answer that.")
ONE_WORD = ("yes", "no", "normal", "left", "A", "effusion", "Yes", "none", "the")
ERRORS = (("server", "HTTP 500: internal error"), ("timeout", "no answer in 30 s"),
          ("rate_limit", "HTTP 429"), ("bad_request", "HTTP 400: context too long"))


@dataclass(frozen=True)
class StoreShape:
    """What a base run holds: its models, (probe set, case) pairs, conditions and answer keys."""

    models: tuple[str, ...]
    cases: tuple[tuple[str, str], ...]
    conditions: tuple[str, ...]
    keys: tuple[str, ...]
    #: every (model, probe set, case, condition) with a trial: an edit keeps at least one of them
    trials: tuple[tuple[str, str, str, str], ...] = ()


@dataclass
class StoreEdit:
    """One drawn variation of a base run (see the module docstring)."""

    models: list[str]
    cases: list[tuple[str, str]]
    conditions: list[str]
    #: answer key -> (text or None, error_kind or None, error_message or None); keys not named keep theirs
    answers: dict[str, tuple[str | None, str | None, str | None]] = field(default_factory=dict)
    identical: str | None = None

    def describe(self) -> str:
        kinds: dict[str, int] = {}
        for text, err, _ in self.answers.values():
            k = "errored" if err else ("empty" if text == "" else "rewritten")
            kinds[k] = kinds.get(k, 0) + 1
        return (f"models={self.models} cases={len(self.cases)} conditions={self.conditions} "
                f"identical={self.identical!r} answers={kinds}")


def store_shape(store_path: str | Path) -> StoreShape:
    """The models, cases, conditions and keys of the run store at ``store_path`` (read-only)."""
    con = sqlite3.connect(f"file:{Path(store_path).resolve()}?mode=ro", uri=True)
    try:
        models = tuple(r[0] for r in con.execute("SELECT DISTINCT model FROM trials ORDER BY model"))
        cases = tuple((r[0], r[1]) for r in con.execute(
            "SELECT DISTINCT probe_set, case_id FROM trials ORDER BY probe_set, case_id"))
        conditions = tuple(r[0] for r in con.execute("SELECT DISTINCT condition FROM trials ORDER BY condition"))
        keys = tuple(r[0] for r in con.execute("SELECT DISTINCT key FROM trials ORDER BY key"))
        trials = tuple((r[0], r[1], r[2], r[3]) for r in con.execute(
            "SELECT DISTINCT model, probe_set, case_id, condition FROM trials ORDER BY 1, 2, 3, 4"))
    finally:
        con.close()
    return StoreShape(models, cases, conditions, keys, trials)


def _subset(draw: Any, st: Any, items: Sequence[Any], max_size: int | None = None) -> list[Any]:
    """A non-empty subset, biased towards the hostile ends (one element, everything)."""
    items = list(items)
    if len(items) <= 1:
        return items
    how = draw(st.sampled_from(("one", "all", "some")))
    if how == "one":
        return [draw(st.sampled_from(items))]
    if how == "all" and (max_size is None or len(items) <= max_size):
        return items
    idx = draw(st.lists(st.integers(0, len(items) - 1), min_size=1, max_size=max_size or len(items),
                        unique=True))
    return [items[i] for i in sorted(idx)]


def answer(kind: str, draw: Any, st: Any) -> tuple[str | None, str | None, str | None]:
    """One answer of ``kind`` as (text, error_kind, error_message)."""
    if kind == "unparsed":
        return draw(st.one_of(st.sampled_from(UNPARSED), st.text(max_size=40))), None, None
    if kind == "refused":
        return draw(st.sampled_from(REFUSED)), None, None
    if kind == "empty":
        return draw(st.sampled_from(("", " ", "\n"))), None, None
    if kind == "errored":
        err, msg = draw(st.sampled_from(ERRORS))
        return None, err, msg
    if kind == "one_word":
        return draw(st.sampled_from(ONE_WORD)), None, None
    raise ValueError(f"unknown answer kind {kind!r}; known: {ANSWER_KINDS}")


def store_edits(shape: StoreShape, *, max_cases: int = 12) -> Any:
    """A Hypothesis strategy of :class:`StoreEdit` over a run of this shape."""
    from hypothesis import strategies as st

    @st.composite
    def edits(draw: Any) -> StoreEdit:
        models = _subset(draw, st, shape.models)
        cases = _subset(draw, st, shape.cases, max_size=max_cases)
        conditions = _subset(draw, st, shape.conditions)
        if shape.trials:  # one drawn trial is always kept, so the edited run is never empty
            model, probe_set, case_id, condition = draw(st.sampled_from(shape.trials))
            models = sorted({*models, model})
            cases = sorted({*cases, (probe_set, case_id)})
            conditions = sorted({*conditions, condition})
        identical = None
        answers: dict[str, tuple[str | None, str | None, str | None]] = {}
        if draw(st.integers(0, 9)) == 0:  # one answer for every trial
            identical = draw(st.sampled_from((*ONE_WORD, *UNPARSED[:3], "")))
        else:
            mix = draw(st.lists(st.sampled_from(ANSWER_KINDS), min_size=1, max_size=4, unique=True))
            for key in shape.keys:
                kind = draw(st.sampled_from(mix))
                if kind != "kept":
                    answers[key] = answer(kind, draw, st)
        return StoreEdit(models, cases, conditions, answers, identical)

    return edits()


def apply_edit(base_run: str | Path, edit: StoreEdit, out_run: str | Path, store_file: str = "run.sqlite") -> Path:
    """Copy the run folder ``base_run`` to ``out_run`` (replacing it) with ``edit`` applied to its store;
    returns ``out_run``. Only the store is edited: the files it names (images, item files) are shared."""
    base, out = Path(base_run), Path(out_run)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    src = sqlite3.connect(f"file:{(base / store_file).resolve()}?mode=ro", uri=True)
    dst = sqlite3.connect(out / store_file)
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")
        dst.execute("CREATE TEMP TABLE keep_cases(probe_set TEXT, case_id TEXT)")
        dst.executemany("INSERT INTO keep_cases VALUES (?, ?)", edit.cases)
        qm = ",".join("?" * len(edit.models))
        qc = ",".join("?" * len(edit.conditions))
        dst.execute(f"DELETE FROM trials WHERE model NOT IN ({qm}) OR condition NOT IN ({qc}) OR "
                    "(probe_set, case_id) NOT IN (SELECT probe_set, case_id FROM keep_cases)",
                    [*edit.models, *edit.conditions])
        if edit.identical is not None:
            dst.execute("UPDATE responses SET text = ?, error_kind = NULL, error_message = NULL, top_logprobs = NULL",
                        (edit.identical,))
        for key, (text, err, msg) in edit.answers.items():
            dst.execute("UPDATE responses SET text = ?, error_kind = ?, error_message = ?, top_logprobs = NULL "
                        "WHERE key = ?", (text, err, msg, key))
        dst.commit()
    finally:
        src.close()
        dst.close()
    return out


def report_of(run_dir: str | Path, **report_options: Any) -> Path:
    """The report of a run exactly as ``medvlm-audit report`` writes it (report.html's path)."""
    from medvlm_audit import api

    return api.report(run_dir, **report_options)


def _strict_json(text: str) -> Any:
    def refuse(c: str) -> Any:
        raise ValueError(f"summary.json holds {c}: an undefined quantity must be null")

    return json.loads(text, parse_constant=refuse)


def check_report(page: str | Path) -> dict[str, Any]:
    """What every report must satisfy whatever the answers were; returns the parsed summary."""
    import pandas as pd

    page = Path(page)
    folder = page.parent
    assert page.is_file(), f"{page} missing"
    for name in ("metrics.csv", "summary.json"):
        assert (folder / name).is_file(), f"{folder / name} missing"
    summary = _strict_json((folder / "summary.json").read_text(encoding="utf-8"))
    m = pd.read_csv(folder / "metrics.csv")
    for col in ("point", "ci_low", "ci_high"):
        vals = pd.to_numeric(m[col], errors="coerce").to_numpy(dtype=float)
        assert not (vals == math.inf).any() and not (vals == -math.inf).any(), f"metrics.csv {col} holds inf"
    point = pd.to_numeric(m["point"], errors="coerce")
    n = pd.to_numeric(m["n"], errors="coerce").fillna(0)
    note = m["note"].astype(object).where(m["note"].notna(), "").astype(str).str.strip() if "note" in m else pd.Series("", index=m.index)
    why = m[point.isna() & (n > 0) & (note == "")]
    assert why.empty, ("undefined values without a note saying why: "
                       + "; ".join(f"{r.model}/{r.metric}/{r.subset}" for r in why.head(5).itertuples()))
    html = page.read_text(encoding="utf-8")
    for bad in (">nan<", ">NaN<", ">inf<", "Traceback"):
        assert bad not in html, f"report.html shows {bad!r}"
    return summary
