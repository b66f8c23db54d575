"""One OpenBLAS thread in every process that imports medvlm_audit before numpy, unless the user chose a number
(OpenBLAS's threads spin: on a 16-core machine `import numpy` cost 2.26 CPU-s against 0.26 with one thread)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = ("import json, medvlm_audit, numpy\n"
         "from threadpoolctl import threadpool_info\n"
         "print(json.dumps([i['num_threads'] for i in threadpool_info() if i.get('internal_api') == 'openblas']))")


def _openblas_threads(env: dict[str, str]) -> list[int]:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(extra)
    return env


def test_one_openblas_thread_by_default() -> None:
    threads = _openblas_threads(_env())
    if not threads:
        pytest.skip("this numpy is not linked against OpenBLAS")
    assert threads == [1] * len(threads)


def test_the_users_choice_is_kept() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: OpenBLAS uses one thread whatever is asked")
    threads = _openblas_threads(_env(OPENBLAS_NUM_THREADS="2"))
    if not threads:
        pytest.skip("this numpy is not linked against OpenBLAS")
    assert threads == [2] * len(threads)
