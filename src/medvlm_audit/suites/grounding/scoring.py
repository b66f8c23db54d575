"""Scoring a grounding run's answers: yes / no parsed, P(yes) from the top log-probabilities, correctness
against the case's label (imported results' own parse and confidence win where present)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from medvlm_audit.scorers.yesno import UNPARSED, p_yes, parse_yes_no_each


def score_grounding(tidy: pd.DataFrame) -> pd.DataFrame:
    """Parse yes/no, compute P(yes), and correctness (NaN when unparsed or errored)."""
    out = tidy.copy()
    parsed = np.array(parse_yes_no_each(out["answer_text"].tolist()), dtype=np.int8)
    if "imported_parsed" in out:
        imp = out["imported_parsed"].to_numpy()
        has = ~pd.isna(imp)
        parsed[has] = imp[has].astype(np.int8)
    out["parsed"] = parsed
    conf = np.array([p_yes(tl) for tl in out["top_logprobs"]], dtype=float)
    if "imported_confidence" in out:
        ic = out["imported_confidence"].to_numpy(dtype=float)
        conf = np.where(out["imported_parsed"].notna(), ic, conf)
    out["confidence"] = conf
    label = pd.to_numeric(out["label"], errors="coerce").to_numpy(dtype=float)
    ok = parsed != UNPARSED
    out["correct"] = np.where(ok & ~np.isnan(label), (parsed == label).astype(float), np.nan)
    return out
