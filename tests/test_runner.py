"""Runner and run store: dedup by content key, resume, skipped conditions, errors recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from conftest import BrightSpotModel, PromptLengthModel

from medvlm_audit.models.base import LocalModel, TextOnly
from medvlm_audit.runner import execute
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
from medvlm_audit.suites.grounding.suite import (
    tidy_grounding as tidy,  # these stores are grounding runs made by the runner alone
)


def run(store, plan, models, **kw):
    return asyncio.run(execute(store, plan, models, progress=False, **kw))


def test_text_only_model_is_asked_once_per_question(tmp_path: Path, tiny_probeset) -> None:
    plan = plan_grounding([tiny_probeset], GroundingOptions())
    text = PromptLengthModel()
    store = RunStore(tmp_path / "run" / "run.sqlite")
    summary = run(store, plan, [BrightSpotModel(), text])
    # one distinct question ("Is lung nodule present...") for all 12 cases x 5 conditions
    assert text.calls == 1
    assert summary.per_model["prompt-only"]["trials"] == 12 * 5
    assert summary.per_model["prompt-only"]["distinct_inputs"] == 1
    df = tidy(store)
    t = df[df.model == "prompt-only"]
    assert (t.answer_text == "Yes").all() and t.key.nunique() == 1


def test_rerun_asks_nothing_and_resume_fills_gaps(tmp_path: Path, tiny_probeset) -> None:
    plan = plan_grounding([tiny_probeset], GroundingOptions())
    store = RunStore(tmp_path / "run.sqlite")
    m = BrightSpotModel()
    run(store, plan, [m])
    first = m.calls
    assert first == store.counts()["responses"]
    m2 = BrightSpotModel()
    run(store, plan, [m2])
    assert m2.calls == 0
    # delete some answers: a resume asks exactly those again
    store.db.execute("DELETE FROM responses WHERE rowid IN (SELECT rowid FROM responses LIMIT 7)")
    m3 = BrightSpotModel()
    run(store, plan, [m3])
    assert m3.calls == 7


def test_masks_change_pixels_and_answers(tmp_path: Path, tiny_probeset) -> None:
    store = RunStore(tmp_path / "run.sqlite")
    run(store, plan_grounding([tiny_probeset], GroundingOptions()), [BrightSpotModel()])
    df = tidy(store)
    orig = df[df.condition == "original"].set_index("case_id")
    tm = df[df.condition == "target_mask"].set_index("case_id")
    im = df[df.condition == "irrelevant_mask"].set_index("case_id")
    assert (orig.image_sha256 != tm.image_sha256).all()
    pos = orig.index[orig.label == 1]
    assert (orig.loc[pos, "parsed"] == 1).all()
    assert (tm.loc[pos, "parsed"] == 0).all()  # masking the bright box removes the evidence
    assert (im.loc[pos, "parsed"] == 1).all()  # masking a corner does not
    no_img = df[df.condition == "no_image"]
    assert (no_img.parsed == -1).all() and no_img.correct.isna().all()
    assert set(df.columns) >= {"parsed", "confidence", "correct", "latency_s", "error_kind"}
    conf = orig.loc[pos, "confidence"].to_numpy()
    assert np.all(conf > 0.5)


def test_skipped_conditions_are_counted_not_faked(tmp_path: Path, tiny_probeset) -> None:
    df = tiny_probeset.df.copy()
    df.loc[0, "swap_image_path"] = None
    for c in ("tbox_x0", "tbox_y0", "tbox_x1", "tbox_y1"):
        df.loc[1, c] = None
    from medvlm_audit.suites.grounding.probeset import ProbeSet

    ps = ProbeSet(df, tiny_probeset.image_root, name="tiny2")
    plan = plan_grounding([ps], GroundingOptions())
    reasons = {(s.case_id, s.condition): s.reason for s in plan.skipped}
    assert reasons == {("c000", "swap"): "no swap partner", ("c001", "target_mask"): "no target box"}
    store = RunStore(tmp_path / "run.sqlite")
    run(store, plan, [BrightSpotModel()])
    assert store.counts()["skipped"] == 2
    assert len(tidy(store)) == 12 * 5 - 2


class Exploding(LocalModel):
    name = "exploding"

    def predict(self, inputs):
        raise RuntimeError("out of memory")


def test_model_exceptions_are_recorded_per_input_and_retried_on_request(tmp_path: Path, tiny_probeset) -> None:
    plan = plan_grounding([tiny_probeset], GroundingOptions(conditions=("original",)))
    store = RunStore(tmp_path / "run.sqlite")
    run(store, plan, [Exploding()])
    df = tidy(store)
    assert (df.error_kind == "model").all() and df.error_message.str.contains("out of memory").all()
    m = BrightSpotModel()
    m.name = "exploding"  # same name; different identity -> new keys; use retry to re-ask errored keys
    run(store, plan, [m], retry_errors=True)
    assert m.calls == 12


class Flaky(LocalModel):
    """One model identity (same backend class and name in every instance) that fails on some inputs while
    ``failing`` is set: about half the images (by pixel hash), as error responses or as a raised exception."""

    name = "flaky"

    def __init__(self, failing: bool, mode: str = "error_response") -> None:
        self.failing, self.mode = failing, mode
        self.batch_size = 1 if mode == "raise" else 16  # a raise fails the whole batch
        self.seen: list[str] = []

    @staticmethod
    def bad(inp) -> bool:
        return inp.images[0].sha256[0] in "01234567"

    def predict(self, inputs):
        self.seen += [i.images[0].sha256 for i in inputs]
        if self.failing and self.mode == "raise" and any(self.bad(i) for i in inputs):
            raise RuntimeError("CUDA error: device-side assert")
        from medvlm_audit.models.base import ErrorInfo, Response

        return [Response(None, error=ErrorInfo("http_5xx", "503 busy", transient=True))
                if self.failing and self.bad(i) else Response("Yes") for i in inputs]


@pytest.mark.parametrize("mode", ["error_response", "raise"])
def test_retry_errors_reasks_exactly_the_errored_inputs_of_the_same_model(tmp_path: Path, tiny_probeset,
                                                                          mode: str) -> None:
    plan = plan_grounding([tiny_probeset], GroundingOptions(conditions=("original", "target_mask")))
    store = RunStore(tmp_path / "run.sqlite")
    first = Flaky(failing=True, mode=mode)
    run(store, plan, [first])
    df = tidy(store)
    errored = set(df.loc[df.error_kind.notna(), "image_sha256"])
    ok = set(df.loc[df.error_kind.isna(), "image_sha256"])
    assert errored and ok  # some inputs failed, some did not
    assert len(first.seen) == len(errored) + len(ok)
    kept = dict(store.db.execute("SELECT key, created_at FROM responses WHERE error_kind IS NULL").fetchall())
    # the same model again (now healthy), no flag: errored answers count as answered, nothing is asked
    again = Flaky(failing=False)
    run(store, plan, [again])
    assert again.seen == []
    # with retry_errors: exactly the errored inputs are asked, once each; good answers are left alone
    retry = Flaky(failing=False)
    run(store, plan, [retry], retry_errors=True)
    assert sorted(retry.seen) == sorted(errored)
    df = tidy(store)
    assert df.error_kind.isna().all() and (df.answer_text == "Yes").all() and len(df) == len(errored) + len(ok)
    after = dict(store.db.execute("SELECT key, created_at FROM responses").fetchall())
    assert {k: after[k] for k in kept} == kept
    # nothing errored any more: another retry asks nothing
    last = Flaky(failing=False)
    run(store, plan, [last], retry_errors=True)
    assert last.seen == []


def test_text_only_wrapper_drops_images(tmp_path: Path, tiny_probeset) -> None:
    inner = BrightSpotModel()
    wrapped = TextOnly(inner, name="bright-text")
    store = RunStore(tmp_path / "run.sqlite")
    run(store, plan_grounding([tiny_probeset], GroundingOptions()), [wrapped])
    df = tidy(store)
    assert df.image_sha256.isna().all()
    assert inner.calls == 1
    assert (df.answer_text == "I cannot tell without an image.").all()


def test_corrupt_image_fails_before_any_model_call(tmp_path: Path, tiny_probeset) -> None:
    (tiny_probeset.image_root / "images" / "img003.png").write_bytes(b"not a png")
    m = BrightSpotModel()
    store = RunStore(tmp_path / "run.sqlite")
    from medvlm_audit.errors import ImageError

    with pytest.raises(ImageError, match=r"case .c00[13]. .*img003.png cannot be decoded"):
        run(store, plan_grounding([tiny_probeset], GroundingOptions()), [m])
    assert m.calls == 0 and store.counts()["responses"] == 0


def test_two_probe_sets_in_one_run_for_cross_dataset_analysis(tmp_path: Path) -> None:
    from conftest import make_tiny_probeset

    from medvlm_audit.suites.grounding.probeset import ProbeSet

    a = make_tiny_probeset(tmp_path / "a", n=8)
    b0 = make_tiny_probeset(tmp_path / "b", n=6, seed=1)
    b = ProbeSet(b0.df, b0.image_root, name="tiny-b")
    store = RunStore(tmp_path / "run.sqlite")
    run(store, plan_grounding([a, b], GroundingOptions(conditions=("original", "swap"))), [BrightSpotModel()])
    df = tidy(store)
    assert df.groupby("probe_set").case_id.nunique().to_dict() == {"tiny": 8, "tiny-b": 6}


def test_per_model_decoding_override(tmp_path: Path, tiny_probeset) -> None:
    """A model entry's own decoding (e.g. a reasoning model's longer budget) reaches only that model's inputs."""
    import json

    from medvlm_audit import api

    cfg = {"suite": "grounding", "probe_sets": [str(tiny_probeset.image_root / "probeset")], "run_dir": str(tmp_path / "r"),
           "conditions": ["original"],
           "models": [{"name": "bright-spot", "backend": "openai", "model": "x", "base_urls": "http://x"},
                      {"name": "prompt-only", "backend": "openai", "model": "y", "base_urls": "http://y",
                       "decoding": {"max_new_tokens": 2048}}]}
    api.run(cfg, models=[BrightSpotModel(), PromptLengthModel()], progress=False)
    store = RunStore(tmp_path / "r" / "run.sqlite")
    budgets = {m: json.loads(i)["decoding"]["max_new_tokens"] for m, i in store.db.execute("SELECT model, input FROM requests")}
    assert budgets == {"bright-spot": 16, "prompt-only": 2048}
