"""The faithfulness suite (paper 001): does a model's chain of thought admit what changed its answer?

Flow: items (:mod:`.items`, :mod:`.embedded`) -> stage ``answer``: :func:`.conditions.plan_answers`
(baseline, text cues, visual cues as image ops of :mod:`.overlays`, shams; the released protocol prompt of
:mod:`.prompts`) -> stage ``judge``: :func:`.plan.plan_judge` (judge models read the stored modified
CoTs; prompts, parsing and quote validation of :mod:`.judge`) -> scoring: extraction and flips
(:mod:`.scoring`), deterministic CF from the knowledge base (:mod:`.kb`), judge statuses, per-item CC ->
:func:`.analysis.faithfulness_metrics` and :func:`.analysis.faithfulness_comparisons` -> report sections (:mod:`.sections`).
Judge validation against readers: :mod:`.validate` (``medvlm-audit judge-validate``, :mod:`.commands`).
Reference models for the embedded default: :mod:`.reference`. The suite object (options, stages, tidy,
analysis, embedded default): :mod:`.suite`; its stage planners: :mod:`.plan`.
"""
