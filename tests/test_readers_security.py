"""Reader-study app security and persistence, through Starlette's TestClient (no browser)."""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient

from medvlm_audit.models.base import pixel_sha256
from medvlm_audit.readers.app import create_app
from medvlm_audit.readers.study import Study, create_study

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    from medvlm_audit.suites.grounding.embedded import run_demo

    out = tmp_path_factory.mktemp("demo")
    return run_demo(out, n_cases=60, n_train=300, progress=False, log=lambda *_: None).run_dir


@pytest.fixture()
def fp_study(small_run: Path, tmp_path: Path) -> tuple[Path, dict]:
    res = create_study(small_run, "finding-presence", 6, ["ana", "ben"], seed=42, out=tmp_path / "study",
                       boxed_only=True)
    return tmp_path / "study", res


@pytest.fixture()
def cot_study(tmp_path: Path) -> tuple[Path, dict]:
    items = pd.DataFrame({"item_id": ["c1", "c2", "c3"],
                          "question": ["Is the heart enlarged? " + XSS, "Effusion side?", "Tube position?"],
                          "cot_text": [XSS, "Step 1: look.\nStep 2: <b>bold?</b>", "fine & dandy"],
                          "model_name": ["m1", "m1", "m2"]})
    res = create_study(None, "cot-rating", 3, ["ana", XSS], out=tmp_path / "cot", items=items)
    return tmp_path / "cot", res


def _client(study_dir: Path) -> TestClient:
    return TestClient(create_app(study_dir), base_url="http://127.0.0.1")


def _first_item(client: TestClient, token: str) -> tuple[str, str]:
    page = client.get(f"/r/{token}?i=1").text
    item = page.split('data-item="')[1].split('"')[0]
    csrf = page.split('data-csrf="')[1].split('"')[0]
    return item, csrf


def test_tokens_are_long_random_and_stored_only_as_hashes(fp_study) -> None:
    study_dir, res = fp_study
    raw = (study_dir / "study.sqlite").read_bytes()
    con = sqlite3.connect(study_dir / "study.sqlite")
    hashes = {n: h for n, h in con.execute("SELECT name, token_hash FROM readers")}
    dump = "\n".join(con.iterdump())
    con.close()
    for name, tok in res["tokens"].items():
        assert len(tok) >= 43  # token_urlsafe(32)
        assert tok.encode() not in raw and tok not in dump
        assert hashes[name] == hashlib.sha256(tok.encode()).hexdigest()
    assert res["admin_token"] not in dump
    inv = pd.read_csv(study_dir / "invitations.csv")
    assert list(inv.columns) == ["reader", "token_path"]
    assert set(inv["token_path"]) == {f"/r/{t}" for t in res["tokens"].values()}


def test_forged_or_missing_token_is_refused(fp_study) -> None:
    study_dir, res = fp_study
    c = _client(study_dir)
    real = res["tokens"]["ana"]
    item, csrf = _first_item(c, real)
    forged = real[:-1] + ("A" if real[-1] != "A" else "B")
    for tok in (forged, "x" * 43, "", "admin"):
        assert c.get(f"/r/{tok}").status_code == 404
        assert c.get(f"/r/{tok}/img/{item}/0").status_code == 404
        r = c.post(f"/r/{tok}/answer", data={"csrf": csrf, "item_id": item, "scale": "answer", "value": "yes"})
        assert r.status_code in (404, 405)
    assert c.get(f"/admin/{real}").status_code == 404  # a reader token is not an admin token
    assert c.get(f"/admin/{res['admin_token']}").status_code == 200
    assert Study(study_dir).answers(Study(study_dir).readers()[0]) == {}


def test_a_reader_reads_and_writes_only_her_own_items(fp_study) -> None:
    study_dir, res = fp_study
    c = _client(study_dir)
    ta, tb = res["tokens"]["ana"], res["tokens"]["ben"]
    item, csrf_a = _first_item(c, ta)
    _, csrf_b = _first_item(c, tb)
    assert csrf_a != csrf_b
    # ben cannot use ana's CSRF token, nor write into ana's answers
    r = c.post(f"/r/{tb}/answer", data={"csrf": csrf_a, "item_id": item, "scale": "answer", "value": "yes"})
    assert r.status_code == 403
    r = c.post(f"/r/{tb}/answer", data={"csrf": csrf_b, "item_id": item, "scale": "answer", "value": "no"})
    assert r.status_code == 200 and r.json()["ok"]
    st = Study(study_dir)
    ana, ben = st.readers()
    assert st.answers(ana) == {} and st.answers(ben) == {item: {"answer": "no"}}
    # an item that is not assigned to ben (remove his assignment): 404 for reading, its image and writing
    con = sqlite3.connect(study_dir / "study.sqlite")
    con.execute("DELETE FROM assignments WHERE reader_id = ? AND item_id = ?", (ben.reader_id, item))
    con.commit()
    con.close()
    c = _client(study_dir)  # assignments are fixed while a study is served: the server reads them at start
    assert c.get(f"/r/{tb}/img/{item}/0").status_code == 404
    r = c.post(f"/r/{tb}/answer", data={"csrf": csrf_b, "item_id": item, "scale": "answer", "value": "yes"})
    assert r.status_code == 404
    assert c.get(f"/r/{ta}/img/{item}/0").status_code == 200  # still ana's
    assert c.get(f"/r/{tb}/img/unknown-item/0").status_code == 404


@pytest.mark.parametrize("path", [
    "/r/{t}/img/..%2F..%2Fstudy.sqlite/0",
    "/r/{t}/img/%2e%2e%2f%2e%2e%2fstudy.sqlite/0",
    "/r/{t}/img/%252e%252e%252fstudy.sqlite/0",
    "/r/{t}/img/{item}/..%2F..%2Fstudy.sqlite",
    "/r/{t}/img/{item}/-1",
    "/r/{t}/img/{item}/7",
    "/r/{t}/img/%2Fetc%2Fpasswd/0",
    "/r/{t}/img/{item}%00/0",
    "/static/..%2Fstudy.py",
    "/static/%2e%2e%2f%2e%2e%2fstudy.py",
    "/static/../app.py",
    "/static/..%5capp.py",
    "/static/templates%2Fread.html",
])
def test_path_traversal_never_serves_a_file(fp_study, path: str) -> None:
    study_dir, res = fp_study
    c = _client(study_dir)
    tok = res["tokens"]["ana"]
    item, _ = _first_item(c, tok)
    url = path.format(t=tok, item=item)
    r = c.get(url)
    assert r.status_code == 404, (url, r.status_code)
    assert b"SQLite format" not in r.content and b"root:" not in r.content and b"import " not in r.content


def test_raw_dot_segments_in_the_request_line(fp_study) -> None:
    """Bypass the client's URL normalisation: the ASGI app gets the raw traversal path."""
    study_dir, res = fp_study
    c = _client(study_dir)
    tok = res["tokens"]["ana"]
    for raw in (f"/r/{tok}/img/../../../../etc/passwd", "/static/../../study.sqlite", "/static/../readers/app.py"):
        scope_path = raw
        r = c.request("GET", "http://127.0.0.1" + scope_path.replace("..", "%2E%2E"))
        assert r.status_code == 404
        r = c.get(scope_path)  # normalised by the client: still nothing outside the app's routes
        assert r.status_code == 404


def test_csrf_missing_wrong_or_cross_origin_is_refused(fp_study) -> None:
    study_dir, res = fp_study
    c = _client(study_dir)
    tok = res["tokens"]["ana"]
    item, csrf = _first_item(c, tok)
    body = {"item_id": item, "scale": "answer", "value": "yes"}
    assert c.post(f"/r/{tok}/answer", data=body).status_code == 403
    assert c.post(f"/r/{tok}/answer", data={**body, "csrf": "0" * 64}).status_code == 403
    assert c.post(f"/r/{tok}/answer", data={**body, "csrf": csrf[:-1]}).status_code == 403
    assert c.post(f"/r/{tok}/answer", data={**body, "csrf": csrf},
                  headers={"Origin": "http://evil.example"}).status_code == 403
    assert c.get(f"/r/{tok}/answer").status_code == 405  # reads never write
    st = Study(study_dir)
    assert st.answers(st.readers()[0]) == {}
    ok = c.post(f"/r/{tok}/answer", data=body, headers={"X-CSRF-Token": csrf, "Origin": "http://127.0.0.1"})
    assert ok.status_code == 200 and ok.json() == {**ok.json(), "ok": True, "complete": True}
    bad = c.post(f"/r/{tok}/answer", data={**body, "value": "maybe", "csrf": csrf})
    assert bad.status_code == 400
    assert st.answers(st.readers()[0]) == {item: {"answer": "yes"}}


def test_unknown_host_header_is_refused(fp_study) -> None:
    study_dir, res = fp_study
    c = TestClient(create_app(study_dir), base_url="http://evil.example")
    assert c.get(f"/r/{res['tokens']['ana']}").status_code == 400


def test_cot_and_every_user_text_is_escaped(cot_study) -> None:
    study_dir, res = cot_study
    c = _client(study_dir)
    tok = res["tokens"]["ana"]
    pages = [c.get(f"/r/{tok}?i={k}").text for k in (1, 2, 3)]
    page = next(p for p in pages if "alert" in p and "onerror" in p)
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<b>bold?</b>" not in "".join(pages) and "&lt;b&gt;bold?&lt;/b&gt;" in "".join(pages)
    # the only scripts are the app's own file; the policy forbids inline script
    for p in pages:
        assert p.count("<script") == 1 and '<script src="/static/app.js"></script>' in p
    r = c.get(f"/r/{tok}?i=1")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["referrer-policy"] == "no-referrer" and r.headers["x-content-type-options"] == "nosniff"
    admin = c.get(f"/admin/{res['admin_token']}").text
    assert "<script>alert" not in admin and "&lt;script&gt;" in admin  # the reader name is escaped too


def test_no_image_copied_and_images_are_the_models_pixels(fp_study, small_run: Path) -> None:
    study_dir, res = fp_study
    files = sorted(p.name for p in study_dir.rglob("*") if p.is_file() and not p.name.startswith("study.sqlite"))
    assert files == ["admin-token.txt", "invitations.csv"]
    c = _client(study_dir)
    tok = res["tokens"]["ana"]
    st = Study(study_dir)
    items = st.all_items()
    tidy = pd.read_parquet(small_run / "results.parquet")
    checked = 0
    for r in items.itertuples(index=False):
        src = json.loads(r.source)
        resp = c.get(f"/r/{tok}/img/{r.item_id}/0")
        assert resp.status_code == 200 and resp.headers["content-type"] == "image/png"
        px = np.asarray(Image.open(__import__("io").BytesIO(resp.content)))
        want = tidy[(tidy.case_id == src["case_id"]) & (tidy.condition == src["condition"]) &
                    (tidy.resolution == 224) & tidy.image_sha256.notna()]["image_sha256"].unique()
        assert list(want) == [pixel_sha256(px)]  # exactly what the run's image models saw
        if src["condition"] == "target_mask":
            x0, y0, x1, y1 = dict(src["images"][0]["ops"])["fill_box"]["box"]
            assert (px[y0:y1, x0:x1] == 0).all()
        checked += 1
    assert checked == len(items) and {json.loads(s)["condition"] for s in items.source} == {
        "original", "target_mask", "irrelevant_mask"}
    after = sorted(p.name for p in study_dir.rglob("*") if p.is_file() and not p.name.startswith("study.sqlite"))
    assert after == files  # serving wrote nothing


def test_copy_images_only_when_asked(small_run: Path, tmp_path: Path) -> None:
    res = create_study(small_run, "box-validation", 1, ["ana"], out=tmp_path / "s", copy_images=True)
    pngs = list((tmp_path / "s" / "images").glob("*.png"))
    assert len(pngs) == res["n_items"] > 0
    c = _client(tmp_path / "s")
    tok = res["tokens"]["ana"]
    item, _ = _first_item(c, tok)
    assert c.get(f"/r/{tok}/img/{item}/0").content == (tmp_path / "s" / "images" / f"{item}-0.png").read_bytes()


def test_blinded_pages_name_no_model_condition_or_corpus(small_run: Path, tmp_path: Path) -> None:
    res = create_study(small_run, "failure-modes", 2, ["ana"], out=tmp_path / "fm")
    c = _client(tmp_path / "fm")
    tok = res["tokens"]["ana"]
    st = Study(tmp_path / "fm")
    n = len(st.all_items())
    forbidden = ["local-evidence", "finding-prior", "always-yes", "global-probe", "occlusion-unstable",
                 "target_mask", "irrelevant_mask", "phantom", "test-box", "p-test", "images/"]
    for k in range(1, n + 1):
        page = c.get(f"/r/{tok}?i={k}").text
        for word in forbidden:
            assert word not in page, (word, k)
        assert "System answer" in page


def test_resume_after_reload_and_server_restart(fp_study) -> None:
    study_dir, res = fp_study
    tok = res["tokens"]["ana"]
    c = _client(study_dir)
    st = Study(study_dir)
    order = st.order(st.readers()[0])
    _, csrf = _first_item(c, tok)
    for item in order[:3]:
        assert c.post(f"/r/{tok}/answer", data={"csrf": csrf, "item_id": item, "scale": "answer",
                                                "value": "no", "elapsed_ms": "1234"}).json()["ok"]
    c2 = _client(study_dir)  # a new app on the same folder: a server restart
    page = c2.get(f"/r/{tok}").text
    assert f'data-item="{order[3]}"' in page and "Item 4 of" in page  # resumes at the first open item
    again = c2.get(f"/r/{tok}?i=2").text
    assert 'class="choice selected" data-scale="answer" data-value="no"' in again
    ans = Study(study_dir).answer_table()
    assert len(ans) == 3 and np.allclose(ans["elapsed_s"], 1.234)


def test_admin_page_shows_progress_without_answers(fp_study) -> None:
    study_dir, res = fp_study
    c = _client(study_dir)
    tok = res["tokens"]["ben"]
    item, csrf = _first_item(c, tok)
    c.post(f"/r/{tok}/answer", data={"csrf": csrf, "item_id": item, "scale": "answer", "value": "yes"})
    page = c.get(f"/admin/{res['admin_token']}").text
    assert "ben" in page and "ana" in page
    assert item not in page and ">yes<" not in page.lower() and "data-value" not in page
    assert c.get("/admin/" + "y" * 43).status_code == 404


def test_orders_keep_a_cases_items_apart(fp_study) -> None:
    study_dir, _ = fp_study
    st = Study(study_dir)
    items = st.all_items().set_index("item_id")
    orders = []
    for rd in st.readers():
        order = st.order(rd)
        units = [items.loc[i, "unit"] for i in order]
        assert all(a != b for a, b in itertools.pairwise(units))
        assert sorted(order) == sorted(items.index)
        orders.append(order)
    assert orders[0] != orders[1]


@pytest.mark.parametrize("bad", ["-5", "nan", "inf", "-inf", "abc", "0", "0.0001", "0.5", "-0", "86400001", "1e300"])
def test_impossible_elapsed_time_is_refused_and_nothing_is_stored(fp_study, bad: str) -> None:
    """A reading time is 1 ms to 24 h (the client sends whole milliseconds since the item was shown, at least 1,
    and none after a day): anything else is refused with a 400 naming the field, the stored answer untouched."""
    study_dir, res = fp_study
    tok = res["tokens"]["ana"]
    c = _client(study_dir)
    item, csrf = _first_item(c, tok)
    body = {"csrf": csrf, "item_id": item, "scale": "answer", "value": "yes"}
    assert c.post(f"/r/{tok}/answer", data={**body, "elapsed_ms": "800"}).json()["ok"]
    r = c.post(f"/r/{tok}/answer", data={**body, "value": "no", "elapsed_ms": bad})
    assert r.status_code == 400 and "elapsed_ms" in r.json()["error"]
    st = Study(study_dir)
    assert st.answers(st.readers()[0]) == {item: {"answer": "yes"}}  # the stored answer is untouched
    assert np.allclose(st.answer_table()["elapsed_s"], 0.8)
    assert 'data-chosen="yes"' in c.get(f"/r/{tok}?i=1").text  # the page still shows the saved answer
    assert c.post(f"/r/{tok}/answer", data=body).json()["ok"]  # no time sent: saved, time not recorded
