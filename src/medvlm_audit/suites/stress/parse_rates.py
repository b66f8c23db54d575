"""The stress run's console warnings (models not assessable somewhere) from the exported table's columns, without
pandas: what ``run`` prints after a stress run, so that its path imports no pandas (issue 23). The same lines as
:func:`medvlm_audit.suites.stress.analysis.parse_rate_lines` on the scored table (tests/test_lean_run_path.py
checks them against it): its rule and denominators (:func:`~medvlm_audit.suites.stress.analysis.parse_rates`),
computed from per-(model, condition) status counts instead of the analysis's cube."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from medvlm_audit.health import ASSESSABLE_PARSE_RATE  # the floor every suite shares (DESIGN.md)

#: the word every not-assessable row, note and verdict of the stress suite starts with
NOT_ASSESSABLE = "not assessable"
_RESPONDED = ("answer", "abstain", "refusal", "unparsed")
#: what the cube needs of the table (a KeyError there: no lines)
NEEDED = ("model", "condition", "item_id", "sample_index", "status", "benchmark", "required", "n_options")


def _text_only(condition: str) -> bool:
    return condition == "no_image" or condition.endswith("+no_image")


def _where(condition: str, rate: float, responded: int, trials: int) -> str:
    n = f"n = {responded} response{'s' if responded != 1 else ''}" + (
        f" of {trials} trials" if trials != responded else "")
    return f"{100 * rate:.1f}% under {condition}, {n}"


def parse_rate_lines_of(cols: Mapping[str, Sequence[Any]]) -> list[str] | None:
    """:func:`~medvlm_audit.suites.stress.analysis.parse_rate_lines` of a scored stress table given as column
    lists; None where the analysis would raise (a column missing, a trial twice: ``run`` then prints nothing)."""
    if any(c not in cols for c in NEEDED):
        return None
    n = len(cols["status"])
    if n == 0:
        return []
    model = [str(v) for v in cols["model"]]
    cond = [str(v) for v in cols["condition"]]
    seen: set[tuple[Any, ...]] = set()
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for i in range(n):
        key = (model[i], cond[i], str(cols["item_id"][i]), cols["sample_index"][i])
        if key in seen:
            return None
        seen.add(key)
        c = counts.setdefault((model[i], cond[i]), {"_trials": 0})
        c["_trials"] += 1
        st = cols["status"][i]
        c[st] = c.get(st, 0) + 1
    models, conditions = sorted(set(model)), sorted(set(cond))
    lines = []
    for m in models:
        rate, opt, raw, responded, trials = {}, {}, {}, {}, {}
        for k in conditions:
            c = counts.get((m, k), {})
            resp = sum(c.get(s, 0) for s in _RESPONDED)
            parsed = c.get("answer", 0) + c.get("abstain", 0) + (c.get("refusal", 0) if _text_only(k) else 0)
            raw[k] = parsed / resp if resp > 0 else math.nan
            opt[k] = c.get("answer", 0) / resp if resp > 0 else math.nan
            responded[k], trials[k] = resp, c.get("_trials", 0)
        finite = [v for v in opt.values() if not math.isnan(v)]
        no_usable = bool(finite) and max(finite) < ASSESSABLE_PARSE_RATE
        rate = dict(opt) if no_usable else dict(raw)
        low = [k for k in conditions if rate[k] < ASSESSABLE_PARSE_RATE]
        if not low:
            continue

        each = "; ".join(_where(k, rate[k], responded[k], trials[k]) for k in low)
        if no_usable and max(0.0 if math.isnan(v) else v for v in raw.values()) >= ASSESSABLE_PARSE_RATE:
            lines.append(f"warning: model {m!r} has no usable answer (an option chosen in "
                         f"{100 * max(finite):.1f}% of the responses under every condition; refusals, "
                         f"abstentions and unparsed answers choose none; {each}): {NOT_ASSESSABLE}")
        else:
            lines.append(f"warning: model {m!r} has a parse rate below {100 * ASSESSABLE_PARSE_RATE:g}% "
                         f"({each}): {NOT_ASSESSABLE} there")
    return lines
