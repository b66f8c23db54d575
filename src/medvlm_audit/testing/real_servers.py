"""Real third-party OpenAI-compatible servers for conformance tests, started on this machine (CPU, offline).

``TransformersServe(folder)`` runs ``transformers serve FOLDER`` (the ``transformers[serving]`` extra) on a free
loopback port in its own process and waits until ``GET /v1/models`` answers; ``LlamaServer(gguf)`` runs llama.cpp's
``llama-server`` where that binary is on PATH (or given). Both stop their process (and only it) on exit.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Self


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    cmd: list[str]

    def __init__(self, startup_s: float = 180.0) -> None:
        self.port = free_port()
        self.startup_s = startup_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, log_dir: Path) -> str:
        self.log_path = Path(log_dir) / f"server-{self.port}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        atexit.register(self.stop)  # never outlive the test process, even when its teardown does not run
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd[:4]} exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    json.loads(r.read())
                    return self.base_url
            except (OSError, ValueError):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.cmd[:4]} did not answer within {self.startup_s:g} s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path and self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.proc = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TransformersServe(_Server):
    """``transformers serve FOLDER`` (pinned to that one model, which answers under the folder's path)."""

    def __init__(self, folder: str | Path, startup_s: float = 240.0) -> None:
        super().__init__(startup_s)
        self.model = str(folder)
        self.cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", self.model, "--host", "127.0.0.1",
                    "--port", str(self.port), "--device", "cpu", "--log-level", "warning"]


def llama_server_binary() -> str | None:
    """``llama-server`` from PATH or ``$LLAMA_SERVER``, or None."""
    given = os.environ.get("LLAMA_SERVER")
    if given and Path(given).is_file():
        return given
    return shutil.which("llama-server")


class LlamaServer(_Server):
    """llama.cpp's ``llama-server -m GGUF`` on a free port (text only here)."""

    def __init__(self, gguf: str | Path, binary: str, startup_s: float = 240.0) -> None:
        super().__init__(startup_s)
        self.model = Path(gguf).name
        self.cmd = [binary, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port), "-c", "2048",
                    "-t", "2", "--no-webui"]
