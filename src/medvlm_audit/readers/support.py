"""The reader-study app reaches an audit's conditions and metric definitions only through the suite registry:
the suite recorded in the run store names a ``reader_support`` module (e.g. the grounding suite's mask rendering
and CGR / IS definitions)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from medvlm_audit.errors import AuditError
from medvlm_audit.store import STORE_FILE, RunStore


def run_suite(run_dir: str | Path) -> str:
    """The suite a run directory was made by (from its store)."""
    if not (Path(run_dir) / STORE_FILE).exists():
        raise AuditError(f"{run_dir}: no run store ({STORE_FILE}) found")
    with RunStore.open_dir(run_dir, readonly=True) as store:
        name = store.meta().get("suite")
    if not name:
        raise AuditError(f"{run_dir}: the run store records no suite")
    return str(name)


def reader_support(run_dir: str | Path | None = None, suite_name: str | None = None) -> ModuleType:
    """The reader-study support module of the suite that made ``run_dir`` (or of ``suite_name``)."""
    from medvlm_audit.suites import get_suite

    if suite_name is None:
        if run_dir is None:
            raise AuditError("a reader-study analysis needs the run directory (or the suite) its reads came from")
        suite_name = run_suite(run_dir)
    suite = get_suite(suite_name)
    target = getattr(suite, "reader_support", None)
    if not target:
        raise AuditError(f"suite {suite.name!r} has no reader-study support for this task")
    return importlib.import_module(target)
