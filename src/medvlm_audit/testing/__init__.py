"""Test helpers shipped with the package: a fake OpenAI-compatible server with fault injection.

Names load lazily so ``python -m medvlm_audit.testing.fake_openai`` runs the module only once.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FakeOpenAIServer",
    "FakeServerProcess",
    "FaultRule",
    "ServerStats",
    "ThreadedFakeServer",
    "parse_fault_markers",
    "prompt_key",
    "spawn_fake_server",
    "yes_no_answer",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from medvlm_audit.testing import fake_openai

        return getattr(fake_openai, name)
    raise AttributeError(f"module 'medvlm_audit.testing' has no attribute {name!r}")
