"""The reports suite (paper 002): does decoding erase clinical terminology?

Flow: corpora (:mod:`.corpus`: JSONL {id, text, group}, released layouts, the IU X-ray reference from
torchxrayvision) -> :func:`.audit.corpus_audit` (CAD per word gated and ungated, WAE with bootstrap and
permutation null, diversity, surface metrics, WEAT and ΔDIR baselines; statistics in ``stats.py``) ->
decoding strategies (:mod:`.decoding`) for report-generation runs. CLI command functions in :mod:`.commands`.
"""

from __future__ import annotations

from medvlm_audit.suites.reports.audit import CorpusAudit, corpus_audit
from medvlm_audit.suites.reports.corpus import (
    Corpus,
    CorpusError,
    build_iu_reports,
    iu_reference_corpus,
    load_chexpert_plus,
    load_iu_xray,
    load_mimic_cxr,
    load_rexgradient,
    make_corpus,
    read_corpus,
    write_corpus,
)
from medvlm_audit.suites.reports.decoding import (
    DEFAULT_STRATEGIES,
    STRATEGIES,
    DecodingStrategy,
    check_models,
)

__all__ = [
    "DEFAULT_STRATEGIES", "STRATEGIES", "Corpus", "CorpusAudit", "CorpusError", "DecodingStrategy",
    "build_iu_reports", "check_models", "corpus_audit", "iu_reference_corpus", "load_chexpert_plus",
    "load_iu_xray", "load_mimic_cxr", "load_rexgradient", "make_corpus", "read_corpus", "write_corpus",
]
