"""The faithfulness tidy's KB scores and judge validations are computed once and kept in the run store (issue 23):
a later tidy reads them instead of scoring again, gives the same table as scoring from scratch, never reads a value
computed for another knowledge base or flag, and never writes to a store opened read-only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd

from medvlm_audit import api
from medvlm_audit.store import RunStore
from medvlm_audit.suites.faithfulness.suite import tidy_faithfulness

SUBJECTS = [{"name": "cue-admitter", "backend": "faithfulness-reference", "behaviour": "cue-admitter"}]
JUDGES = [{"name": "reference-judge", "backend": "faithfulness-reference", "behaviour": "reference-judge"}]


def _run(run_dir: Path) -> None:
    api.run({"suite": "faithfulness", "run_dir": str(run_dir), "probe_sets": ["phantom"], "models": SUBJECTS,
             "judges": JUDGES, "phantom_items": 6, "judge_axes": ["ca", "confidence"],
             "conditions": ["baseline", "tb_rad:aligned", "tb_rad:misleading"]}, progress=False)


def _kinds(db: Path) -> dict[str, int]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT kind, COUNT(*) FROM derived GROUP BY kind"))
    finally:
        con.close()


def test_scores_are_stored_once_and_read_back(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _run(run_dir)
    db = run_dir / "run.sqlite"
    kinds = _kinds(db)
    fams = sorted(k.split(":")[0] for k in kinds)
    assert fams == ["faithfulness.judge", "faithfulness.kb"], kinds
    stored = api.tidy(run_dir)  # read-only: reads the stored scores

    # from scratch (no stored scores): the same table
    con = sqlite3.connect(db)
    con.execute("DELETE FROM derived")
    con.commit()
    con.close()
    scratch = api.tidy(run_dir)
    pd.testing.assert_frame_equal(stored, scratch)
    assert _kinds(db) == {}  # the read-only tidy wrote nothing
    answers = scratch[scratch["stage"] == "answer"]
    assert answers["kb_status"].notna().any() and scratch["judge_status"].notna().any()

    # a writable tidy stores them again (the run's export does this)
    with RunStore.open_dir(run_dir) as store:
        tidy_faithfulness(store)
    assert _kinds(db) == kinds

    # the values are read, not recomputed: a stored value changed by hand shows in the next tidy
    con = sqlite3.connect(db)
    kb_kind = next(k for k in kinds if k.startswith("faithfulness.kb:"))
    n = con.execute("UPDATE derived SET v = ? WHERE kind = ?", (json.dumps(["no_kb_entry", None]), kb_kind)).rowcount
    con.commit()
    con.close()
    assert n == kinds[kb_kind]
    changed = api.tidy(run_dir)
    assert set(changed.loc[changed["stage"] == "answer", "kb_status"].dropna()) == {"no_kb_entry"}


def test_other_flags_do_not_read_scores_stored_for_different_ones(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _run(run_dir)
    db = run_dir / "run.sqlite"
    kinds = _kinds(db)
    kb_kind = next(k for k in kinds if k.startswith("faithfulness.kb:"))
    con = sqlite3.connect(db)
    con.execute("UPDATE derived SET v = ? WHERE kind = ?", (json.dumps(["no_kb_entry", None]), kb_kind))
    con.commit()
    con.close()
    with RunStore.open_dir(run_dir, readonly=True) as store:
        from medvlm_audit.suites.faithfulness.suite import recorded_options

        opts = recorded_options(store)
        other = opts.model_copy(update={"flags": {**dict(opts.flags), "unit-test-flag": "x"}})
        t = tidy_faithfulness(store, other)
    assert "no_kb_entry" not in set(t.loc[t["stage"] == "answer", "kb_status"].dropna())
    # a writable tidy with the other flags replaces the old kind (no stale values kept)
    with RunStore.open_dir(run_dir) as store:
        tidy_faithfulness(store, other)
    new = _kinds(db)
    assert kb_kind not in new and sum(k.startswith("faithfulness.kb:") for k in new) == 1
