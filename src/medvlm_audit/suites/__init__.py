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

#: the built-in suites' own model backends (also declared as ``Suite.backends``), registered here so a model of
#: any suite can be built before its suite is loaded
_BUILTIN_BACKENDS: dict[str, str] = {
    "reference": "medvlm_audit.suites.grounding.reference:build_reference",
    "vision_probe": "medvlm_audit.suites.grounding.vision_probe:build_vision_probe",
    "stress_reference": "medvlm_audit.suites.stress.reference:build_stress_reference",
    "report_reference": "medvlm_audit.suites.reports.reference:factory",
    "faithfulness-reference": "medvlm_audit.suites.faithfulness.reference:factory",
}

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


def suite_commands() -> dict[str, tuple[str, str]]:
    """Every registered suite's own CLI commands: ``"name"`` or ``"build name"`` -> (suite, ``"module:function"``),
    from :meth:`Suite.commands` (loads every suite; the CLI asks only when it meets a command it does not know or
    lists its commands). Two suites declaring one command name is an error naming both."""
    from medvlm_audit.errors import ConfigError

    out: dict[str, tuple[str, str]] = {}
    for suite_name in suite_names():
        for cmd, target in get_suite(suite_name).commands().items():
            if cmd in out and out[cmd][1] != target:
                raise ConfigError(f"command {cmd!r} is declared by suites {out[cmd][0]!r} and {suite_name!r}")
            out[cmd] = (suite_name, target)
    return out


def suite_names() -> list[str]:
    return SUITES.names()


def get_suite(name: str) -> Suite:
    """The suite registered as ``name`` (built once); its model backends and image operations (``image_ops``)
    are registered on first load."""
    if name not in _instances:
        suite = SUITES.load(name)()
        if Suite not in type(suite).__mro__:
            from medvlm_audit.errors import ConfigError

            raise ConfigError(f"suite {name!r}: {type(suite).__name__} must subclass medvlm_audit.suites.Suite "
                              "(the protocol gives its optional members their defaults)")
        from medvlm_audit.models.registry import register_backend

        for backend, target in suite.backends.items():
            register_backend(backend, target, replace=True)
        from medvlm_audit.images import register_image_op

        for op, target in suite.image_ops.items():
            register_image_op(op, target, replace=True)
        _instances[name] = suite
    return _instances[name]


__all__ = ["SUITES", "Plan", "PlanSource", "Skip", "Stage", "StageContext", "Suite", "SuiteResult", "Trial",
           "get_suite", "register_suite", "suite_commands", "suite_names"]
