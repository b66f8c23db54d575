"""The reader server's fast path: reading views filled from a page rendered once per item and answer state equal
the page rendered afresh, and answers arriving together are committed together, each acknowledged only once
stored."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient

from medvlm_audit.readers.app import AnswerWriter, create_app
from medvlm_audit.readers.study import StoreBusyError, Study, create_study

MARKERISH = "\x00deadbeefdeadbeef:csrf\x00 <b>&</b>"


@pytest.fixture()
def study(tmp_path: Path) -> tuple[Path, dict]:
    items = pd.DataFrame({"item_id": [f"c{i}" for i in range(1, 6)],
                          "question": [f"q{i} <i>?</i>" for i in range(1, 6)],
                          "cot_text": ["Step 1.", MARKERISH, "Step 3 & 4.", "Step <5>.", "Step 6."],
                          "model_name": ["m1", "m1", "m2", "m2", "m3"]})
    res = create_study(None, "cot-rating", 5, ["ana", "ben", "cy"], out=tmp_path / "cot", items=items)
    return tmp_path / "cot", res


def _client(study_dir: Path) -> TestClient:
    return TestClient(create_app(study_dir), base_url="http://127.0.0.1")


def _attr(page: str, name: str) -> str:
    return page.split(f'{name}="', 1)[1].split('"', 1)[0]


def test_a_filled_reading_view_equals_the_page_rendered_afresh(study) -> None:
    study_dir, res = study
    warm = _client(study_dir)
    tokens = res["tokens"]
    # every reader's every page, some with answers given: the pages of later readers are filled from shapes
    # the earlier readers' views rendered
    for name in ("ana", "ben", "cy"):
        tok = tokens[name]
        for k in (1, 2, 3):
            page = warm.get(f"/r/{tok}?i={k}").text
            scale = _attr(page, "data-scale")
            r = warm.post(f"/r/{tok}/answer", data={"csrf": _attr(page, "data-csrf"), "item_id": _attr(page, "data-item"),
                                                    "scale": scale, "value": "3"})
            assert r.status_code == 200, r.text
    for name in ("cy", "ben", "ana"):
        tok = tokens[name]
        for k in range(1, 6):
            filled = warm.get(f"/r/{tok}?i={k}")
            cold = _client(study_dir).get(f"/r/{tok}?i={k}")  # a fresh server: rendered, not filled
            assert filled.status_code == cold.status_code == 200
            assert filled.text == cold.text, (name, k)
            assert f"/r/{tok}/answer" in filled.text and 'class="choice selected"' in filled.text or k > 3
            others = [t for n, t in tokens.items() if n != name]
            assert not any(t in filled.text for t in others)  # never another reader's token
    # an item's text that looks like a marker is printed as text, escaped
    page = _client(study_dir).get(f"/r/{tokens['ana']}?i=1").text
    for k in range(1, 6):
        page = warm.get(f"/r/{tokens['ana']}?i={k}").text
        if "deadbeef" in page:
            assert "\x00deadbeefdeadbeef:csrf\x00 &lt;b&gt;&amp;&lt;/b&gt;" in page
            break
    else:  # pragma: no cover
        raise AssertionError("the marker-like passage was not shown")


def test_answers_arriving_together_are_committed_in_one_group_and_acknowledged_after(study) -> None:
    study_dir, res = study
    st = Study(study_dir, cache_answers=True)
    st.preload()
    readers = st.readers()
    commits: list[int] = []
    save = st.save_answers

    def counting(batch):  # the writer thread's one transaction per group
        commits.append(len(batch))
        save(batch)

    st.save_answers = counting  # type: ignore[method-assign]
    writer = AnswerWriter(st)

    async def main() -> None:
        answers = [st.check_answer(r, item, "completeness", "4", 1.0) for r in readers for item in st.order(r)]
        await asyncio.gather(*(writer.save(a) for a in answers))
        # acknowledged means stored: read back by another connection
        con = sqlite3.connect(study_dir / "study.sqlite")
        n = con.execute("SELECT COUNT(*) FROM answers WHERE scale = 'completeness' AND value = '4'").fetchone()[0]
        con.close()
        assert n == len(answers) == 15

    asyncio.run(main())
    writer.close()
    assert sum(commits) == 15 and len(commits) < 15  # grouped: the first alone, the rest together
    assert st.answers(readers[0])[st.order(readers[0])[0]] == {"completeness": "4"}


def test_a_busy_store_fails_the_whole_group_and_nothing_of_it_is_written(study) -> None:
    study_dir, _ = study
    st = Study(study_dir, cache_answers=True)
    st.preload()
    r = st.readers()[0]

    def busy(batch):
        raise StoreBusyError("locked")

    st.save_answers = busy  # type: ignore[method-assign]
    writer = AnswerWriter(st)

    async def main() -> list[object]:
        answers = [st.check_answer(r, item, "completeness", "2", None) for item in st.order(r)]
        return await asyncio.gather(*(writer.save(a) for a in answers), return_exceptions=True)

    got = asyncio.run(main())
    writer.close()
    assert len(got) == 5 and all(isinstance(e, StoreBusyError) for e in got)
    con = sqlite3.connect(study_dir / "study.sqlite")
    assert con.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 0
    con.close()


def test_a_group_write_keeps_the_order_of_its_answers_across_statement_chunks(study) -> None:
    """250 answers in one group (more than one statement's worth of rows): each is logged, a repeated answer is
    a revision when its value changed, and the last value given wins, as if written one by one."""
    study_dir, _ = study
    st = Study(study_dir, cache_answers=True)
    st.preload()
    readers = st.readers()
    scales = [s.name for s in st.spec.scales]
    batch, last, changes = [], {}, {}
    for k in range(250):
        r = readers[k % 3]
        item = st.order(r)[k % 5]
        scale = scales[(k // 15) % len(scales)]
        value = str(1 + (k // 7) % 5)
        key = (r.reader_id, item, scale)
        if key in last and last[key] != value:
            changes[key] = changes.get(key, 0) + 1
        last[key] = value
        batch.append(st.check_answer(r, item, scale, value, 0.5))
    for r in readers:
        st.answers(r)  # held in memory, so the cache is checked too
    st.save_answers(batch)
    con = sqlite3.connect(study_dir / "study.sqlite")
    got = {(rid, item, scale): (value, rev) for rid, item, scale, value, rev in
           con.execute("SELECT reader_id, item_id, scale, value, revisions FROM answers")}
    n_log = con.execute("SELECT COUNT(*) FROM answer_log").fetchone()[0]
    con.close()
    assert n_log == 250
    assert {k: v for k, (v, _) in got.items()} == last
    assert {k: rev for k, (_, rev) in got.items() if rev} == changes
    for r in readers:
        cached = st.answers(r)
        assert cached == {item: {sc: v for (rid, it, sc), v in last.items() if rid == r.reader_id and it == item}
                          for item in {it for (rid, it, _) in last if rid == r.reader_id}}
        assert st.cached_progress(r)[1] == sum(len(g) == len(scales) for g in cached.values())
