"""Property-based tests (Hypothesis) of every suite's tidy scoring, analysis and report writer (issue 22).

Each suite runs once on a small input (its embedded default, shrunk); every example then keeps a drawn subset of
the run's models, cases and conditions and rewrites its answers as any mix of parsed, unparsed, refused, empty,
errored and one-word answers, or one answer everywhere (:mod:`medvlm_audit.testing.answers`). Whatever the draw,
``medvlm-audit report`` must write report.html, metrics.csv and a strict-JSON summary.json, with an undefined
quantity shown as undefined and never a traceback.

Profiles (environment variable ``MEDVLM_PROPERTY_PROFILE``): ``ci`` (the default: 200 examples per suite, at
most 12 cases per example), ``dev`` (25 examples, for a quick local check) and ``slow`` (1,000 examples, up to
60 cases; what the ``slow``-marked test runs in the slow lane, ``MEDVLM_SLOW_LANE=1 pytest -m slow``).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings

from medvlm_audit import api
from medvlm_audit.suites import get_suite
from medvlm_audit.testing.answers import (
    apply_edit,
    check_report,
    report_of,
    store_edits,
    store_shape,
)

SUITES = ("grounding", "stress", "faithfulness", "reports")
#: profile -> (examples per suite, most cases kept per example)
PROFILES = {"dev": (25, 12), "ci": (200, 12), "slow": (1000, 60)}
B = 20

WORDS = ["heart", "size", "normal", "lungs", "clear", "no", "effusion", "pneumothorax", "mild", "cardiomegaly", "breast", "tissue", "prostate", "opacity", "left", "right", "base", "stable", "degenerative", "spine"]


def _reference(path: Path, n: int = 60) -> Path:
    """A small reference corpus (the reports suite's audit is against it; the IU corpus is 3,800 reports)."""
    rnd = random.Random(0)
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": " ".join(rnd.choice(WORDS) for _ in range(9)),
                                        "group": "F" if i % 2 else "M"}) + "\n" for i in range(n)))
    return path


def _config(suite: str, out: Path) -> dict[str, Any]:
    s = get_suite(suite)
    if suite == "grounding":
        return s.embedded_config(out, n_cases=60, n_train=60, log=lambda *a: None)
    if suite == "faithfulness":
        cfg = s.embedded_config(out, n_items=6)
        cfg["conditions"] = ["baseline", "tb_rad:aligned", "tb_rad:misleading", "vb_bb:misleading"]
        return cfg
    if suite == "reports":
        cfg = s.embedded_config(out, n_images=12, samples=2)
        cfg.update(B=B, n_perm=B, bertscore="off", semantic="off", surface_max=50,
                   reference=str(_reference(out.parent / "reference.jsonl")))
        return cfg
    return s.embedded_config(out)


@pytest.fixture(scope="module")
def base_runs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """suite -> a finished small run of it (built on first use, once per module)."""
    built: dict[str, Path] = {}

    def get(suite: str) -> Path:
        if suite not in built:
            folder = tmp_path_factory.mktemp(f"base_{suite}")
            built[suite] = api.run(_config(suite, folder / "run"), progress=False).run_dir
        return built[suite]

    return get


def _profile(name: str | None = None) -> tuple[int, int]:
    name = name or os.environ.get("MEDVLM_PROPERTY_PROFILE", "ci")
    if name not in PROFILES:
        raise ValueError(f"MEDVLM_PROPERTY_PROFILE={name!r}; known: {sorted(PROFILES)}")
    return PROFILES[name]


def _check_any_answers(base: Path, work: Path, examples: int, max_cases: int) -> None:
    shape = store_shape(base / "run.sqlite")

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(store_edits(shape, max_cases=max_cases))
    def prop(edit: Any) -> None:
        run = apply_edit(base, edit, work / "run")
        check_report(report_of(run, B=B))

    prop()


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("suite", SUITES)
def test_any_answers_give_a_report(suite: str, base_runs: Any, tmp_path: Path) -> None:
    examples, max_cases = _profile()
    _check_any_answers(base_runs(suite), tmp_path, examples, max_cases)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("MEDVLM_SLOW_LANE"),
                    reason="slow lane only: MEDVLM_SLOW_LANE=1 pytest -m slow (1,000 examples per suite)")
@pytest.mark.timeout(6 * 3600)
@pytest.mark.parametrize("suite", SUITES)
def test_any_answers_give_a_report_slow_profile(suite: str, base_runs: Any, tmp_path: Path) -> None:
    examples, max_cases = _profile("slow")
    _check_any_answers(base_runs(suite), tmp_path, examples, max_cases)
