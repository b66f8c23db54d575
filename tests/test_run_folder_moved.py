"""A run folder copied or moved elsewhere resumes with the same command line (issue 23, D5): an item set's
identity depends on what it holds (image paths relative to the run folder where they lie under it), not on
where the folder lives; a store whose hash was computed the older way (absolute paths) still resumes in place."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from medvlm_audit import api

FAITH_SUBJECTS = [{"name": "cue-admitter", "backend": "faithfulness-reference", "behaviour": "cue-admitter"}]


def _faith(run_dir: Path | str) -> dict:
    return {"suite": "faithfulness", "run_dir": str(run_dir), "probe_sets": ["phantom"], "models": FAITH_SUBJECTS,
            "judges": [], "phantom_items": 3, "conditions": ["baseline", "tb_rad:misleading"]}


def _stress(run_dir: Path | str) -> dict:
    return {"suite": "stress", "run_dir": str(run_dir), "probe_sets": ["phantom"],
            "models": [{"name": "image-reader", "backend": "stress_reference", "kind": "image_reader"}],
            "conditions": ["original", "no_image"]}


def _asked(res) -> int:
    return sum(int(m.get("asked", 0)) for m in res.summary.per_model.values())


def _stored_hash(run_dir: Path, name: str) -> str:
    with sqlite3.connect(run_dir / "run.sqlite") as db:
        return db.execute("SELECT content_hash FROM probe_sets WHERE name = ?", (name,)).fetchone()[0]


@pytest.mark.parametrize(("config", "name"), [(_faith, "phantom"), (_stress, "stress")])
def test_a_copied_run_folder_resumes_and_asks_nothing_again(tmp_path: Path, config, name: str) -> None:
    first = api.run(config(tmp_path / "a"), progress=False)
    assert _asked(first) > 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")  # the copy must not lean on the original's files
    again = api.run(config(tmp_path / "b"), progress=False)
    assert _asked(again) == 0
    assert _stored_hash(tmp_path / "b", name)


@pytest.mark.parametrize(("config", "name"), [(_faith, "phantom"), (_stress, "stress")])
def test_a_relative_run_dir_and_its_absolute_path_are_the_same_run(tmp_path: Path, monkeypatch, config,
                                                                   name: str) -> None:
    monkeypatch.chdir(tmp_path)
    api.run(config("r"), progress=False)
    again = api.run(config(tmp_path / "r"), progress=False)
    assert _asked(again) == 0


def test_faithfulness_store_hashed_the_older_way_resumes_in_place_and_is_upgraded(tmp_path: Path) -> None:
    from medvlm_audit.suites import get_suite

    get_suite("faithfulness")
    from medvlm_audit.suites.faithfulness.conditions import items_hash, legacy_items_hash
    from medvlm_audit.suites.faithfulness.items import load_items

    run = tmp_path / "run"
    api.run(_faith(run), progress=False)
    items = load_items(run / "phantom_vqa" / "items.jsonl")
    new, old = items_hash(items, run), legacy_items_hash(items)
    assert new != old  # the images lie under the run folder: the two ways differ
    assert _stored_hash(run, "phantom") == new
    with sqlite3.connect(run / "run.sqlite") as db:  # as an older version recorded it
        db.execute("UPDATE probe_sets SET content_hash = ? WHERE name = 'phantom'", (old,))
    again = api.run(_faith(run), progress=False)
    assert _asked(again) == 0
    assert _stored_hash(run, "phantom") == new


def test_stress_store_hashed_the_older_way_resumes_in_place(tmp_path: Path) -> None:
    from medvlm_audit.suites.stress.conditions import items_hash, legacy_items_hash
    from medvlm_audit.suites.stress.items import load_items

    run = tmp_path / "run"
    api.run(_stress(run), progress=False)
    items = load_items(run / "phantom_mcq" / "items.jsonl").items
    new, old = items_hash(items, run), legacy_items_hash(items)
    assert new != old
    with sqlite3.connect(run / "run.sqlite") as db:
        db.execute("UPDATE probe_sets SET content_hash = ? WHERE name = 'stress'", (old,))
    assert _asked(api.run(_stress(run), progress=False)) == 0
    assert _stored_hash(run, "stress") == new


def test_a_changed_item_set_is_still_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    api.run(_faith(run), progress=False)
    items = run / "phantom_vqa" / "items.jsonl"
    items.write_text(items.read_text().replace('"meta": {', '"meta": {"edited": 1, ', 1))
    with pytest.raises(ValueError, match="changed since this run was started"):
        api.run(_faith(run), progress=False)


def _view_images_ok(run_dir: Path) -> int:
    """Every image of the run rendered by the explorer, checked against its stored pixel hash; how many."""
    from medvlm_audit.view.data import load_run

    view = load_run(run_dir, api.suite_of_run(run_dir))
    shas = {s for s in view.rows["image_sha256"].dropna().astype(str) if s}
    assert shas
    for sha in shas:
        _, ok = view.render(sha)
        assert ok, sha
    return len(shas)


def test_the_explorer_shows_the_images_of_a_moved_run_or_one_started_from_another_folder(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """The image recipes a run records name its source files as the run was started (relative to the working
    directory of a relative --run-dir, or absolute): the explorer finds them where they lie relative to the run
    folder it is shown, whatever the working directory and wherever the folder was moved with its files."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    api.run(_faith("a"), progress=False)  # recorded as a/phantom_vqa/images/...
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert _view_images_ok(tmp_path / "a")
    shutil.move(tmp_path / "a", tmp_path / "elsewhere" / "b")
    monkeypatch.chdir(tmp_path)
    assert _view_images_ok(tmp_path / "elsewhere" / "b")


@pytest.mark.parametrize(("config", "name"), [(_faith, "phantom"), (_stress, "stress")])
def test_a_resumed_copy_records_its_own_item_files(tmp_path: Path, config, name: str) -> None:
    """The case rows a resumed copy's store holds name the files where they now are (a reader study drawn from
    the run, `readers create`, reads them), not the original folder's."""
    import json

    api.run(config(tmp_path / "a"), progress=False)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    api.run(config(tmp_path / "b"), progress=False)
    with sqlite3.connect(tmp_path / "b" / "run.sqlite") as db:
        rows = [json.loads(r) for (r,) in db.execute("SELECT row FROM cases WHERE probe_set = ?", (name,))]
    paths = [p for r in rows for p in ([r["image"]] if "image" in r else r["images"])]
    assert paths and all(Path(p).is_file() for p in paths), paths[:3]
