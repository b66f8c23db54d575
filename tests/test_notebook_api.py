"""The Python API in a real Jupyter kernel (nbclient + ipykernel): ``api.run`` inside the kernel's running event
loop runs a stress and a faithfulness audit end to end, and a cell reads the results."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow


def _notebook(out: Path) -> object:
    import medvlm_audit

    src = str(Path(medvlm_audit.__file__).resolve().parents[1])  # the kernel imports the code under test
    cells = [
        f"import sys\nsys.path.insert(0, {src!r})",
        "import asyncio\nasyncio.get_running_loop()  # the kernel's loop runs: asyncio.run would refuse here",
        ("from medvlm_audit import api\n"
         f"stress = api.run(api.embedded_config('stress', {str(out / 'stress')!r}, log=lambda *a: None), "
         "progress=False)\nstress.summary.n_trials"),
        (f"faith = await api.run_async(api.embedded_config('faithfulness', {str(out / 'faith')!r}, n_items=8, "
         "log=lambda *a: None), progress=False)"),
        ("t1 = api.tidy(stress.run_dir); t2 = api.tidy(faith.run_dir)\n"
         "print('ROWS', len(t1), len(t2), int(t1['error_kind'].notna().sum()), int(t2['error_kind'].notna().sum()))\n"
         "print('REPORT', api.report(faith.run_dir).name)\nprint('FILE', api.__file__)"),
    ]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


@pytest.mark.slow
def test_api_run_works_in_a_jupyter_kernel(tmp_path: Path) -> None:
    nb = _notebook(tmp_path)
    client = nbclient.NotebookClient(nb, timeout=540, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    rows = next(line for line in out.splitlines() if line.startswith("ROWS")).split()
    assert int(rows[1]) > 0 and int(rows[2]) > 0 and rows[3] == "0" and rows[4] == "0", out
    assert "REPORT report.html" in out
    import medvlm_audit

    assert f"FILE {Path(medvlm_audit.__file__).resolve().parent / 'api.py'}" in out  # the code under test ran
    assert (tmp_path / "stress" / "run.sqlite").is_file() and (tmp_path / "faith" / "report" / "report.html").is_file()


def test_run_leaves_the_objects_alive_at_its_start_out_of_full_collections_and_hands_them_back(monkeypatch) -> None:
    """api.run freezes the heap it starts with (gc.freeze: the imported modules are not scanned by every full
    collection during the run, issue 23) and unfreezes it at the end, also when the run fails; a nested run
    leaves it to the outer one."""
    import gc

    from medvlm_audit import api

    seen = []

    def fake_run(config, **kw):
        seen.append(gc.get_freeze_count())
        if config == "nested":
            with api._old_objects_frozen():
                seen.append(gc.get_freeze_count())
            seen.append(gc.get_freeze_count())
        if config == "fail":
            raise RuntimeError("boom")
        return "ok"

    monkeypatch.setattr(api, "_run", fake_run)
    before = gc.get_freeze_count()
    assert api.run("cfg") == "ok" and seen[0] > before and gc.get_freeze_count() == before
    with pytest.raises(RuntimeError):
        api.run("fail")
    assert gc.get_freeze_count() == before
    seen.clear()
    api.run("nested")
    assert seen[0] == seen[1] == seen[2] > before and gc.get_freeze_count() == before
    # a process that froze its own heap: neither frozen again nor unfrozen by the run
    gc.freeze()
    try:
        own = gc.get_freeze_count()
        seen.clear()
        api.run("cfg")
        # (objects freed by reference counting leave the frozen set: a few fewer, never all)
        assert own - 100 < seen[0] <= own and own - 100 < gc.get_freeze_count() <= own
    finally:
        gc.unfreeze()
