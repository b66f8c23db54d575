"""The stress suite's scorer: each answer through the option parser (:mod:`medvlm_audit.scorers.option`) into
``status`` / ``parsed`` (letter) / ``via`` and ``correct`` (refusals, abstentions and unparsed answers wrong)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.export import expand_payload
from medvlm_audit.scorers.option import ParsedOption, parse_option


def _options_tuple(v: Any) -> tuple[str, ...]:
    if isinstance(v, tuple):
        return v
    if isinstance(v, str):
        return tuple(json.loads(v))
    if isinstance(v, list):
        return tuple(v)
    if hasattr(v, "tolist"):
        return tuple(v.tolist())
    raise ValueError(f"options must be a list, got {type(v).__name__}")


def normalize_tidy(tidy: pd.DataFrame) -> pd.DataFrame:
    """Accept the runner's table (``case_id``, JSON ``payload``) or the planned-fields form; one shape out."""
    df = expand_payload(tidy)
    if "item_id" not in df.columns:
        if "case_id" not in df.columns:
            raise ValueError("the stress table needs an item_id (or case_id) column")
        df["item_id"] = df["case_id"]
    missing = [c for c in ("model", "condition", "answer_text", "options", "gold") if c not in df.columns]
    if missing:
        raise ValueError(f"the stress table lacks column(s) {missing}")
    if "sample_index" not in df.columns:
        df["sample_index"] = 0
    if "benchmark" not in df.columns:
        df["benchmark"] = "custom"
    df["options"] = [_options_tuple(o) for o in df["options"]]
    if "n_options" not in df.columns:
        df["n_options"] = [len(o) for o in df["options"]]
    if "required" not in df.columns:
        flagged = df["needs_image"].fillna(False).astype(bool) if "needs_image" in df.columns else None
        df["required"] = flagged if flagged is not None and flagged.any() else True
    df["required"] = df["required"].fillna(False).astype(bool)
    return df


def score_stress(tidy: pd.DataFrame, *, refusal_as_wrong: bool = True) -> pd.DataFrame:
    """Add ``status``, ``parsed`` (letter), ``via``, ``correct`` (1/0 for every trial with a response: refusals,
    abstentions and unparsed answers are 0; NaN only without a response) and ``correct_parsed`` (1/0 only where
    an option was chosen)."""
    df = normalize_tidy(tidy)
    memo: dict[tuple[Any, tuple[str, ...]], ParsedOption] = {}
    status, letter, via = [], [], []
    for text, opts in zip(df["answer_text"].tolist(), df["options"].tolist(), strict=True):
        t = None if text is None or (isinstance(text, float) and math.isnan(text)) else text
        key = (t, opts)
        p = memo.get(key)
        if p is None:
            p = parse_option(t, opts)
            memo[key] = p
        status.append(p.status)
        letter.append(p.letter)
        via.append(p.via)
    df["status"] = status
    df["parsed"] = letter
    df["via"] = via
    st = df["status"].to_numpy()
    hit = (df["parsed"].to_numpy() == df["gold"].to_numpy()) & (st == "answer")
    correct = np.where(st == "answer", hit.astype(float), np.nan)
    df["correct_parsed"] = correct
    correct = np.where((st == "abstain") | (st == "unparsed"), 0.0, correct)
    if refusal_as_wrong:
        correct = np.where(st == "refusal", 0.0, correct)
    df["correct"] = correct
    return df


