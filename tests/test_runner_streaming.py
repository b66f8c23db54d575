"""The streaming runner: sources checked before any call, images rendered while models answer, a decode
failure mid-run named and nothing finished lost, images encoded off the event loop."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import BrightSpotModel, make_tiny_probeset

from medvlm_audit import api, runner
from medvlm_audit.errors import ImageError
from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Decoding
from medvlm_audit.models.encoding import decode_data_url
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.runner import execute
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
from medvlm_audit.suites.grounding.suite import (
    tidy_grounding as tidy,  # these stores are grounding runs made by the runner alone
)
from medvlm_audit.testing.fake_openai import FakeOpenAIServer

OPTS = GroundingOptions(conditions=("original", "target_mask", "irrelevant_mask"))


def _damage_pixel_data(path: Path) -> None:
    """Replace the IDAT payload by bytes that are not a zlib stream, with valid chunk CRCs: the header and
    every CRC check pass, only decoding the pixels fails."""
    data = path.read_bytes()
    out, pos = [data[:8]], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if tag == b"IDAT":
            body = bytes(range(256)) * (len(body) // 256 + 1)
            body = body[: max(len(body), 64)]
        crc = zlib.crc32(body, zlib.crc32(tag))
        out.append(struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc))
        pos += 12 + length
    path.write_bytes(b"".join(out))


def test_damaged_pixels_stop_the_run_naming_the_case_and_keep_finished_answers(tmp_path: Path) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=12)
    good = (ps.image_root / "images" / "img009.png").read_bytes()
    _damage_pixel_data(ps.image_root / "images" / "img009.png")
    runner.check_image_header(ps.image_root / "images" / "img009.png")  # passes: only the pixels are bad
    store = RunStore(tmp_path / "run.sqlite")
    with pytest.raises(ImageError, match=r"case 'c009' \(tiny\), condition \w+: image file .*img009.png cannot be decoded"):
        asyncio.run(execute(store, plan_grounding([ps], OPTS), [BrightSpotModel()], progress=False, workers=1))
    kept = store.counts()["responses"]
    # the file is repaired: a rerun asks exactly what is missing and ends with every answer once
    (ps.image_root / "images" / "img009.png").write_bytes(good)
    m = BrightSpotModel()
    asyncio.run(execute(store, plan_grounding([ps], OPTS), [m], progress=False))
    assert m.calls == 36 - kept
    assert store.counts()["responses"] == 36


def test_api_run_with_an_unreadable_image_writes_nothing(tmp_path: Path) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=6)
    (ps.image_root / "images" / "img004.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    cfg = {"suite": "grounding", "probe_sets": [str(ps.image_root / "probeset")], "run_dir": str(tmp_path / "run"),
           "conditions": ["original"], "models": [{"name": "bright-spot", "backend": "openai", "model": "x",
                                                   "base_urls": "http://127.0.0.1:9/v1"}]}
    m = BrightSpotModel()
    with pytest.raises(ImageError, match=r"case 'c00[24]'.*img004.png cannot be decoded"):
        api.run(cfg, models=[m], progress=False)
    assert m.calls == 0
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_models_answer_while_later_images_are_still_rendering(tmp_path: Path, monkeypatch) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=12)
    slow = runner.render_sources
    rendered: list[int] = []

    def render_slowly(*args, **kw):
        time.sleep(0.05)
        out = slow(*args, **kw)
        rendered.append(len(out))
        return out

    monkeypatch.setattr(runner, "render_sources", render_slowly)
    store = RunStore(tmp_path / "run.sqlite")
    seen: list[int] = []

    class Watching(BrightSpotModel):
        def predict(self, inputs):
            seen.append(sum(rendered))
            return super().predict(inputs)

    m = Watching()
    m.batch_size = 1
    summary = asyncio.run(execute(store, plan_grounding([ps], OPTS), [m], progress=False, workers=1))
    assert m.calls == 36 and sum(rendered) == 36
    assert seen[0] < 36, "the first answer waited for every image to be rendered"
    assert summary.first_input_s is not None and summary.first_input_s < summary.plan_s


@pytest.mark.parametrize("render_in", ["threads", "processes"])
def test_images_are_encoded_by_render_workers_and_arrive_exact(tmp_path: Path, render_in: str) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=8)
    primed: list[str] = []
    shipped: dict[str, bytes] = {}

    class Counting(OpenAIChatModel):
        def prime_image(self, sha256: str, encoded: bytes) -> None:
            primed.append(sha256)
            shipped[sha256] = encoded
            super().prime_image(sha256, encoded)

    async def go() -> tuple[list, RunStore]:
        async with FakeOpenAIServer(record_bodies=True) as srv:
            m = Counting("vlm", "fake-vlm", srv.base_url, max_concurrency=4, image_cache_mb=0.001)
            store = RunStore(tmp_path / "run.sqlite")
            await execute(store, plan_grounding([ps], OPTS), [m], Decoding(max_new_tokens=4), progress=False,
                          render_in=render_in)
            return list(srv.stats.bodies), store

    bodies, store = asyncio.run(go())
    df = tidy(store)
    assert len(bodies) == 24 and df.error_kind.isna().all()
    assert sorted(primed) == sorted(df.image_sha256)  # every image came encoded from a render worker
    # what the server received is exactly the rendered pixels of each trial
    from medvlm_audit.models.base import pixel_sha256

    urls = [b["messages"][0]["content"][0]["image_url"]["url"] for b in bodies]
    got = {pixel_sha256(decode_data_url(u)) for u in urls}
    assert got == set(df.image_sha256)
    assert np.all(df.groupby("case_id").image_sha256.nunique() == 3)
    # workers ship each image as the model sends it, its data URL (PNG encoding and base64 both done beside
    # the event loop), and the body carries exactly those bytes
    assert all(b.startswith(b"data:image/png;base64,iVBORw0KGgo") for b in shipped.values())
    assert set(urls) == {b.decode("ascii") for b in shipped.values()}
    assert all(base64.b64decode(b.split(b",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n") for b in shipped.values())


def test_template_keys_equal_the_documented_key_function(tmp_path: Path) -> None:
    """Keys come from per-question templates; they must be byte-identical to input_key over the input."""
    import json

    from conftest import PromptLengthModel

    from medvlm_audit.models.base import ImageData, ModelInput, TextOnly, input_key

    ps = make_tiny_probeset(tmp_path / "data", n=6)
    plan = plan_grounding([ps], GroundingOptions(repeats=2))
    store = RunStore(tmp_path / "run.sqlite")
    hashes = runner.hash_images(store, plan.trials, runner.SourceCache(8))
    dec = Decoding(seed=3)
    for model in (BrightSpotModel(), PromptLengthModel(), TextOnly(BrightSpotModel(), name="t")):
        work = runner.ModelWork(model, dec, set())
        rows, requests, _ = work.admit(plan.trials, hashes)
        described = {k: v for k, _, v, _ in requests}
        flags = {k: lp for k, _, _, lp in requests}  # the stored log-probabilities flag, as the description says
        for t, row in zip(plan.trials, rows):
            d = dec if not t.sample_index else Decoding(seed=3 + t.sample_index)
            inp = model.prepare(ModelInput(t.messages, tuple(ImageData(np.zeros((0, 0), np.uint8), hashes[r])
                                                             for r in t.images), d, t.sample_index))
            assert row[5] == input_key(model.identity(), inp)
            assert json.loads(described[row[5]]) == inp.describe()
            assert flags[row[5]] == int(inp.describe()["decoding"]["logprobs"] is True)


def test_local_models_get_pixels_from_render_processes(tmp_path: Path) -> None:
    """Forced process rendering with a local model: pixels come back from the workers, answers as in threads."""
    ps = make_tiny_probeset(tmp_path / "data", n=10)
    answers = {}
    for render_in in ("threads", "processes"):
        store = RunStore(tmp_path / f"{render_in}.sqlite")
        asyncio.run(execute(store, plan_grounding([ps], OPTS), [BrightSpotModel()], progress=False,
                            render_in=render_in))
        answers[render_in] = tidy(store).set_index(["case_id", "condition"]).sort_index()[["key", "answer_text"]]
    assert answers["processes"].equals(answers["threads"])
    assert (answers["threads"].answer_text == "Yes").sum() >= 5


def test_header_check_catches_truncated_and_altered_pngs(tmp_path: Path) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=2)
    f = ps.image_root / "images" / "img000.png"
    data = f.read_bytes()
    runner.check_image_header(f)
    f.write_bytes(data[: len(data) - 20])
    with pytest.raises(ImageError, match="img000.png cannot be decoded .*truncated"):
        runner.check_image_header(f)
    flipped = bytearray(data)
    flipped[60] ^= 0xFF  # a byte inside the IDAT payload
    f.write_bytes(bytes(flipped))
    with pytest.raises(ImageError, match="CRC"):
        runner.check_image_header(f)
    f.write_bytes(b"GIF89a not really")
    with pytest.raises(ImageError, match="img000.png cannot be decoded"):
        runner.check_image_header(f)
    (tmp_path / "x.png").unlink(missing_ok=True)
    with pytest.raises(ImageError, match="does not exist"):
        runner.check_image_header(tmp_path / "x.png")


def test_a_model_added_to_a_run_gets_its_images_rendered_off_the_loop(tmp_path: Path) -> None:
    """Image hashes already stored: the inputs are keyed at once, but each waits for its image to be rendered
    and encoded by the render workers (none is rendered on the event loop)."""
    ps = make_tiny_probeset(tmp_path / "data", n=8)
    store = RunStore(tmp_path / "run.sqlite")
    asyncio.run(execute(store, plan_grounding([ps], OPTS), [BrightSpotModel()], progress=False))
    primed: list[str] = []

    class Counting(OpenAIChatModel):
        def prime_image(self, sha256: str, encoded: bytes) -> None:
            primed.append(sha256)
            super().prime_image(sha256, encoded)

    async def go() -> None:
        async with FakeOpenAIServer() as srv:
            m = Counting("vlm", "fake-vlm", srv.base_url, max_concurrency=4)
            await execute(store, plan_grounding([ps], OPTS), [m], Decoding(max_new_tokens=4), progress=False,
                          render_in="processes")

    asyncio.run(go())
    df = tidy(store)
    vlm = df[df.model == "vlm"]
    assert len(vlm) == 24 and vlm.error_kind.isna().all()
    assert sorted(primed) == sorted(vlm.image_sha256)


def test_a_stored_hash_that_no_longer_matches_the_pixels_stops_the_run(tmp_path: Path) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=4)
    store = RunStore(tmp_path / "run.sqlite")
    asyncio.run(execute(store, plan_grounding([ps], OPTS), [BrightSpotModel()], progress=False))
    store.db.execute("UPDATE image_hashes SET sha256 = 'f00d' WHERE rowid = 1")
    m = BrightSpotModel()
    m.name = "second"
    with pytest.raises(ImageError, match="changed since it was hashed"):
        asyncio.run(execute(store, plan_grounding([ps], OPTS), [m], progress=False))


def test_run_config_render_in_reaches_the_runner(tmp_path: Path, monkeypatch) -> None:
    """``render_in`` in a run config chooses where images are rendered (here: forced into processes)."""
    ps = make_tiny_probeset(tmp_path / "data", n=4)
    seen: list[bool] = []
    real = runner._render_stream

    def spy(recipes, workers, cache, pixels, encoders, processes=False, want_pixels=True, room=None):
        seen.append(processes)
        return real(recipes, workers, cache, pixels, encoders, processes, want_pixels, room)

    monkeypatch.setattr(runner, "_render_stream", spy)
    cfg = {"suite": "grounding", "probe_sets": [str(ps.image_root / "probeset")], "run_dir": str(tmp_path / "run"),
           "conditions": ["original"], "render_in": "processes",
           "models": [{"name": "bright-spot", "backend": "openai", "model": "x", "base_urls": "http://127.0.0.1:9/v1"}]}
    m = BrightSpotModel()
    api.run(cfg, models=[m], progress=False)
    assert seen == [True] and m.calls == 4


def test_render_sources_can_name_results_by_position(tmp_path: Path) -> None:
    """A render worker names each result by its position in the task (the parent keeps the recipes), so no
    recipe copies come back through the pipe; an unreadable source stops its group at its position."""
    ps = make_tiny_probeset(tmp_path / "data", n=4)
    recipes = list(runner.TrialIndex(plan_grounding([ps], OPTS).trials).first)
    groups = runner.group_by_source(recipes)
    bad = ImageRecipe.standard(str(tmp_path / "missing.png"), 224)
    groups = [groups[0], [bad, *groups[1]], groups[2]]
    by_recipe = runner.render_sources(groups, want_pixels=False)
    by_position = runner.render_sources(groups, want_pixels=False, positions=True)
    flat = [r for g in groups for r in g]
    assert [flat[i] for i, *_ in by_position] == [r for r, *_ in by_recipe]
    assert [str(h) for _, h, *_ in by_position] == [str(h) for _, h, *_ in by_recipe]
    assert all(isinstance(i, int) for i, *_ in by_position)
    assert isinstance(by_position[len(groups[0])][1], ImageError)  # the bad source, at its own position


def test_trial_index_is_compact_and_still_names_the_first_trial(tmp_path: Path) -> None:
    """One trial index per recipe, a list only for a recipe several trials wait on (a swap partner's image);
    an error names the recipe's first trial, also after the recipe was resolved."""
    ps = make_tiny_probeset(tmp_path / "data", n=6)
    trials = plan_grounding([ps], GroundingOptions(conditions=("original", "swap", "target_mask"))).trials
    index = runner.TrialIndex(trials)
    no_images = index.ready_without_images()
    shared = [r for r, w in index.waiting.items() if isinstance(w, list)]
    assert shared and all(len(index.waiting[r]) == 2 for r in shared)  # original + the partner's swap
    r = shared[0]
    first = next(t for t in trials if r in t.images)
    want = f"case {first.case_id!r} ({first.probe_set}), condition {first.condition}: boom"
    assert str(index.named(r, ValueError("boom"))) == want
    ready = index.resolve([r])
    assert sorted(ready) == sorted(i for i, t in enumerate(trials) if r in t.images)
    assert r not in index.waiting and str(index.named(r, ValueError("boom"))) == want
    rest = index.resolve(list(index.first))
    assert sorted(ready + rest + no_images) == list(range(len(trials)))


@pytest.mark.parametrize("render_in", ["threads", "processes"])
def test_multi_image_trials_are_keyed_after_single_image_trials_dropped_shared_hashes(
        tmp_path: Path, render_in: str) -> None:
    """Hashes are dropped once every trial on an image is keyed, except those a multi-image trial still
    waits on: trials sharing images in every order are all keyed and asked, each image arriving exact."""
    from medvlm_audit.models.base import Message, pixel_sha256
    from medvlm_audit.plan import Plan, Trial

    make_tiny_probeset(tmp_path / "data", n=8)
    srcs = sorted(str(p) for p in (tmp_path / "data" / "images").glob("*.png"))[:4]
    a, b, c, d = (ImageRecipe.standard(s, 64) for s in srcs)
    q = (Message("user", "Is there a nodule? Answer Yes or No."),)
    shapes = [(a,), (a, b), (b,), (c, a), (d, c, b), (d,)]
    trials = [Trial("ps", f"c{i}", "cond", q, imgs) for i, imgs in enumerate(shapes)]

    async def go() -> tuple[list, RunStore]:
        async with FakeOpenAIServer(record_bodies=True) as srv:
            m = OpenAIChatModel("vlm", "fake-vlm", srv.base_url, max_concurrency=2)
            store = RunStore(tmp_path / f"run-{render_in}.sqlite")
            await execute(store, Plan(trials=list(trials)), [m], Decoding(max_new_tokens=4), progress=False,
                          render_in=render_in)
            return list(srv.stats.bodies), store

    bodies, store = asyncio.run(go())
    assert len(bodies) == len(shapes)
    want = {tuple(pixel_sha256(r.render()) for r in imgs) for imgs in shapes}
    got = {tuple(pixel_sha256(decode_data_url(part["image_url"]["url"]))
                 for part in body["messages"][0]["content"] if part["type"] == "image_url") for body in bodies}
    assert got == want
    assert store.db.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == len(shapes)
    assert store.db.execute("SELECT COUNT(*) FROM responses WHERE error_kind IS NULL").fetchone()[0] == len(shapes)


def test_source_keys_equal_each_recipe_s_cache_key_from_one_stat_per_file(tmp_path: Path, monkeypatch) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=6)
    index = runner.TrialIndex(plan_grounding([ps], GroundingOptions(conditions=("original", "target_mask"))).trials)
    recipes = list(index.first)
    want = {r: r.cache_key() for r in recipes}
    stats: list[str] = []
    real = ImageRecipe.file_stat
    monkeypatch.setattr(ImageRecipe, "file_stat", lambda self: stats.append(self.source) or real(self))
    keys = runner.check_sources(index)
    assert dict(keys.items()) == want and list(keys) == recipes
    assert sorted(stats) == sorted({r.source for r in recipes})  # one stat per file, not per recipe
    r = recipes[0]
    assert keys.pop(r) == want[r] and r not in keys and len(keys) == len(recipes) - 1
    with pytest.raises(KeyError):
        keys[r]


def test_answers_and_plan_rows_are_committed_by_the_writer_thread_as_they_arrive(tmp_path: Path, monkeypatch) -> None:
    """During a run only the writer thread writes the store (SQLite's work beside the event loop), each answer is
    committed while the run goes on (not all at the end), and every answer and plan row is in the store after."""
    import threading

    ps = make_tiny_probeset(tmp_path / "data", n=8)
    writes: list[tuple[str, str, int]] = []
    seen_mid_run: list[int] = []
    put, plan_rows = RunStore.put_responses, RunStore.add_plan_rows

    def spy_put(self, items, **kw):
        writes.append(("answers", threading.current_thread().name, len(items)))
        return put(self, items, **kw)

    def spy_plan(self, *a, **kw):
        writes.append(("plan", threading.current_thread().name, sum(map(len, a))))
        return plan_rows(self, *a, **kw)

    monkeypatch.setattr(RunStore, "put_responses", spy_put)
    monkeypatch.setattr(RunStore, "add_plan_rows", spy_plan)
    path = tmp_path / "run.sqlite"

    async def go() -> None:
        async with FakeOpenAIServer(delay_ms=20) as srv:
            m = OpenAIChatModel("vlm", "fake-vlm", srv.base_url, max_concurrency=1)
            store = RunStore(path)

            async def watch() -> None:  # what another reader of the store sees while the run goes on
                import sqlite3

                while True:
                    await asyncio.sleep(0.05)
                    db = sqlite3.connect(path)
                    seen_mid_run.append(db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
                    db.close()

            w = asyncio.ensure_future(watch())
            try:
                await execute(store, plan_grounding([ps], OPTS), [m], Decoding(max_new_tokens=4), progress=False)
            finally:
                w.cancel()
            store.close()

    asyncio.run(go())
    names = {name for _, name, _ in writes}
    assert names == {"medvlm-store-writer"}, writes
    assert sum(n for kind, _, n in writes if kind == "answers") == 24
    assert any(0 < n < 24 for n in seen_mid_run), seen_mid_run  # answers were visible mid-run
    store = RunStore(path, readonly=True)
    assert store.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 24
    assert store.db.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 24


def test_first_images_are_rendered_before_the_render_processes_are_forked(tmp_path: Path, monkeypatch) -> None:
    """With worker processes, the first task (one source file) is rendered in a thread of the run's process, so
    its inputs are queued at once; the pool's processes are forked after it (in ~7 ms here instead of ~46 ms)."""
    from concurrent.futures import ProcessPoolExecutor

    events: list[str] = []

    class Recording(ProcessPoolExecutor):
        def submit(self, *a, **kw):
            events.append("pool submit")
            return super().submit(*a, **kw)

    rendered = runner._Feed.rendered

    def spy(self, recipes):
        events.append("rendered")
        return rendered(self, recipes)

    monkeypatch.setattr(runner, "ProcessPoolExecutor", Recording)
    monkeypatch.setattr(runner._Feed, "rendered", spy)
    ps = make_tiny_probeset(tmp_path / "data", n=12)

    async def go() -> None:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("vlm", "fake-vlm", srv.base_url, max_concurrency=2)
            store = RunStore(tmp_path / "run.sqlite")
            await execute(store, plan_grounding([ps], OPTS), [m], Decoding(max_new_tokens=4), progress=False,
                          render_in="processes")
            assert store.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 36
            store.close()

    asyncio.run(go())
    assert "pool submit" in events
    assert events.index("rendered") < events.index("pool submit"), events[:8]
