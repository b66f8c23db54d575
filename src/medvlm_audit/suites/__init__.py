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
    "faithfulness": "medvlm_audit.suites.faithfulness.suite:FaithfulnessSuite",
}

SUITES = Registry("suite")
for _name, _target in _BUILTIN.items():
    SUITES.register(_name, _target)

_instances: dict[str, Suite] = {}


def register_suite(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register a suite under ``name``: a ``"module:factory"`` string or a callable returning a Suite."""
    SUITES.register(name, factory, replace=replace)
    _instances.pop(name, None)


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


__all__ = ["SUITES", "Plan", "PlanSource", "Skip", "Stage", "StageContext", "Suite", "SuiteResult", "Trial",
           "get_suite", "register_suite", "suite_names"]
