"""The reader server under a locked study store (another process holds SQLite's write lock): pages stay fast,
an answer that cannot be written is refused as busy (503, nothing written) and saved on retry, never a 500;
a page view writes nothing; the study's files are owner-only from their creation."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient

from medvlm_audit.readers.app import create_app
from medvlm_audit.readers.study import Study, create_study

HOLD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")
con.execute("INSERT OR REPLACE INTO meta VALUES('lock_test', '1')")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("COMMIT")
"""


@pytest.fixture()
def study(tmp_path: Path) -> tuple[Path, dict]:
    items = pd.DataFrame({"item_id": ["c1", "c2", "c3"], "question": ["q1", "q2", "q3"],
                          "cot_text": ["Step 1.", "Step 2.", "Step 3."], "model_name": ["m1", "m1", "m2"]})
    res = create_study(None, "cot-rating", 3, ["ana", "ben"], out=tmp_path / "cot", items=items)
    return tmp_path / "cot", res


def _page(c: TestClient, token: str) -> tuple[str, str, str]:
    page = c.get(f"/r/{token}?i=1").text
    item = page.split('data-item="')[1].split('"')[0]
    csrf = page.split('data-csrf="')[1].split('"')[0]
    scale = page.split('data-scale="')[1].split('"')[0]
    value = page.split('data-value="')[1].split('"')[0]
    return item, csrf, f"{scale}\t{value}"


def test_study_files_are_owner_only(study) -> None:
    study_dir, _ = study
    for name in ("study.sqlite", "invitations.csv", "admin-token.txt"):
        assert stat.S_IMODE(os.stat(study_dir / name).st_mode) == 0o600, name


def test_a_page_view_writes_nothing_and_its_time_is_kept_with_the_next_answer(study) -> None:
    study_dir, res = study
    app = create_app(study_dir)
    c = TestClient(app, base_url="http://127.0.0.1")
    tok = res["tokens"]["ana"]
    item, csrf, sv = _page(c, tok)
    c.get(f"/r/{res['tokens']['ben']}")
    con = __import__("sqlite3").connect(study_dir / "study.sqlite")
    assert con.execute("SELECT COUNT(*) FROM activity").fetchone()[0] == 0  # no write per page view
    prog = app.state.study.progress().set_index("reader")
    assert prog["last_seen"].notna().all()  # ... yet the lead's progress page sees both readers active
    scale, value = sv.split("\t")
    r = c.post(f"/r/{tok}/answer", data={"csrf": csrf, "item_id": item, "scale": scale, "value": value})
    assert r.status_code == 200
    # the answer wrote both readers' activity (ben's page view rode along)
    assert con.execute("SELECT COUNT(*) FROM activity").fetchone()[0] == 2
    con.close()
    for side in ("-wal", "-shm"):  # SQLite gives its side files the store's mode: owner-only too
        f = study_dir / f"study.sqlite{side}"
        if f.exists():
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f


@pytest.mark.slow
def test_pages_stay_fast_and_answers_are_retried_while_another_process_holds_the_write_lock(study) -> None:
    study_dir, res = study
    c = TestClient(create_app(study_dir, write_wait_s=0.3), base_url="http://127.0.0.1")
    tok = res["tokens"]["ana"]
    item, csrf, sv = _page(c, tok)
    scale, value = sv.split("\t")
    body = {"csrf": csrf, "item_id": item, "scale": scale, "value": value}
    hold = subprocess.Popen([sys.executable, "-c", HOLD, str(study_dir / "study.sqlite"), "3"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout.readline().strip() == "locked"
        t0 = time.perf_counter()
        pages = [c.get(f"/r/{tok}?i={k}") for k in (1, 2, 3)]
        assert all(p.status_code == 200 for p in pages)
        assert time.perf_counter() - t0 < 1.0  # < 1 s for three pages while the lock is held
        t0 = time.perf_counter()
        r = c.post(f"/r/{tok}/answer", data=body)
        assert r.status_code == 503 and r.json()["busy"] is True and r.headers["retry-after"] == "1"
        assert time.perf_counter() - t0 < 1.0
        assert hold.poll() is None  # the lock was still held throughout
    finally:
        hold.wait(timeout=20)
    assert hold.returncode == 0
    r = c.post(f"/r/{tok}/answer", data=body)  # the page's retry
    assert r.status_code == 200 and r.json()["ok"]
    st = Study(study_dir)
    assert st.answers(st.readers()[0]) == {item: {scale: value}}


def test_serving_beyond_this_machine_over_plain_http_needs_the_flag(study) -> None:
    from typer.testing import CliRunner

    from medvlm_audit.readers.commands import plain_http_refusal, readers_app

    assert plain_http_refusal("127.0.0.1", False, False) == (None, None)
    assert plain_http_refusal("::1", False, False) == (None, None)
    assert plain_http_refusal("0.0.0.0", True, False) == (None, None)  # TLS
    err, warn = plain_http_refusal("0.0.0.0", False, False)
    assert "plain HTTP" in err and "--i-know-plain-http" in err and warn is None
    err, warn = plain_http_refusal("192.168.1.20", False, True)
    assert err is None and "warning" in warn
    study_dir, _ = study
    r = CliRunner().invoke(readers_app, ["serve", str(study_dir), "--host", "0.0.0.0"])
    assert r.exit_code == 2 and "--i-know-plain-http" in r.output
