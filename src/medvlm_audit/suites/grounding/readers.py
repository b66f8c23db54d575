"""What the reader-study app (:mod:`medvlm_audit.readers`) needs of the grounding suite, reached through the suite
registry (``GroundingSuite.reader_support``): the conditions that render a read's image exactly as the models saw
it, and the metric definitions readers are scored by (so human CGR and IS are the models' CGR and IS)."""

from __future__ import annotations

from medvlm_audit.suites.grounding.comparisons import adjust_families, paired_row
from medvlm_audit.suites.grounding.conditions import Condition
from medvlm_audit.suites.grounding.metrics import Options, build_panels, model_vectors, rate_row

__all__ = ["Condition", "Options", "adjust_families", "build_panels", "model_vectors", "paired_row", "rate_row"]
