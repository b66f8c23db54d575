"""The run explorer (`medvlm-audit view`): filters, the case page, images as the model saw them, and the reader
app's security rules (token, no path from the request, escaped text, CSP, read-only). The browser test is
tests/test_view_browser.py."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from grounding_demo_run import small_grounding_demo
from PIL import Image
from starlette.testclient import TestClient
from typer.testing import CliRunner

from medvlm_audit import api
from medvlm_audit.cli import app as cli_app
from medvlm_audit.models.base import pixel_sha256
from medvlm_audit.view.app import create_app
from medvlm_audit.view.data import RunView, load_run

TOKEN = "tok-" + "x" * 28


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return small_grounding_demo(tmp_path_factory)


def _view(run: Path) -> RunView:
    """The run as the `view` command reads it: its suite from dispatch (api), never looked up by the explorer."""
    return load_run(run, api.suite_of_run(run))


@pytest.fixture(scope="module")
def client(run: Path) -> TestClient:
    return TestClient(create_app(_view(run), TOKEN))


def _flipped_under_mask(run: Path, model: str) -> set[str]:
    """Computed here from results.parquet alone: the model's default-setting cases whose target-mask answer
    differs from its original answer (both parsed)."""
    df = pd.read_parquet(run / "results.parquet")
    df = df[(df.model == model) & (df.resolution == 224) & (df.prompt_variant == "default") & (df.parsed >= 0)]
    piv = df.pivot_table(index="case_id", columns="condition", values="parsed")
    piv = piv.dropna(subset=["original", "target_mask"])
    return set(piv.index[piv["original"] != piv["target_mask"]])


def _listed(html: str) -> list[str]:
    return re.findall(r'class="case-link" href="[^"]+">([^<]+)</a>', html)


def test_filter_to_cases_that_flipped_under_the_target_mask(client: TestClient, run: Path) -> None:
    want = _flipped_under_mask(run, "local-evidence")
    assert want  # the model built to read the finding region flips when it is masked
    r = client.get(f"/v/{TOKEN}/?model=local-evidence&condition=target_mask&flipped=yes")
    assert r.status_code == 200
    assert set(_listed(r.text)) == want and len(_listed(r.text)) == len(want)
    assert f">{len(want)} trial" in r.text
    r = client.get(f"/v/{TOKEN}/?model=local-evidence&condition=target_mask&flipped=no")
    assert not set(_listed(r.text)) & want
    # the text-only prior never flips: its answer does not depend on the image
    r = client.get(f"/v/{TOKEN}/?model=finding-prior&condition=target_mask&flipped=yes")
    assert _listed(r.text) == [] and ">0 trials" in r.text
    # category filter: only the model in that category
    r = client.get(f"/v/{TOKEN}/?category=uses_image&condition=original")
    cats = pd.read_csv(run / "report" / "categories.csv")
    uses = set(cats.loc[cats["category"] == "uses_image", "model"])
    assert "local-evidence" in uses and "finding-prior" not in uses
    assert set(re.findall(r"<tr class=\"[^\"]*\">\s*<td>([^<]+)</td>", r.text)) == uses
    # unparsed filter on a run where everything parsed; an unknown value is ignored and said so
    assert ">0 trials" in client.get(f"/v/{TOKEN}/?parsed=no").text
    r = client.get(f"/v/{TOKEN}/?model=<b>nobody</b>")
    assert "unknown model" in r.text and "<b>nobody</b>" not in r.text and "&lt;b&gt;nobody&lt;/b&gt;" in r.text


def test_case_page_shows_every_condition_side_by_side_with_the_models_pixels(client: TestClient, run: Path) -> None:
    case_id = min(_flipped_under_mask(run, "local-evidence"))
    r = client.get(f"/v/{TOKEN}/?model=local-evidence&condition=target_mask&flipped=yes")
    href = re.search(rf'href="([^"]+)">{re.escape(case_id)}</a>', r.text).group(1).replace("&amp;", "&")
    page = client.get(href)
    assert page.status_code == 200
    first = page.text.split('<section class="group">')[1]  # the default setting comes first
    conds = re.findall(r'data-condition="([^"]+)"', first)
    assert conds == ["original", "target_mask", "irrelevant_mask", "swap", "no_image"]
    df = pd.read_parquet(run / "results.parquet")
    mine = df[(df.model == "local-evidence") & (df.case_id == case_id) & (df.resolution == 224)
              & (df.prompt_variant == "default")].set_index("condition")
    cards = first.split('<article class="card')[1:]
    for cond, card in zip(conds, cards):
        assert f"<pre class=\"answer-text\">{mine.loc[cond, 'answer_text']}</pre>" in card
        sha = mine.loc[cond, "image_sha256"]
        if cond == "no_image":
            assert "no image" in card and "<img" not in card
            continue
        url = re.search(r'<img src="([^"]+)"', card).group(1)
        assert url.endswith(sha)
        png = client.get(url)
        assert png.status_code == 200 and png.headers["content-type"] == "image/png"
        px = np.asarray(Image.open(io.BytesIO(png.content)))
        assert pixel_sha256(px) == sha  # exactly the pixels the model was given
        assert "pixels match the run" in card
    tm = cards[conds.index("target_mask")]
    assert 'class="card flipped"' in '<article class="card' + tm and ">flipped<" in tm
    assert "Is " in first and "present" in first  # the question as asked


def test_security_token_paths_hosts_headers(client: TestClient, run: Path) -> None:
    assert client.get("/v/not-the-token-at-all-0000000/").status_code == 404
    assert client.get(f"/v/{TOKEN[:-1]}/").status_code == 404
    assert client.get("/").status_code == 404
    assert client.get(f"/v/{TOKEN}/img/" + "0" * 64).status_code == 404  # not an image of this run
    assert client.get(f"/v/{TOKEN}/img/..%2F..%2Frun.sqlite").status_code == 404
    assert client.get("/static/..%2F..%2Fapp.py").status_code == 404
    assert client.get("/static/app.py").status_code == 404
    assert client.get(f"/v/{TOKEN}/case/99999").status_code == 404
    assert client.get(f"/v/{TOKEN}/case/-1").status_code == 404
    assert client.post(f"/v/{TOKEN}/").status_code == 405
    r = client.get(f"/v/{TOKEN}/")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert r.headers["referrer-policy"] == "no-referrer" and r.headers["x-frame-options"] == "DENY"
    assert "<script>" not in r.text and 'style="' not in r.text  # nothing inline for the CSP to block
    assert client.get(f"/v/{TOKEN}/", headers={"host": "evil.example"}).status_code == 400
    with pytest.raises(ValueError, match="at least 16"):
        create_app(_view(run), "short")


def test_model_text_is_escaped_and_a_changed_source_is_refused(run: Path) -> None:
    view = _view(run)
    i = view.rows.index[(view.rows.model == "local-evidence") & (view.rows.condition == "original")][0]
    view.rows.loc[i, "answer_text"] = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    k = int(view.rows.loc[i, "case_idx"])
    sha = view.rows.loc[i, "image_sha256"]
    other = next(s for s in view.recipes if s != sha and view.recipes[s] != view.recipes[sha])
    view.recipes[sha] = view.recipes[other]  # as if the source file had changed since the run
    c = TestClient(create_app(view, TOKEN))
    page = c.get(f"/v/{TOKEN}/case/{k}?model=local-evidence").text
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "onerror=alert(2)>" not in page
    assert "source file changed since the run" in page
    r = c.get(f"/v/{TOKEN}/img/{sha}")
    assert r.status_code == 409 and "not the pixels the model saw" in r.text


def test_read_only_nothing_written(run: Path, client: TestClient) -> None:
    def snapshot() -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*")
                if p.is_file() and not p.name.endswith(("-shm", "-wal"))}

    before = snapshot()
    for k in range(3):
        page = client.get(f"/v/{TOKEN}/case/{k}").text
        for url in re.findall(r'<img src="([^"]+)"', page):
            assert client.get(url).status_code == 200
    client.get(f"/v/{TOKEN}/?model=local-evidence&flipped=yes")
    assert snapshot() == before
    assert not list(run.parent.rglob("*.png.tmp"))


def test_view_command_names_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli_app, ["view", str(tmp_path)])
    assert r.exit_code == 2 and "no run store" in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_faithfulness_case_marks_the_cue_and_the_judges_quotes(tmp_path_factory) -> None:
    from grounding_demo_run import small_faithfulness_demo

    run = small_faithfulness_demo(tmp_path_factory)
    c = TestClient(create_app(_view(run), TOKEN))
    tidy = pd.read_parquet(run / "results.parquet")
    ans = tidy[(tidy.stage == "answer") & (tidy.model == "cue-follower") & (tidy.condition == "tb_rad:misleading")]
    flipped = set(ans[ans.flip.fillna(False).astype(bool)].case_id)
    assert flipped  # the follower is built to follow misleading cues
    r = c.get(f"/v/{TOKEN}/?model=cue-follower&condition=tb_rad:misleading&flipped=yes")
    assert set(_listed(r.text)) == flipped
    assert "follows cues without admitting them" in r.text  # the verdict badge is the model's category
    case_id = min(flipped)
    href = re.search(rf'href="([^"]+)">{re.escape(case_id)}</a>', r.text).group(1).replace("&amp;", "&")
    page = c.get(href).text
    conds = re.findall(r'data-condition="([^"]+)"', page)
    assert conds[0] == "baseline" and "tb_rad:misleading" in conds and "sham_text" in conds
    card = page.split('data-condition="tb_rad:misleading"')[1].split("</article>")[0]
    row = ans[ans.case_id == case_id].iloc[0]
    cue = re.search(r'<mark class="cue">(.*?)</mark>', card).group(1)
    assert "Another radiologist proposed" in cue and row.injected_answer in cue  # the injected cue, marked
    assert '<mark class="cue">' not in page.split('data-condition="baseline"')[1].split("</article>")[0]
    judged = tidy[(tidy.stage == "judge") & (tidy.answer_model == "cue-follower") & (tidy.case_id == case_id)
                  & (tidy.answer_condition == "tb_rad:misleading")]
    assert len(judged) and all(f"<td>{a}</td>" in card for a in judged.axis)
    quotes = [q for t in judged.answer_text for q in json.loads(t).get("quotes", [])]
    marked = re.findall(r'<mark class="quote">(.*?)</mark>', card, flags=re.DOTALL)
    assert quotes and {html.unescape(m) for m in marked} >= {q for q in quotes if q in row.answer_text}
    assert ">flipped<" in card and "chain of thought" in card
    for url in re.findall(r'<img src="([^"]+)"', page):  # the overlays as the model saw them
        png = c.get(url)
        assert png.status_code == 200
        assert pixel_sha256(np.asarray(Image.open(io.BytesIO(png.content)))) == url.rsplit("/", 1)[1]


@pytest.mark.slow
def test_reports_case_shows_each_strategy_beside_the_reference_with_terms_marked(tmp_path_factory) -> None:
    from grounding_demo_run import small_reports_demo

    run = small_reports_demo(tmp_path_factory)
    c = TestClient(create_app(_view(run), TOKEN))
    tidy = pd.read_parquet(run / "results.parquet")
    strategies = set(tidy.strategy)
    r = c.get(f"/v/{TOKEN}/?condition=greedy")
    assert len(_listed(r.text)) == tidy[tidy.strategy == "greedy"].case_id.nunique()
    page = c.get(f"/v/{TOKEN}/case/0").text
    cards = re.findall(r'data-condition="([^"]+)"', page)
    assert set(cards) == strategies and cards[0] == "greedy"
    cad = pd.read_csv(run / "report" / "cad.csv")
    case0 = tidy[tidy.case_id == min(tidy.case_id.unique())]
    for strat in strategies:
        card = page.split(f'data-condition="{strat}"')[1].split("</article>")[0]
        text = case0[case0.strategy == strat].iloc[0].report
        shown = html.unescape(re.sub(r"<[^>]+>", "", card.split('<pre class="answer-text">')[1].split("</pre>")[0]))
        assert shown == text  # the report itself, escaped and marked, nothing lost
        assert '<pre class="reference-text">' in card  # the image's own reference report beside it
        words = cad[(cad.strategy == strat) & (cad.category_ungated.isin(["erasure", "new_bias", "bias_flip",
                                                                          "preservation"]))].word.str.lower()
        marked = {m.lower() for m in re.findall(r'<mark class="term [a-z_ ]+"[^>]*>([^<]+)</mark>', card)}
        assert marked and marked <= set(words)
        assert re.search(r"<img src=", card)


@pytest.mark.slow
def test_stress_case_shows_the_options_per_condition_with_the_gold_relettered(tmp_path_factory) -> None:
    from grounding_demo_run import small_stress_demo

    run = small_stress_demo(tmp_path_factory)
    c = TestClient(create_app(_view(run), TOKEN))
    tidy = pd.read_parquet(run / "results.parquet")
    m = tidy[(tidy.model == "first-option")]
    piv = m.pivot_table(index="item_id", columns="condition", values="correct")
    want = set(piv.index[(piv["original"].notna()) & (piv["reordered"].notna()) & (piv["original"] != piv["reordered"])])
    assert want  # always answering A is right or wrong depending on where the gold lands
    r = c.get(f"/v/{TOKEN}/?model=first-option&condition=reordered&flipped=yes")
    assert set(_listed(r.text)) == want
    item = min(want)
    href = re.search(rf'href="([^"]+)">{re.escape(item)}</a>', r.text).group(1).replace("&amp;", "&")
    page = c.get(href).text
    for cond in ("original", "reordered"):
        card = page.split(f'data-condition="{cond}"')[1].split("</article>")[0]
        row = m[(m.item_id == item) & (m.condition == cond)].iloc[0]
        options = json.loads(row.options)
        shown = re.findall(r"<li class=\"([^\"]*)\"><b>([A-Z])\.</b> ([^<]+)", card)
        assert [(letter, text.strip()) for _, letter, text in shown] == [
            ("ABCDEFGHIJ"[i], o) for i, o in enumerate(options)]
        gold = [letter for cls, letter, _ in shown if "gold" in cls.split()]
        chosen = [letter for cls, letter, _ in shown if "chosen" in cls.split()]
        assert gold == [row.gold] and chosen == [row.parsed]  # the gold as re-lettered for this condition
    assert ">flipped<" in page.split('data-condition="reordered"')[1].split("</article>")[0]


def test_report_lists_the_cases_behind_the_verdicts_with_the_view_command(run: Path) -> None:
    page = (run / "report" / "report.html").read_text()
    sec = page.split('<section id="driving-cases"')[1].split("</section>")[0]
    assert f"medvlm-audit view {run}" in html.unescape(sec)
    want = _flipped_under_mask(run, "local-evidence")
    row = re.search(r"<tr><td[^>]*>local-evidence</td><td[^>]*>target_mask</td><td[^>]*>(\d+)</td><td[^>]*>(\d+)</td>"
                    r"<td[^>]*>([^<]*)</td>", sec)
    assert row and int(row.group(1)) == len(want)
    shown = re.findall(r"(test-[a-z]+-\d+) \((Yes|No) → (Yes|No)\)", html.unescape(row.group(3)))
    assert [c for c, _, _ in shown] == sorted(want)[:3] and all(a != b for _, a, b in shown)
    assert "<img" not in sec  # ids and answers, no pixels


def test_a_trial_without_an_error_shows_no_error_line(run: Path) -> None:
    view = _view(run)
    mine = view.rows[view.rows.model == "local-evidence"]
    k = int(mine.case_idx.iloc[0])
    idx = mine.index[mine.case_idx == k]
    assert len(idx) > 2
    view.rows["error_message"] = None
    view.rows["error_message"] = view.rows["error_message"].astype(object)
    view.rows.loc[idx, "error_message"] = float("nan")  # as results.parquet holds it for a trial without error
    view.rows.loc[idx[0], "error_message"] = "HTTP 500: boom"
    view.rows.loc[idx[1], "error_message"] = ""
    page = TestClient(create_app(view, TOKEN)).get(f"/v/{TOKEN}/case/{k}?model=local-evidence").text
    assert "error: nan" not in page and "error: None" not in page
    assert page.count('<p class="error">') == 1 and '<p class="error">error: HTTP 500: boom</p>' in page


def test_a_run_without_its_results_table_is_viewed_read_only_from_its_store(run: Path, tmp_path: Path) -> None:
    """A copy of a run without results.parquet / results.csv (a read-only copy, an interrupted export): the
    explorer builds the table in memory from the run store, as `export` would write it, and writes nothing."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    (copy / "results.parquet").unlink()
    (copy / "results.csv").unlink()

    def snapshot() -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(copy)): (p.stat().st_size, p.stat().st_mtime_ns) for p in copy.rglob("*")
                if p.is_file() and not p.name.endswith(("-shm", "-wal"))}

    before = snapshot()
    view = _view(copy)
    want = _view(run)
    pd.testing.assert_frame_equal(view.rows, want.rows)
    c = TestClient(create_app(view, TOKEN))
    page = c.get(f"/v/{TOKEN}/case/0")
    assert page.status_code == 200
    for url in re.findall(r'<img src="([^"]+)"', page.text):
        assert c.get(url).status_code == 200
    assert snapshot() == before and not (copy / "results.parquet").exists()


def test_grounding_first_token_p_yes_is_called_so_not_a_confidence_in_the_answer(client: TestClient) -> None:
    """The grounding table's ``confidence`` is the first-token P(yes) (0.05 beside the answer "No" is a confident
    No): the explorer names it by the suite's title for the column, on the trials list and the case page."""
    listing = client.get(f"/v/{TOKEN}/").text
    assert "<th>P(yes)</th>" in listing and "<th>confidence</th>" not in listing
    case = client.get(f"/v/{TOKEN}/case/0").text
    assert "<dt>P(yes)</dt>" in case and "<dt>confidence</dt>" not in case
