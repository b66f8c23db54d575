"""A text-only baseline wrapping a served model reuses that model's byte-identical no_image requests (issue 12,
item 24): identical requests are asked once, keys stay distinct wherever the inputs differ."""

from __future__ import annotations

import asyncio
from pathlib import Path

from medvlm_audit.config import ModelSpec
from medvlm_audit.models.registry import load_model
from medvlm_audit.runner import execute
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
from medvlm_audit.suites.grounding.suite import (
    tidy_grounding as tidy,  # these stores are grounding runs made by the runner alone
)
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


def test_text_only_wrapper_reuses_the_served_models_no_image_requests(tmp_path: Path, tiny_probeset) -> None:
    conditions = ("original", "target_mask", "no_image")
    plan = plan_grounding([tiny_probeset], GroundingOptions(conditions=conditions))
    with ThreadedFakeServer() as srv:
        base = {"backend": "openai", "model": "fake-vlm", "base_urls": [srv.base_url]}
        vlm = load_model(ModelSpec(name="vlm", **base))
        blind = load_model(ModelSpec(name="vlm-text", text_only=True, **base))
        assert blind.identity() == vlm.identity()  # the image is dropped before keying
        store = RunStore(tmp_path / "run.sqlite")
        asyncio.run(execute(store, plan, [vlm, blind], progress=False))
        n_cases = len(tiny_probeset.df)
        # vlm: every case under original and target_mask (distinct pixels) + its one no_image question;
        # the text-only wrapper asks that same no_image question, so nothing more reaches the server
        df = tidy(store)
        v, t = df[df.model == "vlm"], df[df.model == "vlm-text"]
        n_distinct_vlm = v.key.nunique()
        assert n_distinct_vlm == 2 * n_cases + 1
        assert srv.stats.total == n_distinct_vlm
        assert t.key.nunique() == 1
        no_image_key = v.loc[v.condition == "no_image", "key"].unique()
        assert list(no_image_key) == list(t.key.unique())
        # where the inputs differ the keys differ: the wrapper's "original" trial has no image, vlm's has one
        assert set(v.loc[v.condition == "original", "key"]).isdisjoint(set(t.key))
        assert t.answer_text.notna().all() and len(t) == len(conditions) * n_cases
        # a second run of both asks nothing
        asyncio.run(execute(store, plan, [vlm, blind], progress=False))
        assert srv.stats.total == n_distinct_vlm
        store.close()
