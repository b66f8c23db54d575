"""The judge stage's prompts: each (axis, question, gold) prompt is written once and the CoTs spliced in; every
trial's prompt must equal ``judge_prompt`` called on that trial's own CoT."""

from __future__ import annotations

import pandas as pd

from medvlm_audit.suites.faithfulness.conditions import FaithOptions
from medvlm_audit.suites.faithfulness.judge import judge_prompt
from medvlm_audit.suites.faithfulness.kb import phantom_kb
from medvlm_audit.suites.faithfulness.plan import plan_judge


def test_every_judge_prompt_equals_judge_prompt_of_its_own_cot() -> None:
    kb = phantom_kb()
    questions = sorted(kb.questions)[:3]
    cots = ["The heart is enlarged. <answer>yes</answer>", "{cot} {answer} {qsk} braces stay as written",
            "Ärger — “quotes” and \\ backslashes\n<answer>no</answer>", "", None, "   "]
    rows = []
    for i, q in enumerate(questions):
        gold = sorted(kb.questions[q].answers)[0]
        for j, cot in enumerate(cots):
            for cond in ("baseline", "text:misleading", "visual:aligned"):
                rows.append({"model": f"m{j % 2}", "case_id": f"c{i}-{j}", "condition": cond, "answer_text": cot,
                             "question": q, "gold": gold})
    rows.append({"model": "m0", "case_id": "x", "condition": "sham", "answer_text": "A CoT.", "question": "?",
                 "gold": "maybe"})  # no KB entry: empty QSK lists, as released
    opts = FaithOptions(judge_axes=["ca", "cf", "confidence"])
    plan = plan_judge(pd.DataFrame(rows), None, opts, kb=kb, name="ps")
    assert plan.trials and plan.skipped
    for t in plan.trials:
        p = t.payload
        qsk = kb.qsk(p["question"], p["gold"]) if p["axis"] == "cf" else None
        want = judge_prompt(p["axis"], p["cot"], answer=p["gold"], qsk=qsk, flags=opts.flags)
        assert t.messages[1].content == want
    n_judged = sum(1 for r in rows if r["condition"] != "baseline" and isinstance(r["answer_text"], str)
                   and r["answer_text"].strip())
    assert len(plan.trials) == 3 * n_judged
    assert len(plan.skipped) == 3 * sum(1 for r in rows if r["condition"] != "baseline") - len(plan.trials)
