"""Bounded memory at any run size: the render workers stay only a few batches ahead of a slow model, and an
encoded image is dropped once the last input that needs it was handed to its model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import make_tiny_probeset

from medvlm_audit import runner
from medvlm_audit.models.base import Model, ModelInput, Response
from medvlm_audit.runner import execute
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding

OPTS = GroundingOptions(conditions=("original", "target_mask", "irrelevant_mask", "no_image"))


def _encode(px: np.ndarray) -> bytes:
    return b"img:" + px.tobytes()[:64]


class SlowEncodedModel(Model):
    """An HTTP-like model: takes the bytes its encoder made (primed), answers slowly, one input per call."""

    name = "slow"
    modality = "multimodal"
    batch_size = 1
    max_concurrency = 2

    def __init__(self) -> None:
        self.primed: dict[str, bytes] = {}
        self.asked = 0

    def image_encoder(self):
        return _encode

    def prime_image(self, sha256: str, encoded: bytes) -> None:
        self.primed[sha256] = encoded

    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        await asyncio.sleep(0.002)
        out = []
        for inp in inputs:
            self.asked += 1
            for im in inp.images:  # every image arrives encoded by a render worker, none rendered here
                assert im.sha256 in self.primed
            out.append(Response("Yes"))
        return out


@pytest.mark.slow
def test_rendering_waits_for_the_model_and_encoded_images_are_released(tmp_path: Path, monkeypatch) -> None:
    ps = make_tiny_probeset(tmp_path / "data", n=120)
    held: list[int] = []
    queued: list[int] = []
    real_put = runner._Encoded.put
    real_queued = runner._Room.queued

    def put(self, r, encoded):
        real_put(self, r, encoded)
        held.append(len(self.data))

    def on_queued(self, qi, n=1):
        real_queued(self, qi, n)
        queued.append(self.waiting[qi])

    monkeypatch.setattr(runner._Encoded, "put", put)
    monkeypatch.setattr(runner._Room, "queued", on_queued)
    made: list[runner._Feed] = []
    real_feed = runner._Feed

    def feed(*a, **k):
        made.append(real_feed(*a, **k))
        return made[-1]

    monkeypatch.setattr(runner, "_Feed", feed)
    m = SlowEncodedModel()
    plan = plan_grounding([ps], OPTS)
    s = asyncio.run(execute(RunStore(tmp_path / "run.sqlite"), plan, [m], progress=False, workers=1,
                            render_in="threads"))
    n_images = 3 * 120  # original, target mask, irrelevant mask of each case (swap is not asked here)
    assert s.per_model["slow"]["asked"] == m.asked == n_images + 1  # + one no_image question
    cap = made[0].room.caps[0]
    assert cap == 64
    # a render task is 8 source files (3 images each), two tasks in flight: the backlog never passes
    # cap + what the in-flight tasks bring, far below the run's size
    assert max(queued) <= cap + 2 * 8 * 3
    assert max(held) <= cap + 2 * 8 * 3 < n_images
    assert made[0].encoded.data == {} and not made[0].encoded.uses  # every encoded image was released


@pytest.mark.slow
def test_without_backpressure_the_bound_would_fail(tmp_path: Path, monkeypatch) -> None:
    """The check above can fail: with the room always free, the renderer runs ahead of the slow model."""
    ps = make_tiny_probeset(tmp_path / "data", n=120)
    held: list[int] = []
    real_put = runner._Encoded.put

    def put(self, r, encoded):
        real_put(self, r, encoded)
        held.append(len(self.data))

    monkeypatch.setattr(runner._Encoded, "put", put)
    monkeypatch.setattr(runner._Room, "free", lambda self: True)
    m = SlowEncodedModel()
    asyncio.run(execute(RunStore(tmp_path / "run.sqlite"), plan_grounding([ps], OPTS), [m], progress=False,
                        workers=1, render_in="threads"))
    assert max(held) > 64 + 2 * 8 * 3


def test_a_resumed_run_rechecks_only_new_or_changed_source_files(tmp_path: Path, monkeypatch) -> None:
    """Source checks are cached by (path, size, mtime) through the store's image hashes."""
    import os

    ps = make_tiny_probeset(tmp_path / "data", n=6)
    calls: list[str] = []
    real = runner.check_image_header
    monkeypatch.setattr(runner, "check_image_header", lambda p: (calls.append(str(p)), real(p))[1])
    store = RunStore(tmp_path / "run.sqlite")
    opts = GroundingOptions(conditions=("original", "target_mask"))
    asyncio.run(execute(store, plan_grounding([ps], opts), [SlowEncodedModel()], progress=False, workers=1))
    assert len(calls) == 6  # every source checked once on the first invocation
    calls.clear()
    asyncio.run(execute(store, plan_grounding([ps], opts), [SlowEncodedModel()], progress=False, workers=1))
    assert calls == []  # nothing changed: no file read again
    changed = tmp_path / "data" / "images" / "img002.png"
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    asyncio.run(execute(store, plan_grounding([ps], opts), [SlowEncodedModel()], progress=False, workers=1))
    assert calls == [str(changed.resolve())] or [os.path.basename(c) for c in calls] == ["img002.png"]


def test_an_image_of_a_multi_image_trial_is_kept_until_that_trial_is_keyed() -> None:
    """A trial with two images is keyed only when both are rendered; the first image's bytes must still be
    there then (else the model would render it again on the event loop)."""
    from medvlm_audit.images import ImageRecipe
    from medvlm_audit.suites.base import Trial

    a, b, c = (ImageRecipe(f"{x}.png") for x in "abc")
    single = Trial("ps", "c1", "original", (), (a,), 0)
    double = Trial("ps", "c2", "pair", (), (a, b), 0)
    enc = runner._Encoded()
    enc.need.update(r for t in (single, double) if len(t.images) > 1 for r in dict.fromkeys(t.images))
    enc.put(a, (b"A",))
    enc.put(c, (b"C",))
    enc.want((a,), 0)  # the single-image trial is keyed and queued when a is rendered
    enc.admitted([single], 1)
    enc.unwanted((a, c), 1)
    assert (c, 0) not in enc.data  # nobody needs c: dropped at once
    assert enc.take(a, 0) == b"A"
    assert enc.data[(a, 0)] == b"A"  # kept: the two-image trial still needs a
    enc.put(b, (b"B",))
    enc.want((a, b), 0)
    enc.admitted([double], 1)
    assert enc.take(a, 0) == b"A" and enc.take(b, 0) == b"B"
    assert enc.data == {} and not enc.uses and not enc.need


def test_key_templates_stay_bounded_when_every_prompt_differs() -> None:
    """A judge stage has one distinct prompt per trial: the per-prompt key templates must not grow with the run."""
    from medvlm_audit.models.base import Decoding, Message
    from medvlm_audit.suites.base import Trial

    w = runner.ModelWork(SlowEncodedModel(), Decoding(), set())
    trials = [Trial("ps", f"c{i}", "judge", (Message("user", f"judge this CoT number {i}"),), (), 0)
              for i in range(5000)]
    rows, requests, new = w.admit(trials, {})
    assert len(rows) == len(requests) == len(new) == 5000
    assert len(w._templates) <= 4096


def test_a_local_model_s_pixels_are_dropped_after_their_last_use(tmp_path: Path, monkeypatch) -> None:
    """A model that takes pixels (a local model): the pixel cache holds only what queued inputs still need."""
    from conftest import BrightSpotModel

    from medvlm_audit.images import PixelCache

    made: list[PixelCache] = []
    sizes: list[int] = []

    class Recording(PixelCache):
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            made.append(self)

        def put(self, key, arr) -> None:
            super().put(key, arr)
            sizes.append(len(self._lru))

    monkeypatch.setattr(runner, "PixelCache", Recording)
    ps = make_tiny_probeset(tmp_path / "data", n=120)
    m = BrightSpotModel()
    s = asyncio.run(execute(RunStore(tmp_path / "run.sqlite"), plan_grounding([ps], OPTS), [m], progress=False,
                            workers=1, render_in="threads"))
    assert s.per_model["bright-spot"]["asked"] == m.calls == 3 * 120 + 1
    assert max(sizes) <= 64 + 2 * 8 * 3 < 3 * 120  # cap + two render tasks, far below the run's images
    assert len(made[0]._lru) == 0  # every image dropped after its use
