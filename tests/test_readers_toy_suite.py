"""A suite defined only in this test brings its own reader task (Suite.reader_tasks()): the study is created
from its sampler, the reader app serves the task's scales, the export carries the task's own file and the
analysis is the task's, without touching a core file. Task names are unique across suites."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient

from medvlm_audit.readers.agreement import metric_row
from medvlm_audit.readers.analysis import analyse_exports, write_analysis
from medvlm_audit.readers.app import create_app
from medvlm_audit.readers.catalog import reader_task, reader_tasks
from medvlm_audit.readers.export import export_study
from medvlm_audit.readers.sampling import item_id, need_columns
from medvlm_audit.readers.study import Study, StudyError, create_study
from medvlm_audit.readers.tasks import (
    AnalysisRequest,
    Choice,
    ReaderAnalysis,
    ReaderTask,
    SampleRequest,
    Scale,
    TaskSpec,
)
from medvlm_audit.suites import SUITES, Suite, get_suite, register_suite
from medvlm_audit.suites.base import Stage, SuiteResult

LEGIBILITY = (Choice("clear", "Clear", "c"), Choice("smudged", "Smudged", "s"), Choice("unreadable", "Unreadable", "u"))


def _sample(req: SampleRequest) -> list[dict[str, Any]]:
    assert req.items is not None
    need_columns(req.items, ["item_id", "text"], "toy items")
    shout = str.upper if req.options["shout"] else str
    return [{"item_id": item_id(req.seed, "toy", r.item_id), "unit": str(r.item_id),
             "view": {"question": shout(f"How legible is the label {r.text!r}?"), "n_images": 0},
             "source": {"item_id": str(r.item_id), "images": []}}
            for r in req.items.head(req.n).itertuples(index=False)]


def _analyse(req: AnalysisRequest, out: ReaderAnalysis) -> None:
    a = req.answers
    rows = [metric_row("toy", f"reader:{rd}", "clear_share", "all", 100.0 * (g["answer"] == "clear").mean(), float("nan"),
                       float("nan"), float("nan"), len(g), "%", "share of labels rated clear")
            for rd, g in a.groupby("reader")]
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)


def _export(study: Any) -> list[tuple[str, bytes]]:
    return [("toy-legibility.txt", f"{study.task}: {len(study.answer_table())} answers\n".encode())]


TOY_TASK = ReaderTask(TaskSpec("label-legibility", "Label legibility", "Rate how legible the printed label is.",
                               (Scale("answer", "", LEGIBILITY),), shows_image=False),
                      sample=_sample, analyse=_analyse, export=_export, options={"shout": False})


class ToyReaderSuite(Suite):
    name: ClassVar[str] = "toy-readers"
    title: ClassVar[str] = "Toy audit with a reader task"
    Options: ClassVar[type[BaseModel]] = BaseModel
    backends: ClassVar[dict[str, str]] = {}

    def stages(self):
        return (Stage("answer", lambda ctx: None),)  # never run here

    def embedded_config(self, out: Path, **flags: Any) -> dict[str, Any]:
        raise NotImplementedError

    def tidy(self, store) -> pd.DataFrame:
        raise NotImplementedError

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, **kw: Any) -> SuiteResult:
        raise NotImplementedError

    def reader_tasks(self):
        return (TOY_TASK,)


class ClashingSuite(ToyReaderSuite):
    name: ClassVar[str] = "toy-clash"

    def reader_tasks(self):
        return (ReaderTask(TaskSpec("label-legibility", "Other", "", (Scale("answer", "", LEGIBILITY),)),
                           sample=_sample, analyse=_analyse),)


@pytest.fixture
def toy_suite():
    register_suite("toy-readers", ToyReaderSuite, replace=True)
    yield get_suite("toy-readers")
    SUITES.unregister("toy-readers")


def test_a_toy_suites_reader_task_is_created_served_exported_and_analysed(tmp_path: Path, toy_suite) -> None:
    assert reader_task("label-legibility") is TOY_TASK
    assert {"finding-presence", "cot-rating", "visual-necessity"} <= set(reader_tasks())  # the built-in ones too
    items = pd.DataFrame({"item_id": ["a", "b", "c"], "text": ["ASPIRIN", "<b>saline</b>", "heparin"]})
    res = create_study(None, "label-legibility", 3, ["ana", "ben"], seed=1, out=tmp_path / "study", items=items)
    assert res["n_items"] == 3
    st = Study(tmp_path / "study")
    assert st.spec is TOY_TASK.spec and [s.name for s in st.spec.scales] == ["answer"]

    client = TestClient(create_app(tmp_path / "study"), base_url="http://127.0.0.1")
    token = res["tokens"]["ana"]
    page = client.get(f"/r/{token}?i=1")
    assert page.status_code == 200
    assert "Label legibility" in page.text and "Rate how legible the printed label is." in page.text
    assert "Smudged" in page.text and "Unreadable" in page.text  # the task's own choices
    assert "<b>saline</b>" not in page.text  # escaped like every other task's text
    csrf = page.text.split('data-csrf="')[1].split('"')[0]
    for k, iid in enumerate(st.order(st.readers()[0])):
        r = client.post(f"/r/{token}/answer", data={"csrf": csrf, "item_id": iid, "scale": "answer",
                                                    "value": ["clear", "smudged", "clear"][k], "elapsed_ms": "900"})
        assert r.status_code == 200 and r.json()["ok"] and r.json()["complete"]
    r = client.post(f"/r/{token}/answer", data={"csrf": csrf, "item_id": iid, "scale": "answer", "value": "blurry"})
    assert r.status_code == 400  # not one of the task's choices
    assert client.get(f"/r/{token}", follow_redirects=False).status_code == 303  # every item answered

    files = export_study(tmp_path / "study", tmp_path / "export")
    assert files["toy-legibility.txt"].read_text() == "label-legibility: 3 answers\n"
    assert list(pd.read_parquet(files["answers.parquet"]).columns) == [
        "reader", "item_id", "task", "probe_set", "case_id", "condition", "model", "scale", "answer", "time_s",
        "answered_at", "revisions", "position"]  # no other suite's columns (finding, benchmark)
    man = json.loads(files["readers_export.json"].read_text())
    assert man["task"] == "label-legibility" and "toy-legibility.txt" in man["files"]
    res = analyse_exports([tmp_path / "export"], B=50)
    row = res.metrics.set_index(["model", "metric"]).loc[("reader:ana", "clear_share")]
    assert row["point"] == pytest.approx(200 / 3) and row["n"] == 3
    assert (write_analysis(res, tmp_path / "out")["readers-report.html"]).exists()


def test_the_cli_creates_a_study_of_a_toy_suites_task(tmp_path: Path, toy_suite) -> None:
    from medvlm_audit.readers.commands import readers_app

    pd.DataFrame({"item_id": ["a", "b"], "text": ["x", "y"]}).to_csv(tmp_path / "items.csv", index=False)
    cli = CliRunner()
    r = cli.invoke(readers_app, ["create", "--task", "label-legibility", "--items", str(tmp_path / "items.csv"),
                                 "--n", "2", "--reader", "ana", "--out", str(tmp_path / "s"), "--option", "shout=yes"])
    assert r.exit_code == 0, r.output
    st = Study(tmp_path / "s")
    assert st.task == "label-legibility" and st.meta()["options"] == {"shout": True}
    assert all(json.loads(v)["question"].startswith("HOW LEGIBLE") for v in st.all_items()["view"])
    r = cli.invoke(readers_app, ["tasks"])
    assert r.exit_code == 0 and "label-legibility\ttoy-readers\tLabel legibility" in r.stdout
    assert "options: shout=False" in r.stdout and "finding-presence\tgrounding" in r.stdout
    r = cli.invoke(readers_app, ["create", "--task", "label-legibility", "--items", str(tmp_path / "items.csv"),
                                 "--reader", "ana", "--out", str(tmp_path / "u"), "--option", "shout=loud"])
    assert r.exit_code == 2 and "shout takes a bool" in " ".join(r.output.split())
    r = cli.invoke(readers_app, ["create", "--task", "label-legibility", "--items", str(tmp_path / "items.csv"),
                                 "--reader", "ana", "--out", str(tmp_path / "v"), "--option", "shoot=1"])
    assert r.exit_code == 2 and "unknown option 'shoot' (did you mean shout?)" in " ".join(r.output.split())
    assert not (tmp_path / "v").exists() and not (tmp_path / "u").exists()
    r = cli.invoke(readers_app, ["create", "--task", "label-legibilty", "--reader", "ana", "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and "label-legibility" in " ".join(r.output.split())  # the known tasks are listed


def test_a_task_name_two_suites_declare_is_refused(toy_suite) -> None:
    register_suite("toy-clash", ClashingSuite, replace=True)
    try:
        with pytest.raises(StudyError, match="label-legibility.*declared by suites"):
            reader_tasks()
    finally:
        SUITES.unregister("toy-clash")
    assert reader_task("label-legibility") is TOY_TASK


def test_exported_answers_carry_the_tasks_own_fields(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    img = tmp_path / "img.png"
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(img)
    items = pd.DataFrame([{"item_id": f"q{i}", "question": f"Q{i}?", "options": ["a", "b"], "images": [str(img)],
                           "benchmark": "nejm" if i < 2 else "vqa", "finding": "edema"} for i in range(4)])
    create_study(None, "visual-necessity", 4, ["ana"], out=tmp_path / "vn", items=items)
    st = Study(tmp_path / "vn")
    rd = st.readers()[0]
    for iid in st.order(rd):
        st.save_answer(rd, iid, "answer", "no", 1.0)
    ans = pd.read_parquet(export_study(tmp_path / "vn", tmp_path / "exp")["answers.parquet"])
    assert "benchmark" in ans.columns and "finding" not in ans.columns  # stress's task groups by benchmark
    assert list(ans.columns).index("benchmark") == list(ans.columns).index("model") + 1
    assert sorted(ans["benchmark"]) == ["nejm", "nejm", "vqa", "vqa"]


def test_a_passage_is_shown_verbatim_and_old_studies_still_render(tmp_path: Path) -> None:
    import sqlite3

    items = pd.DataFrame({"item_id": ["u1"], "question": ["Why?"], "cot_text": ["Step 1: look <here>."]})
    res = create_study(None, "cot-rating", 1, ["ana"], out=tmp_path / "s", items=items)
    st = Study(tmp_path / "s")
    iid = st.all_items()["item_id"].iloc[0]
    assert json.loads(st.all_items()["view"].iloc[0])["text"] == "Step 1: look <here>."
    client = TestClient(create_app(tmp_path / "s"), base_url="http://127.0.0.1")
    page = client.get(f"/r/{res['tokens']['ana']}?i=1").text
    assert 'id="passage">Step 1: look &lt;here&gt;.</div>' in page
    con = sqlite3.connect(tmp_path / "s" / "study.sqlite")  # a study made when the slot was called cot_text
    con.execute("UPDATE items SET view = ? WHERE item_id = ?",
                (json.dumps({"question": "Why?", "cot_text": "Old passage", "n_images": 0}), iid))
    con.commit()
    con.close()
    client = TestClient(create_app(tmp_path / "s"), base_url="http://127.0.0.1")  # the server reads items at start
    page = client.get(f"/r/{res['tokens']['ana']}?i=1").text
    assert 'id="passage">Old passage</div>' in page


#: read only to open studies made before the view slot was renamed (cot_text -> text)
LEGACY = {("app.py", "cot_text")}


def test_readers_names_no_suite_column() -> None:
    """readers/ is the same for every task: no string in its code is a suite's tidy column or item field."""
    import ast

    suite_columns = {"finding", "benchmark", "has_box", "ibox_overlaps", "resolution", "prompt_variant", "kind",
                     "finding_presence", "cot_text", "modality", "label", "gold", "options_shown", "boxed_only"}
    root = Path(__file__).resolve().parents[1] / "src" / "medvlm_audit" / "readers"
    found = []
    for p in sorted(root.glob("*.py")):
        tree = ast.parse(p.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and node.value in suite_columns and (p.name, node.value) not in LEGACY:
                found.append(f"{p.name}:{node.lineno} {node.value!r}")
    assert not found, found
