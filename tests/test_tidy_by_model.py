"""A run's tidy table read in forked parts, one group of models each (export.tidy_by_model; issue 23 item 5):
the same table as one read, or None where the parts cannot be put together as it."""

from __future__ import annotations

import multiprocessing
import os

import pandas as pd
import pytest

from medvlm_audit import export
from medvlm_audit.store import RunStore

needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")


def _run(tmp_path):
    """An imported grounding run of three models (one of them text-only, with fewer conditions)."""
    from test_import_results import _manifest, _results

    from medvlm_audit.suites.grounding.import_results import import_results

    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 0, 0, 1, 0],
                                     "target_mask": [0, 1, 1, 1], "irrelevant_mask": [1, 1, 0, 1]})
    _results(tmp_path, "llava", {"original": [1, 0, -1, 1, 0], "swap": [0, 0, 1, 1, 1]})
    _results(tmp_path, "textlm", {"original": [1, 1, 1, 1, 1], "swap": [1, 1, 1, 1, 1]})
    return import_results(_manifest(tmp_path), res, tmp_path / "run", text_only=("textlm",))


@needs_fork
@pytest.mark.parametrize("parts", [2, 3, 8])
def test_the_table_read_in_parts_is_the_table_read_whole(tmp_path, parts) -> None:
    from medvlm_audit.suites.grounding.suite import tidy_grounding

    run = _run(tmp_path)
    with RunStore.open_dir(run, readonly=True) as store:
        whole = tidy_grounding(store)
        groups = export.model_groups(store, parts)
    assert [m for g in groups for m in g] == sorted(set(whole["model"]))
    got = export.tidy_by_model(tidy_grounding, run, parts)
    assert got is not None and export._ONLY_MODELS is None  # the restriction lives in the readers only
    pd.testing.assert_frame_equal(got, whole, check_exact=True)
    assert list(got.dtypes) == list(whole.dtypes)


def test_nothing_to_split_reads_nothing(tmp_path) -> None:
    from medvlm_audit.suites.grounding.suite import tidy_grounding

    run = _run(tmp_path)
    assert export.tidy_by_model(tidy_grounding, run, 1) is None
    assert export.tidy_by_model(tidy_grounding, run, 0) is None


def test_a_store_read_through_a_private_copy_is_read_whole(tmp_path, monkeypatch) -> None:
    from medvlm_audit.suites.grounding.suite import tidy_grounding

    run = _run(tmp_path)
    real = RunStore._connect_readonly

    def copied(self):  # as on read-only media with a pending WAL: a private copy per open
        self._copy_dir = tmp_path
        return real(self)

    monkeypatch.setattr(RunStore, "_connect_readonly", copied)
    monkeypatch.setattr(RunStore, "close", lambda self: self.db.close())
    assert export.tidy_by_model(tidy_grounding, run, 3) is None


def _pid_tidy(store: RunStore) -> pd.DataFrame:
    """A tidy whose dtype differs between the parts (ints in the first group's part, floats in the others)."""
    models = export._ONLY_MODELS or ()
    return pd.DataFrame({"model": list(models), "pid": os.getpid(),
                         "x": [1] * len(models) if "gpt" in models else [1.0] * len(models)})


@needs_fork
def test_parts_whose_dtypes_differ_are_not_put_together(tmp_path) -> None:
    run = _run(tmp_path)
    assert export.tidy_by_model(_pid_tidy, run, 3) is None  # one read whole could infer another dtype


@needs_fork
def test_the_parts_are_read_in_forked_processes(tmp_path) -> None:
    """Every part is read in a forked reader, never in this process, and the parts come back in model order. Which
    reader takes which part is the pool's choice: a reader done early takes the next part (a CI run on a loaded
    machine gave two readers for three parts), so the number of distinct readers is not asserted."""
    def tidy(store: RunStore) -> pd.DataFrame:
        models = export._ONLY_MODELS or ()
        return pd.DataFrame({"model": list(models), "pid": os.getpid()})

    run = _run(tmp_path)
    got = export.tidy_by_model(tidy, run, 3)
    assert got is not None and list(got["model"]) == ["gpt", "llava", "textlm"]
    assert os.getpid() not in set(got["pid"])


def test_readers_only_on_enough_cores(monkeypatch) -> None:
    import medvlm_audit.cpus as cpus

    for n, want in ((1, 0), (2, 0), (3, 0), (4, 3), (16, export.TIDY_PARTS_MAX)):
        monkeypatch.setattr(cpus, "usable_cpus", lambda n=n: n)
        assert export.tidy_parts() == want


@needs_fork
def test_the_report_command_s_table_read_in_parts_is_the_same(tmp_path, monkeypatch) -> None:
    from medvlm_audit.cli import _report_table
    from medvlm_audit.suites.grounding.suite import tidy_grounding

    run = _run(tmp_path)
    calls: list[int] = []
    real = export.tidy_by_model

    def spy(tidy, run_dir, parts):
        got = real(tidy, run_dir, parts)
        calls.append(parts if got is not None else 0)
        return got

    monkeypatch.setattr(export, "tidy_by_model", spy)
    monkeypatch.setattr(export, "tidy_parts", lambda: 2)
    table, modules = _report_table(str(run))
    assert calls == [2] and "medvlm_audit.suites.grounding.figures" in modules
    with RunStore.open_dir(run, readonly=True) as store:
        pd.testing.assert_frame_equal(table, tidy_grounding(store), check_exact=True)
