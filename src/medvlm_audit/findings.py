"""The finding vocabulary and the display names substituted into prompts (paper 000, Supplementary Table 11)."""

from __future__ import annotations

#: finding identifier -> human-readable display name used for ``[display]`` in the prompts.
DISPLAY_NAMES: dict[str, str] = {
    "atelectasis": "atelectasis",
    "cardiomegaly": "cardiomegaly",
    "consolidation": "consolidation",
    "edema": "pulmonary edema",
    "enlarged_cardiomediastinum": "enlarged cardiomediastinum",
    "fracture": "rib fracture",
    "lung_lesion": "lung lesion",
    "lung_opacity": "lung opacity",
    "no_finding": "any acute abnormality",
    "pleural_effusion": "pleural effusion",
    "pleural_other": "pleural abnormality",
    "pneumonia": "pneumonia",
    "pneumothorax": "pneumothorax",
    "support_devices": "support device",
    # beyond the CheXpert vocabulary: open box datasets (NIH ChestX-ray14, VinDr-CXR) and the phantom
    "nodule": "lung nodule",
    "mass": "lung mass",
    "infiltration": "infiltration",
    "fibrosis": "fibrosis",
    "emphysema": "emphysema",
    "pleural_thickening": "pleural thickening",
    "hernia": "hernia",
    "aortic_enlargement": "aortic enlargement",
    "calcification": "calcification",
    "ild": "interstitial lung disease",
}

#: the eight MS-CXR findings the paper masks.
MS_CXR_FINDINGS: tuple[str, ...] = (
    "atelectasis",
    "cardiomegaly",
    "consolidation",
    "edema",
    "lung_opacity",
    "pleural_effusion",
    "pneumonia",
    "pneumothorax",
)


def display_name(finding: str) -> str:
    """Display name of a finding identifier; raises KeyError naming the unknown finding."""
    try:
        return DISPLAY_NAMES[finding]
    except KeyError:
        raise KeyError(f"unknown finding {finding!r}; known: {sorted(DISPLAY_NAMES)}") from None


def normalize_finding(name: str) -> str:
    """Map 'Pleural Effusion', 'pleural-effusion', 'Effusion' style names to the identifier."""
    key = name.strip().lower().replace(" ", "_").replace("-", "_")
    aliases = {
        "effusion": "pleural_effusion",
        "enlarged_cardiom.": "enlarged_cardiomediastinum",
        "lung_opacity": "lung_opacity",
        "opacity": "lung_opacity",
        "pleural_thickening": "pleural_thickening",
        "aortic_enlargement": "aortic_enlargement",
        "interstitial_lung_disease": "ild",
        "support_device": "support_devices",
    }
    key = aliases.get(key, key)
    if key not in DISPLAY_NAMES:
        raise KeyError(f"unknown finding {name!r}; known: {sorted(DISPLAY_NAMES)}")
    return key
