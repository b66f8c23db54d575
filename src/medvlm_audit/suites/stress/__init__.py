"""The stress suite (paper 003): MCQ stress tests T1-T6, paired statistics and the robustness score."""
