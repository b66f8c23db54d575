"""Stress conditions: deterministic seeded transforms, gold re-lettering, distractor pools, the plan."""

from __future__ import annotations

import hashlib
import json
import random

from medvlm_audit.suites.stress.conditions import (
    CONDITIONS,
    StressOptions,
    apply_condition,
    benchmark_pools,
    plan_stress,
)
from medvlm_audit.suites.stress.items import LETTERS, ItemSet, MCQItem, norm_option
from medvlm_audit.suites.stress.prompts import options_from_prompt


def make_items(n: int = 40) -> list[MCQItem]:
    rng = random.Random(5)
    vocab = [f"Disease {i}" for i in range(60)]
    out = []
    for i in range(n):
        opts = rng.sample(vocab, 5)
        sub = i % 4 == 0
        out.append(MCQItem(f"i{i:03d}", f"Case {i}: diagnosis?", tuple(opts), i % 5, (f"/x/{i}.png",),
                           needs_image=i % 2 == 0, substitute_image=f"/x/{i}s.png" if sub else None,
                           substitute_answer=(i + 1) % 5 if sub else None, benchmark="b1" if i < 30 else "b2"))
    return out


def digest(plan) -> str:
    h = hashlib.sha256()
    for t in plan.trials:
        h.update(json.dumps([t.case_id, t.condition, t.sample_index, [m.content for m in t.messages],
                             [r.source for r in t.images], t.payload], sort_keys=True).encode())
    return h.hexdigest()


def test_plan_is_byte_identical_for_the_same_seed_and_any_input_order() -> None:
    items = make_items()
    opts = StressOptions(repeats=2, check_files=False)
    a = plan_stress(ItemSet(items), opts)
    b = plan_stress(ItemSet(items), opts)
    shuffled = items[::-1]
    c = plan_stress(ItemSet(shuffled), opts)
    assert digest(a) == digest(b)
    key = lambda t: (t.case_id, t.condition, t.sample_index)
    assert sorted((key(t), json.dumps(t.payload, sort_keys=True)) for t in a.trials) == \
        sorted((key(t), json.dumps(t.payload, sort_keys=True)) for t in c.trials)
    d = plan_stress(ItemSet(items), StressOptions(repeats=2, check_files=False, seed=7))
    assert digest(a) != digest(d)


def test_reordering_relabels_gold_and_keeps_every_option_text() -> None:
    n_moved = 0
    for it in make_items():
        s = apply_condition(it, CONDITIONS["reordered"], seed=42)
        assert sorted(s.options) == sorted(it.options)
        assert s.options[s.answer] == it.gold_text
        assert s.options != it.options  # never the identity permutation
        assert [it.options[i] for i in s.transform["permutation"]] == list(s.options)
        n_moved += s.answer != it.answer
    assert n_moved > 20


def test_two_option_item_is_swapped() -> None:
    it = MCQItem("yn", "Is it?", ("Yes", "No"), 0, ("/a.png",))
    s = apply_condition(it, CONDITIONS["reordered"], seed=42)
    assert s.options == ("No", "Yes") and s.answer == 1


def test_distractor_replacement_rules() -> None:
    items = make_items()
    pools = benchmark_pools(items)
    other_b1 = {norm_option(o) for it in items if it.benchmark == "b1" for o in it.options}
    for it in items:
        prev = None
        for k in range(1, 5):
            s = apply_condition(it, CONDITIONS[f"replaced:{k}"], seed=42, pool=pools[it.benchmark],
                                t4_variant="in_place")
            assert s.answer == it.answer and s.options[s.answer] == it.gold_text
            assert len({norm_option(o) for o in s.options}) == 5  # never a duplicate
            new = [o for o in s.options if o not in it.options]
            assert len(new) == k and len(s.transform["replaced"]) == k
            assert LETTERS[it.answer] not in s.transform["replaced"]  # never the gold
            if it.benchmark == "b1":
                assert all(norm_option(o) in other_b1 for o in new)  # drawn from the same benchmark
            if prev is not None:  # nested levels: k keeps k-1's replacements
                assert all(s.transform["replaced"][p] == t for p, t in prev.items())
            prev = s.transform["replaced"]


def test_t4_replace_then_reorder_is_the_default_and_in_place_is_offered() -> None:
    """The paper's T4 ("its label (e.g., 'B') may shift due to shuffling"; the authors' files are
    replace-then-reorder): the same replacements as in place, then shown in T3's permutation of the item."""
    items = make_items()
    pools = benchmark_pools(items)
    n_moved = 0
    for it in items:
        t3 = apply_condition(it, CONDITIONS["reordered"], seed=42)
        for k in range(1, 5):
            cond = CONDITIONS[f"replaced:{k}"]
            inp = apply_condition(it, cond, seed=42, pool=pools[it.benchmark], t4_variant="in_place")
            default = apply_condition(it, cond, seed=42, pool=pools[it.benchmark])
            rr = apply_condition(it, cond, seed=42, pool=pools[it.benchmark], t4_variant="replace_then_reorder")
            assert default == rr and rr.transform["t4_variant"] == "replace_then_reorder"
            assert inp.transform["t4_variant"] == "in_place" and "permutation" not in inp.transform
            perm = rr.transform["permutation"]
            assert perm == t3.transform["permutation"]  # T3's order: replaced:0 would be the reordered set
            assert list(rr.options) == [inp.options[i] for i in perm]
            assert rr.options[rr.answer] == it.gold_text and rr.answer == t3.answer
            assert rr.transform["replaced"] == inp.transform["replaced"]  # same replacements, same nesting
            n_moved += rr.answer != it.answer
    assert n_moved > 40
    # 'Unknown' stays in place in both variants
    it = items[0]
    assert apply_condition(it, CONDITIONS["unknown"], seed=42, t4_variant="replace_then_reorder") == \
        apply_condition(it, CONDITIONS["unknown"], seed=42, t4_variant="in_place")
    # the plan records the variant in every T4 trial's payload and in its source provenance
    for variant in ("in_place", "replace_then_reorder"):
        plan = plan_stress(ItemSet(items), StressOptions(check_files=False, t4_variant=variant))
        t4 = [t for t in plan.trials if t.condition.startswith("replaced:")]
        assert t4 and all(t.payload["t4_variant"] == variant for t in t4)
        assert all(t.payload["t4_variant"] is None for t in plan.trials if not t.condition.startswith("replaced:"))
        assert plan.sources[0].provenance["t4_variant"] == variant


def test_unknown_and_substitution() -> None:
    it = make_items()[0]
    u = apply_condition(it, CONDITIONS["unknown"], seed=42)
    assert u.options.count("Unknown") == 1 and u.options[u.answer] == it.gold_text
    s = apply_condition(it, CONDITIONS["substitution"], seed=42)
    assert s.images == (it.substitute_image,) and s.answer == it.substitute_answer
    assert apply_condition(make_items()[1], CONDITIONS["substitution"], seed=42) == "has no substitute image"
    t = apply_condition(it, CONDITIONS["no_image"], seed=42)
    assert t.images == () and t.options == it.options


def test_too_small_pool_is_an_explicit_exclusion() -> None:
    items = [MCQItem("a", "Q?", ("x", "y", "z"), 0, ("/a.png",)), MCQItem("b", "Q?", ("x", "y", "w"), 0, ("/b.png",))]
    plan = plan_stress(ItemSet(items), StressOptions(conditions=("replaced:2",), check_files=False))
    assert not plan.trials
    assert all("too few options" in s.reason for s in plan.skipped)


def test_plan_subsets_payload_and_prompt() -> None:
    items = make_items()
    plan = plan_stress(ItemSet(items), StressOptions(repeats=3, check_files=False))
    by = {}
    for t in plan.trials:
        by.setdefault(t.condition, set()).add(t.case_id)
        q, opts = options_from_prompt(t.messages[-1].content)
        assert opts == t.payload["options"] and q.startswith("Case")
        assert "<answer></answer>" in t.messages[-1].content and t.messages[0].role == "system"
        assert (len(t.images) > 0) == t.payload["with_image"]
    req = {it.item_id for it in items if it.needs_image}
    assert by["original"] == by["no_image"] == by["cot"] == {it.item_id for it in items}
    assert by["reordered+no_image"] == by["replaced:4"] == req
    assert by["substitution"] == {it.item_id for it in items if it.substitute_image}
    assert len([t for t in plan.trials if t.condition == "original"]) == 3 * len(items)
    assert "step by step" in next(t for t in plan.trials if t.condition == "cot").messages[-1].content


def test_default_prompts_are_the_authors_released_prompts_verbatim() -> None:
    """Issue 12 item 14: the released harness's SYSTEM_PROMPTS['default'], build_generic_mcq_query and
    build_mcq_query_nejm_cot (KAVentures/health-ai-readiness-public-subset-partial-replication, src/prompts.py),
    written out here by hand."""
    it = MCQItem("q1", "A 40-year-old man has a rash. What is the diagnosis?", ("Psoriasis", "Eczema", "Tinea"), 1,
                 ("/x/q1.png",))
    plan = plan_stress(ItemSet([it]), StressOptions(conditions=("original", "no_image", "cot"), check_files=False))
    by = {t.condition: t for t in plan.trials}
    system = "You are a helpful medical assistant that answers multiple choice questions about the provided image."
    user = ("The following is a multiple choice question with answer options.\n"
            "A 40-year-old man has a rash. What is the diagnosis?\n"
            "A. Psoriasis   B. Eczema   C. Tinea   \n"
            "Please respond only with the index and the content of the option you believe is correct. "
            "Enclose your answer within <answer></answer> tags.")
    cot = user.rsplit("\n", 1)[0] + (
        "\nPlease think step by step, enclosing the thought process within <thinking></thinking> tags. "
        "Provide answer with the index and content of the option, and place it within <answer></answer> tags.")
    for cond in ("original", "no_image"):  # the image-free condition keeps the same messages
        assert [(m.role, m.content) for m in by[cond].messages] == [("system", system), ("user", user)]
    assert [(m.role, m.content) for m in by["cot"].messages] == [("system", system), ("user", cot)]
    for text in (user, cot):
        assert options_from_prompt(text) == (it.question, list(it.options))
    # the project's earlier wording stays available as a protocol, without a system message
    proj = plan_stress(ItemSet([it]), StressOptions(conditions=("original",), check_files=False,
                                                    prompt_protocol="project"))
    (m,) = proj.trials[0].messages
    assert m.role == "user" and options_from_prompt(m.content) == (it.question, list(it.options))


def test_thinking_tags_of_the_released_cot_prompt_are_dropped_before_parsing() -> None:
    from medvlm_audit.scorers.option import parse_option

    opts = ("Psoriasis", "Eczema", "Tinea")
    # no answer tag: the letter the reasoning mentions ("Option A" is ruled out) must not be read as the pick
    p = parse_option("<thinking>Option A is unlikely given the distribution.</thinking> Eczema", opts)
    assert p.status == "answer" and p.index == 1
