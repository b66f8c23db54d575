"""Issue 23: what a large run holds for its whole length is compact: the plan's trials (CompactTrials), the loaded
manifest (its Arrow columns) and a model's key set (digests). Each test measures the Python memory with
tracemalloc and would fail with the plain representation (a list of Trial objects, rows as Python lists, hex
keys)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import make_tiny_probeset

from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Decoding, Message
from medvlm_audit.plan import CompactTrials, Trial
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
from medvlm_audit.suites.grounding.probeset import ProbeSet

Q = (Message("user", "Is there a nodule?"),)


def _held(build: Callable[[], Any]) -> tuple[Any, int]:
    """What ``build`` returns and the bytes of Python memory it holds."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = build()
        gc.collect()
        return out, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _trials(n: int) -> list[Trial]:
    conds = ("original", "swap", "target_mask", "irrelevant_mask", "no_image")
    out = []
    for i in range(n):
        cond = conds[i % 5]
        images = () if cond == "no_image" else (ImageRecipe.standard(f"/d/img{i // 5}.png", 224),)
        out.append(Trial("ps", f"c{i // 5:05d}", cond, Q, images, 0))
    return out


def test_compact_trials_read_back_equal_to_what_was_appended() -> None:
    a, b = ImageRecipe.standard("/d/a.png", 224), ImageRecipe.standard("/d/b.png", 224)
    trials = [
        Trial("ps", "c1", "original", Q, (a,)),
        Trial("ps", "c1", "no_image", Q),
        Trial("other", "c2", "pair", Q, (a, b, a), 3, {"gold": [1, 2]}, (("max_new_tokens", 64),)),
        Trial("ps", "c3", "swap", Q, (b,), 1, None, (("max_new_tokens", 64),)),
    ]
    ts = CompactTrials(trials)
    assert len(ts) == 4 and list(ts) == trials and ts == trials
    assert ts[-1] == trials[-1] and ts[1:3] == trials[1:3]
    assert ts[2].payload == {"gold": [1, 2]} and ts[2].images == (a, b, a) and ts[0].payload is None
    with pytest.raises(IndexError):
        ts[4]
    ts.append(trials[0])
    assert len(ts) == 5 and ts[4] == trials[0] and ts != trials


def test_compact_trials_hold_a_fraction_of_a_trial_list() -> None:
    made = _trials(20_000)  # the recipes, strings and messages exist either way: only the containers are measured
    as_list, list_bytes = _held(lambda: [Trial(t.probe_set, t.case_id, t.condition, t.messages, tuple(list(t.images)),
                                               t.sample_index) for t in made])
    compact, compact_bytes = _held(lambda: CompactTrials(made))
    assert compact == as_list
    assert list_bytes / len(made) > 120  # a Trial (~100 bytes) and its images tuple, per trial
    assert compact_bytes / len(made) < 40, compact_bytes / len(made)


def test_grounding_plan_is_compact_with_one_recipe_per_distinct_image(tmp_path: Path) -> None:
    ps = make_tiny_probeset(tmp_path, n=12)
    plan = plan_grounding([ps], GroundingOptions())
    assert isinstance(plan.trials, CompactTrials)
    recipes = [r for t in plan.trials for r in t.images]
    distinct = set(recipes)
    assert len({id(r) for r in recipes}) == len(distinct) < len(recipes)  # a swap image is another case's image


def test_loaded_manifest_holds_its_columns_compactly(tmp_path: Path) -> None:
    make_tiny_probeset(tmp_path, n=2_000)
    ProbeSet.load(tmp_path / "probeset")  # imports, caches and interned path parts are not the manifest's
    # measured as what dropping the loaded set frees: a load may also grow a table of the interpreter's (the
    # interned strings' dict resized on a path part, 3.8 MB, after other tests in the same process), which stays
    gc.collect()
    tracemalloc.start()
    try:
        ps = ProbeSet.load(tmp_path / "probeset")
        rows = list(ps.rows())
        assert len(rows) == 2_000 and rows[5]["case_id"] == "c005"
        del rows
        gc.collect()
        alive = tracemalloc.get_traced_memory()[0]
        del ps
        gc.collect()
        held = alive - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # as Python lists the manifest's texts and floats cost ~650 bytes per row (6.9 MB for 10,000 cases)
    assert held / 2_000 < 250, held / 2_000


def test_a_model_s_key_set_holds_digests(tmp_path: Path) -> None:
    from medvlm_audit import runner
    from medvlm_audit.models.openai_compat import OpenAIChatModel

    ps = make_tiny_probeset(tmp_path, n=12)
    plan = plan_grounding([ps], GroundingOptions())
    work = runner.ModelWork(OpenAIChatModel("m", "fake", "http://127.0.0.1:9"), Decoding(), set(), None)
    hashes = {r: f"{i:064x}" for i, r in enumerate(runner.TrialIndex(plan.trials).first)}
    rows, requests, new = work.admit(plan.trials, hashes)
    assert work.keys and all(type(k) is bytes and len(k) == 32 for k in work.keys)
    assert work.key_hexes() == {r[0] for r in requests} == {r[5] for r in rows} == {k for k, _, _ in new}
    assert work.n_pending == len(new) == len(work.keys)  # one model, nothing answered: every key queued once
