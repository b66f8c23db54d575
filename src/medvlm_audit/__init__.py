"""medvlm-audit: does a medical VLM read the image? Grounding, stress, faithfulness and report audits."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
