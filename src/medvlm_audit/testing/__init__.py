"""Test helpers shipped with the package: a fake OpenAI-compatible server with fault injection."""

from medvlm_audit.testing.fake_openai import (
    FakeOpenAIServer,
    FaultRule,
    ServerStats,
    ThreadedFakeServer,
    parse_fault_markers,
    prompt_key,
    spawn_fake_server,
    yes_no_answer,
)

__all__ = [
    "FakeOpenAIServer",
    "FaultRule",
    "ServerStats",
    "ThreadedFakeServer",
    "parse_fault_markers",
    "prompt_key",
    "spawn_fake_server",
    "yes_no_answer",
]
