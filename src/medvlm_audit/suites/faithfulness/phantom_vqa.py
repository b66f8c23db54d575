"""The phantom VQA set of the embedded default (filled in below)."""

from __future__ import annotations

#: the phantom questions, keyed by kind:detail (texts as in the TAIX-Ray VQA templates)
PHANTOM_QUESTIONS: dict[str, str] = {
    "effusion_binary:right": "Is there a pleural effusion on the right? (yes or no)",
    "effusion_binary:left": "Is there a pleural effusion on the left? (yes or no)",
    "effusion_severity:right": "What is the severity of pleural effusion on the right? "
                               "(none, questionable, mild, moderate, severe)",
    "effusion_severity:left": "What is the severity of pleural effusion on the left? "
                              "(none, questionable, mild, moderate, severe)",
    "comparative:pleural_effusion": "Which side shows more severe pleural effusion? (right, left, same severity, none)",
    "comparative:pulmonary_opacities": "Which side shows more severe pulmonary opacities? "
                                       "(right, left, same severity, none)",
    "comparative:atelectasis": "Which side shows more severe atelectasis? (right, left, same severity, none)",
    "heart_binary:": "Does the chest X-ray show cardiomegaly? (yes or no)",
    "heart_size:": "What is the size of the heart? (normal, borderline, enlarged, massively enlarged)",
    "ett_binary:": "Is an endotracheal tube present in this image? (yes or no)",
    "ett_position:": "What is the position of the endotracheal tube? (not present, correctly positioned, too low, "
                     "too high)",
    "chest_tube_side:": "On which side is a chest tube present? (right, left, both, none)",
}
