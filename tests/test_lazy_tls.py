"""aiohttp imported without loading its TLS contexts' CA certificates until the first https request
(``medvlm_audit.lazy_tls``): a plain-http process never loads them, an https request gets the same contexts
aiohttp would have built. Each case runs in a fresh interpreter (aiohttp is imported once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_certificates_are_loaded_at_the_first_https_request_not_before() -> None:
    out = _run("""
        import asyncio, socket, ssl
        from medvlm_audit.lazy_tls import import_aiohttp, pending
        aiohttp = import_aiohttp()
        import aiohttp.connector as c
        full = ssl.create_default_context().cert_store_stats()
        print("after import", pending(), c._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"])

        async def get(url):
            async with aiohttp.ClientSession() as s:
                try:
                    async with s.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
                        await r.read()
                except aiohttp.ClientError:
                    pass

        sock = socket.socket(); sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]; sock.close()
        asyncio.run(get(f"http://127.0.0.1:{port}/"))
        print("after http", pending())
        asyncio.run(get(f"https://127.0.0.1:{port}/"))
        print("after https", pending(), c._SSL_CONTEXT_VERIFIED.cert_store_stats() == full,
              c._SSL_CONTEXT_VERIFIED.verify_mode == ssl.CERT_REQUIRED, c._SSL_CONTEXT_UNVERIFIED.verify_mode == ssl.CERT_NONE)
    """).splitlines()
    assert out[0] == "after import 2 0"
    assert out[1] == "after http 2"
    assert out[2] == "after https 0 True True True"


def test_an_aiohttp_imported_before_is_left_as_it_is() -> None:
    out = _run("""
        import aiohttp
        from medvlm_audit.lazy_tls import import_aiohttp, pending
        print(import_aiohttp() is aiohttp, pending())
    """)
    assert out.split() == ["True", "0"]


def test_the_openai_model_module_imports_aiohttp_lazily() -> None:
    out = _run("""
        import medvlm_audit.models.openai_compat
        from medvlm_audit.lazy_tls import pending
        print(pending())
    """)
    assert out.split() == ["2"]
