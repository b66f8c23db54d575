"""A process forked inside ``sigterm_as_interrupt`` (the report's figure workers, the render workers) inherits its
SIGTERM handler; a worker its pool ends with SIGTERM must end quietly, as SIGTERM ends a process, not raise
KeyboardInterrupt and print a traceback into the user's terminal (seen at the end of `medvlm-audit demo`)."""

from __future__ import annotations

import multiprocessing
import signal
import time

import pytest

from medvlm_audit.cliutil import sigterm_as_interrupt


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_forked_worker_ended_with_sigterm_ends_quietly(capfd) -> None:
    ctx = multiprocessing.get_context("fork")
    with sigterm_as_interrupt():
        p = ctx.Process(target=time.sleep, args=(30,))
        p.start()
        time.sleep(0.5)
        p.terminate()
        p.join(10)
    assert p.exitcode == -signal.SIGTERM
    err = capfd.readouterr().err
    assert "KeyboardInterrupt" not in err and "Traceback" not in err


def test_the_process_that_set_it_still_stops_as_after_ctrl_c() -> None:
    import os

    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
