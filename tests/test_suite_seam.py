"""The suite seam: a toy suite defined only here runs through run, export and report without touching any core
file; config mistakes name the key and the nearest valid name; the house has no import cycles and the core
imports no suite subpackage or dataset builder."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from medvlm_audit import api
from medvlm_audit.errors import ConfigError
from medvlm_audit.export import raw_table
from medvlm_audit.models.base import LocalModel, Message, ModelInput, Response
from medvlm_audit.models.registry import BACKENDS
from medvlm_audit.report.sections import Section, table_to_html
from medvlm_audit.suites import SUITES, Suite, get_suite, register_suite, suite_names
from medvlm_audit.suites.base import Plan, PlanSource, Stage, StageContext, SuiteResult, Trial

SRC = Path(__file__).resolve().parents[1] / "src" / "medvlm_audit"


class ParityModel(LocalModel):
    """Answers 'even' or 'odd' for the number in the prompt (reads only the prompt)."""

    modality = "text_only"

    def __init__(self, name: str = "parity") -> None:
        self.name = name

    def identity(self) -> dict[str, Any]:
        return {"backend": "toy_parity"}

    def predict(self, inputs: list[ModelInput]) -> list[Response]:
        out = []
        for inp in inputs:
            n = int("".join(ch for ch in inp.prompt if ch.isdigit()) or 0)
            out.append(Response(text="even" if n % 2 == 0 else "odd"))
        return out


class JudgeModel(LocalModel):
    """Second stage: says 'ok' when the answer it is shown is 'even' or 'odd'."""

    modality = "text_only"

    def __init__(self, name: str = "judge") -> None:
        self.name = name

    def identity(self) -> dict[str, Any]:
        return {"backend": "toy_judge"}

    def predict(self, inputs: list[ModelInput]) -> list[Response]:
        return [Response(text="ok" if inp.prompt.split(":")[-1].strip() in ("even", "odd") else "bad")
                for inp in inputs]


class ToyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n_items: int = 6


def _plan_answers(ctx: StageContext) -> Plan:
    n = ctx.options.n_items  # type: ignore[attr-defined]
    rows = pd.DataFrame({"case_id": [f"q{i}" for i in range(n)], "label": ["even" if i % 2 == 0 else "odd"
                                                                          for i in range(n)]})
    plan = Plan(sources=[PlanSource("toy", "", f"toy-{n}", rows, {"builder": "test"})])
    plan.trials = [Trial("toy", r.case_id, "plain", (Message("user", f"Is {int(r.case_id[1:])} even or odd?"),))
                   for r in rows.itertuples()]
    return plan


def _plan_judge(ctx: StageContext) -> Plan:
    assert ctx.store is not None
    ans = ctx.store.frame("SELECT t.case_id, r.text FROM trials t JOIN responses r ON r.key = t.key "
                          "WHERE t.condition = 'plain'")
    return Plan(trials=[Trial("toy", r.case_id, "judge", (Message("user", f"answer: {r.text}"),))
                        for r in ans.itertuples()])


def toy_hello_cmd(name: str = "reader") -> None:
    """Say hello (a toy suite's own command)."""
    print(f"hello {name} from the toy suite")


def toy_build_cmd(n: int = 3) -> None:
    """Build n toy items (a toy suite's own build command)."""
    print(f"built {n} toy items")


class ToySuite(Suite):
    name: ClassVar[str] = "toy"
    title: ClassVar[str] = "Toy audit"
    Options: ClassVar[type[BaseModel]] = ToyOptions
    backends: ClassVar[dict[str, Any]] = {"toy_parity": lambda name, params, ctx: ParityModel(name),
                                          "toy_judge": lambda name, params, ctx: JudgeModel(name)}

    def commands(self) -> dict[str, Any]:
        return {"toy-hello": toy_hello_cmd, "build toy": toy_build_cmd}

    def stages(self):
        return (Stage("answer", _plan_answers),
                Stage("judge", _plan_judge, lambda ctx: [m for m in ctx.config.models if m.name == "judge"]))

    def embedded_config(self, out: Path, **flags: Any) -> dict[str, Any]:
        return {"suite": "toy", "run_dir": str(out), "probe_sets": ["none"],
                "models": [{"name": "parity", "backend": "toy_parity"}]}

    def tidy(self, store) -> pd.DataFrame:
        raw = raw_table(store)
        raw["correct"] = (raw["answer_text"] == raw["case_id"].map(
            lambda c: "even" if int(c[1:]) % 2 == 0 else "odd")).astype(float)
        return raw[["run_id", "probe_set", "model", "case_id", "condition", "answer_text", "correct"]]

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, **kw: Any) -> SuiteResult:
        ans = tidy[tidy["condition"] == "plain"]
        rows = [{"probe_set": "toy", "model": m, "metric": "accuracy", "subset": "all", "point": g["correct"].mean(),
                 "se": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": len(g), "unit": "fraction",
                 "method": "mean", "note": ""} for m, g in ans.groupby("model")]
        judged = tidy[tidy["condition"] == "judge"]
        return SuiteResult(metrics=pd.DataFrame(rows),
                           sections=[Section("Answers", table_to_html(ans[["model", "case_id", "answer_text"]]))],
                           verdicts={"parity": "reads the prompt"}, summary={"n_judged": int(len(judged))},
                           tables={"toy_answers": ans})



@pytest.fixture
def toy_suite():
    register_suite("toy", ToySuite, replace=True)
    yield get_suite("toy")
    SUITES.unregister("toy")
    for b in ("toy_parity", "toy_judge"):
        BACKENDS.unregister(b)


def test_a_toy_suite_runs_through_run_export_and_report_with_two_stages(tmp_path: Path, toy_suite) -> None:
    cfg = {"suite": "toy", "run_dir": str(tmp_path / "run"), "probe_sets": ["none"], "n_items": 6,
           "models": [{"name": "parity", "backend": "toy_parity"}, {"name": "judge", "backend": "toy_judge"}]}

    def first_stage_only(ctx):  # the judge stage's models are its own; the first stage asks parity only
        return [m for m in ctx.config.models if m.name == "parity"]

    toy_suite.stages = lambda: (Stage("answer", _plan_answers, first_stage_only),
                                Stage("judge", _plan_judge, lambda ctx: [m for m in ctx.config.models
                                                                         if m.name == "judge"]))
    res = api.run(cfg, progress=False)
    df = pd.read_parquet(res.results_parquet)
    assert set(df["condition"]) == {"plain", "judge"}
    assert (df.loc[df["condition"] == "plain", "correct"] == 1).all()
    assert (df.loc[df["condition"] == "judge", "answer_text"] == "ok").all() and (df["condition"] == "judge").sum() == 6
    page = api.report(res.run_dir)
    out = page.parent
    metrics = pd.read_csv(out / "metrics.csv")
    assert list(metrics.columns[:13]) == ["suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low",
                                          "ci_high", "n", "unit", "method", "note"]
    assert metrics.loc[0, "suite"] == "toy" and metrics.loc[0, "point"] == 1.0
    assert (out / "toy_answers.csv").exists() and json.loads((out / "summary.json").read_text())["n_judged"] == 6
    assert "Toy audit" in page.read_text() and 'id="answers"' in page.read_text()
    # resume: a second run asks nothing
    again = api.run(cfg, progress=False)
    assert sum(m.get("asked", 0) for m in again.summary.per_model.values()) == 0
    # the CLI's export and report work on it too
    from medvlm_audit.cli import app

    r = CliRunner().invoke(app, ["export", str(res.run_dir), "--out", str(tmp_path / "exp")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "exp" / "results.csv").exists()


def test_a_toy_suite_brings_its_own_commands_to_the_cli(toy_suite) -> None:
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["toy-hello", "--name", "Ada"])
    assert res.exit_code == 0, res.output
    assert "hello Ada from the toy suite" in res.output
    res = runner.invoke(app, ["build", "toy", "--n", "5"])
    assert res.exit_code == 0, res.output
    assert "built 5 toy items" in res.output
    listing = runner.invoke(app, ["--help"]).output
    assert "toy-hello" in listing and "import-results" in listing
    assert "toy" in runner.invoke(app, ["build", "--help"]).output


def test_a_suite_that_does_not_subclass_the_protocol_is_refused() -> None:
    from medvlm_audit.errors import ConfigError

    class Bare:
        name = "bare"

    register_suite("bare", Bare, replace=True)
    try:
        with pytest.raises(ConfigError, match="must subclass medvlm_audit.suites.Suite"):
            get_suite("bare")
    finally:
        SUITES.unregister("bare")


def test_config_mistakes_name_the_key_and_the_nearest_name(tmp_path: Path) -> None:
    base = {"run_dir": str(tmp_path / "r"), "suite": "grounding", "probe_sets": ["x"], "models": [{"name": "m", "backend": "openai"}]}
    with pytest.raises(ConfigError, match=r"unknown suite 'grounding2' \(did you mean grounding\?\); registered: "
                                          r".*grounding.*stress"):
        api.resolve_config({**base, "suite": "grounding2"})
    with pytest.raises(ConfigError, match=r"models\[0\]\.backend.*'opena1'.*did you mean openai"):
        api.resolve_config({**base, "models": [{"name": "m", "backend": "opena1"}]})
    with pytest.raises(ConfigError, match=r"key 'resolution': unknown key \(did you mean resolutions\?\)"):
        api.resolve_config({**base, "resolution": [224]})
    with pytest.raises(ConfigError, match=r"unknown grounding condition 'target-mask' \(did you mean target_mask\?\)"):
        api.resolve_config({**base, "conditions": ["target-mask"]})
    with pytest.raises(ConfigError, match=r"unknown stress condition 'reorderd' \(did you mean reordered\?\)"):
        api.resolve_config({**base, "suite": "stress", "conditions": ["reorderd"]})
    with pytest.raises(ConfigError, match=r"key 'decoding.max_new_token'.*did you mean max_new_tokens"):
        api.resolve_config({**base, "decoding": {"max_new_token": 3}})
    assert {"grounding", "stress"} <= set(suite_names())


def test_cli_run_lists_the_registered_suites_on_a_typo(tmp_path: Path) -> None:
    from medvlm_audit.cli import app

    r = CliRunner().invoke(app, ["run", "--suite", "stres", "--run-dir", str(tmp_path / "r")])
    assert r.exit_code == 2 and "did you mean stress" in r.output and "grounding" in r.output
    assert "Traceback" not in r.output


# ---------------------------------------------------------------------------------------------- the house
def _module_graph() -> dict[str, set[str]]:
    mods: dict[str, Path] = {}
    for p in SRC.rglob("*.py"):
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m.split(".") if p.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(p.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and t.startswith("medvlm_audit") and not m.startswith(t + "."):
                    edges[m].add(t)
    return edges


@pytest.mark.slow
def test_no_import_cycles() -> None:
    edges = _module_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(v: str, path: list[str]) -> None:
        state[v] = 1
        for w in sorted(edges[v]):
            if state.get(w) == 1:
                cycles.append(path[path.index(w):] + [w] if w in path else [v, w])
            elif w not in state:
                visit(w, path + [w])
        state[v] = 2

    for v in sorted(edges):
        if v not in state:
            visit(v, [v])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.slow
def test_core_imports_no_suite_internals_and_no_dataset_builder() -> None:
    allowed_suite = {"medvlm_audit.suites", "medvlm_audit.suites.base"}
    bad = []
    for m, ts in _module_graph().items():
        if m.startswith(("medvlm_audit.suites", "medvlm_audit.testing")):
            continue
        for t in ts:
            if t.startswith("medvlm_audit.suites.") and t not in allowed_suite:
                bad.append(f"{m} -> {t}")
            if t.startswith("medvlm_audit.suites.grounding.datasets") and not m.startswith(
                    ("medvlm_audit.suites.grounding.datasets", "medvlm_audit.cli", "medvlm_audit.api")):
                bad.append(f"{m} -> {t}")
    assert not bad, bad


@pytest.mark.slow  # parses every module, like the other import-graph tests
def test_two_rooms_reach_up_to_the_suites_and_dispatch_imports_no_view() -> None:
    """docs/architecture.md names the two upward dependencies into suites/: dispatch (api, cli) and the reader
    study's catalogue; the run explorer gets its suite from dispatch (``api.suite_of_run``) and the report's
    cases section comes from the suite (``Suite.cases_section``), so api imports no view module (no room cycle)."""
    graph = _module_graph()
    up = sorted(m for m, ts in graph.items() if not m.startswith(("medvlm_audit.suites", "medvlm_audit.testing"))
                and any(t == "medvlm_audit.suites" or t.startswith("medvlm_audit.suites.") for t in ts))
    rooms = {m.split(".")[1] for m in up}
    assert rooms <= {"api", "cli", "readers"} and len({"dispatch" if r in ("api", "cli") else r for r in rooms}) <= 2, up
    assert not [t for t in graph["medvlm_audit.api"] if t.startswith("medvlm_audit.view")]
    assert {t for m, ts in graph.items() if m.startswith("medvlm_audit.view") for t in ts
            if t.startswith("medvlm_audit.suites")} == set()


def test_the_cli_starts_without_loading_a_suite_or_pandas() -> None:
    import subprocess
    import sys

    code = ("import sys, medvlm_audit.cli; "
            "print(sorted(m for m in sys.modules if m.startswith(('pandas', 'scipy', 'medvlm_audit.suites.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # noqa: S307 (our own printed list)
    assert not [m for m in loaded if m.startswith(("pandas", "scipy"))], loaded
    assert all(m.endswith(".commands") or m.count(".") == 2 for m in loaded if m.startswith("medvlm_audit.suites."))


@pytest.mark.slow
def test_no_suite_name_switch_outside_suites() -> None:
    names = set(suite_names())
    bad = []
    for p in SRC.rglob("*.py"):
        if "suites" in p.relative_to(SRC).parts or "testing" in p.relative_to(SRC).parts:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value in names for c in node.comparators):
                bad.append(f"{p.relative_to(SRC)}:{node.lineno}")
    assert not bad, bad


def test_a_config_without_a_suite_is_refused_by_name(tmp_path: Path) -> None:
    cfg = {"run_dir": str(tmp_path / "r"), "probe_sets": ["x"], "models": [{"name": "m", "backend": "openai"}]}
    with pytest.raises(ConfigError, match="key 'suite' is missing"):
        api.resolve_config(cfg)
    assert not (tmp_path / "r").exists()


def test_the_core_tidy_columns_name_no_grounding_column() -> None:
    """raw_table gives every suite the engine's trial columns and the shared case vocabulary; grounding's box
    columns and the imported answers are added only when a suite asks (grounding does)."""
    import inspect

    from medvlm_audit import export

    src = inspect.getsource(export.raw_table)
    assert "has_box" not in src and "ibox_overlaps" not in src and "tbox" not in src


@pytest.mark.parametrize("setting, message", [("n_cases=40", "n_cases must be a whole number >= 60"),
                                              ("n_cases=fourty", "n_cases must be a whole number"),
                                              ("gemma=maybe", "gemma must be true or false"),
                                              ("n_casess=100", "has no option 'n_casess'")])
def test_demo_set_values_the_default_refuses_get_one_line_and_nothing_written(tmp_path: Path, setting: str,
                                                                              message: str) -> None:
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--set", setting, "--no-progress"])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "d").exists()
