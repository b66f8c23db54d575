"""Suites: the registry of audits and the one :class:`~medvlm_audit.suites.base.Suite` interface.

Each audit is a subpackage found by name (``SUITES``); the core (api, cli, config, export, report) reaches a
suite only through :func:`get_suite`. A suite's model backends (its reference models) are registered in the
model-backend registry, and its image operations (overlays) in ``images.IMAGE_OPS``, when the suite is loaded. A new suite is one folder plus one :func:`register_suite`
call (or one line in ``_BUILTIN``); see docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from medvlm_audit.registry import Registry
from medvlm_audit.suites.base import Plan, PlanSource, Skip, Stage, StageContext, Suite, SuiteResult, Trial

#: the built-in suites: name -> "module:factory" (a factory returns a Suite; imported on first use)
_BUILTIN: dict[str, str] = {
    "grounding": "medvlm_audit.suites.grounding.suite:GroundingSuite",
    "stress": "medvlm_audit.suites.stress.suite:StressSuite",
    "reports": "medvlm_audit.suites.reports.suite:ReportsSuite",
    "faithfulness": "medvlm_audit.suites.faithfulness.suite:FaithfulnessSuite",
}

#: each suite's own CLI commands: "name" (or "group name") -> "module:function". Command modules import only
#: typer and light helpers (the work is imported inside the function), so the CLI starts fast.
_BUILTIN_COMMANDS: dict[str, str] = {
    "import-results": "medvlm_audit.suites.grounding.commands:import_results_cmd",
    "corpus-audit": "medvlm_audit.suites.reports.commands:corpus_audit_cmd",
    "build iu-reports": "medvlm_audit.suites.reports.commands:build_iu_reports_cmd",
    "judge-validate": "medvlm_audit.suites.faithfulness.commands:judge_validate_cmd",
}

#: the built-in suites' own model backends (also declared as ``Suite.backends``), registered here so a model of
#: any suite can be built before its suite is loaded
_BUILTIN_BACKENDS: dict[str, str] = {
    "reference": "medvlm_audit.suites.grounding.reference:build_reference",
    "vision_probe": "medvlm_audit.suites.grounding.vision_probe:build_vision_probe",
    "stress_reference": "medvlm_audit.suites.stress.reference:build_stress_reference",
    "report_reference": "medvlm_audit.suites.reports.reference:factory",
    "faithfulness-reference": "medvlm_audit.suites.faithfulness.reference:factory",
}

COMMANDS = Registry("command")
for _name, _target in _BUILTIN_COMMANDS.items():
    COMMANDS.register(_name, _target)

def _register_builtin_backends() -> None:
    from medvlm_audit.models.registry import register_backend

    for backend, target in _BUILTIN_BACKENDS.items():
        register_backend(backend, target, replace=True)


_register_builtin_backends()

SUITES = Registry("suite")
for _name, _target in _BUILTIN.items():
    SUITES.register(_name, _target)

_instances: dict[str, Suite] = {}


def register_suite(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register a suite under ``name``: a ``"module:factory"`` string or a callable returning a Suite."""
    SUITES.register(name, factory, replace=replace)
    _instances.pop(name, None)


def register_command(name: str, target: Any, *, replace: bool = False) -> None:
    """Register a suite's CLI command: ``name`` ("corpus-audit", or "build iu-reports" for a ``build`` subcommand)
    -> ``"module:function"`` (a typer command function). Takes effect for CLIs created afterwards."""
    COMMANDS.register(name, target, replace=replace)


def suite_names() -> list[str]:
    return SUITES.names()


def get_suite(name: str) -> Suite:
    """The suite registered as ``name`` (built once); its model backends and image operations (``image_ops``)
    are registered on first load."""
    if name not in _instances:
        suite = SUITES.load(name)()
        from medvlm_audit.models.registry import register_backend

        for backend, target in getattr(suite, "backends", {}).items():
            register_backend(backend, target, replace=True)
        from medvlm_audit.images import register_image_op

        for op, target in getattr(suite, "image_ops", {}).items():
            register_image_op(op, target, replace=True)
        _instances[name] = suite
    return _instances[name]


__all__ = ["COMMANDS", "SUITES", "Plan", "PlanSource", "Skip", "Stage", "StageContext", "Suite", "SuiteResult", "Trial",
           "get_suite", "register_command", "register_suite", "suite_names"]
