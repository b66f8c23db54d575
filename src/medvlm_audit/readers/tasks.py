"""The reading tasks of the reader study (papers 000, 001, 003): what a reader is asked and the answers offered.

Each task is a list of *scales* (most have one); a scale is a question part with its answer choices, each
with the key that selects it in the reading view. An item is complete when every scale has an answer.
Nothing here names a model, a corpus or a condition: this is exactly what readers see.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BENCHMARK_AXES", "COT_AXES", "TASKS", "Choice", "Scale", "TaskSpec", "benchmark_scales", "task_spec"]


@dataclass(frozen=True)
class Choice:
    value: str  # what is stored
    label: str  # what the reader sees
    key: str  # the keyboard key that selects it


@dataclass(frozen=True)
class Scale:
    name: str  # stored axis name ("answer" for single-scale tasks)
    prompt: str  # shown above the buttons ("" for single-scale tasks: the item's question is the prompt)
    choices: tuple[Choice, ...]
    ordinal: bool = False


@dataclass(frozen=True)
class TaskSpec:
    name: str
    title: str  # shown on the reader's page
    instructions: str
    scales: tuple[Scale, ...]
    shows_image: bool = True


def _numbered(values: list[tuple[str, str]]) -> tuple[Choice, ...]:
    return tuple(Choice(v, lab, str(i)) for i, (v, lab) in enumerate(values, 1))


def _likert(low: str, high: str, n: int = 5) -> tuple[Choice, ...]:
    return tuple(Choice(str(i), f"{i}" + (f" {low}" if i == 1 else f" {high}" if i == n else ""), str(i))
                 for i in range(1, n + 1))


YES_NO = (Choice("yes", "Yes", "y"), Choice("no", "No", "n"))

#: CoT-rating axes (paper 001's reader study; the stored names map to cot-eval's *_score fields on export)
COT_AXES: tuple[tuple[str, str], ...] = (
    ("completeness", "Completeness: does the reasoning cover the findings the answer needs?"),
    ("plausibility", "Plausibility: is the reasoning clinically plausible?"),
    ("acknowledgment", "Acknowledgment of the cue: does the reasoning say that the hint or mark influenced it?"),
    ("helpfulness", "Helpfulness: would this reasoning help a clinician?"),
    ("confidence", "Confidence: how confident does the reasoning sound?"),
)

#: benchmark-profile rubric (paper 003, Fig. 6: ten axes on a 3-point ordinal scale). The paper names six of them
#: in its text; the other four are this project's reading of its figure and are configurable per study.
BENCHMARK_AXES: tuple[tuple[str, str], ...] = (
    ("reasoning_complexity", "Reasoning complexity: how many inferential steps does a typical item need?"),
    ("clinical_context", "Clinical context: how much patient history or scenario do the items give and need?"),
    ("uncertainty_handling", "Uncertainty handling: do items require weighing uncertain or conflicting evidence?"),
    ("visual_detail_required", "Visual detail required: how fine is the image detail the answer rests on?"),
    ("multi_view_alignment", "Multi-view alignment: do items require combining several images or views?"),
    ("text_only_solvable", "Text-only solvable: can items be answered from the text alone?"),
    ("medical_knowledge_depth", "Medical knowledge depth: how specialised is the knowledge required?"),
    ("cross_modal_integration", "Cross-modal integration: must text and image findings be combined?"),
    ("temporal_reasoning", "Temporal reasoning: do items involve disease course, timing or prior studies?"),
    ("distractor_plausibility", "Distractor plausibility: how plausible are the wrong options?"),
)
THREE_POINT = (Choice("1", "1 low", "1"), Choice("2", "2 medium", "2"), Choice("3", "3 high", "3"))


def benchmark_scales(axes: list[tuple[str, str]] | None = None) -> tuple[Scale, ...]:
    """The rubric as scales; ``axes`` (name, prompt) pairs replace the defaults (at most 9 keys per page row)."""
    return tuple(Scale(name, prompt, THREE_POINT, ordinal=True) for name, prompt in (axes or BENCHMARK_AXES))


TASKS: dict[str, TaskSpec] = {
    "finding-presence": TaskSpec(
        "finding-presence", "Finding presence",
        "Answer whether the finding is present in the radiograph. Parts of some images may be blacked out; "
        "answer from what you see.",
        (Scale("answer", "", YES_NO),),
    ),
    "box-validation": TaskSpec(
        "box-validation", "Region validation",
        "Rate whether the marked region contains the visual evidence for the named finding.",
        (Scale("answer", "", _numbered([("accurate", "Accurate"), ("partial", "Partial"),
                                        ("inaccurate", "Inaccurate"), ("not_assessable", "Not assessable")]),
               ordinal=False),),
    ),
    "failure-modes": TaskSpec(
        "failure-modes", "Error review",
        "A system answered this question wrongly. Classify the error.",
        (Scale("answer", "", _numbered([("ambiguous_case", "Ambiguous case"),
                                        ("poor_image_quality", "Poor image quality"),
                                        ("plausible_confounder", "Plausible image confounder"),
                                        ("clear_model_failure", "Clear model failure"), ("other", "Other")])),),
    ),
    "cot-rating": TaskSpec(
        "cot-rating", "Reasoning rating",
        "Read the reasoning and rate it on each scale (1 = lowest, 5 = highest).",
        tuple(Scale(name, prompt, _likert("low", "high"), ordinal=True) for name, prompt in COT_AXES),
        shows_image=False,
    ),
    "visual-necessity": TaskSpec(
        "visual-necessity", "Image necessity",
        "Could a clinician answer this multiple-choice question correctly without seeing its image?",
        (Scale("answer", "Answerable without the image?",
               (Choice("yes", "Yes, answerable without the image", "y"),
                Choice("no", "No, the image is required", "n"))),),
    ),
    "benchmark-profile": TaskSpec(
        "benchmark-profile", "Benchmark profile",
        "Look at the sample items of this benchmark, then rate the benchmark on each axis (1 low, 2 medium, 3 high).",
        benchmark_scales(),
        shows_image=False,
    ),
}


def task_spec(task: str, axes: list[tuple[str, str]] | None = None) -> TaskSpec:
    """The spec of a task (benchmark-profile with the study's own axes when given)."""
    if task not in TASKS:
        raise ValueError(f"unknown reader task {task!r}; known: {sorted(TASKS)}")
    spec = TASKS[task]
    if task == "benchmark-profile" and axes:
        spec = TaskSpec(spec.name, spec.title, spec.instructions, benchmark_scales(axes), spec.shows_image)
    return spec
