"""The reports suite (paper 002): does decoding erase clinical terminology?

Flow: corpora (:mod:`.corpus`: JSONL {id, text, group}, released layouts, the IU X-ray reference from
torchxrayvision) -> :func:`.audit.corpus_audit` (CAD per word gated and ungated, WAE with bootstrap and
permutation null, diversity, surface metrics, WEAT and ΔDIR baselines; the paper's formulas in ``terms.py``, ``cad.py``, ``wae.py``, ``diversity.py``, ``surface.py``, ``baselines.py``, ``clinical/formulas.py``) ->
decoding strategies (:mod:`.decoding`) for report-generation runs (:mod:`.suite`; the embedded default's phantom
images in :mod:`.embedded`; the page's tables and figures in :mod:`.sections`). CLI command functions in
:mod:`.commands`.
"""

from __future__ import annotations

from medvlm_audit.registry import lazy_exports

#: public name -> the module that defines it (imported on first use, so importing the package stays light)
_LAZY: dict[str, str] = {
    "Corpus": "medvlm_audit.suites.reports.corpus",
    "CorpusAudit": "medvlm_audit.suites.reports.audit",
    "CorpusError": "medvlm_audit.suites.reports.corpus",
    "DEFAULT_STRATEGIES": "medvlm_audit.suites.reports.decoding",
    "DecodingStrategy": "medvlm_audit.suites.reports.decoding",
    "STRATEGIES": "medvlm_audit.suites.reports.decoding",
    "build_iu_reports": "medvlm_audit.suites.reports.corpus",
    "check_models": "medvlm_audit.suites.reports.decoding",
    "corpus_audit": "medvlm_audit.suites.reports.audit",
    "iu_reference_corpus": "medvlm_audit.suites.reports.corpus",
    "load_chexpert_plus": "medvlm_audit.suites.reports.corpus",
    "load_iu_xray": "medvlm_audit.suites.reports.corpus",
    "load_mimic_cxr": "medvlm_audit.suites.reports.corpus",
    "load_rexgradient": "medvlm_audit.suites.reports.corpus",
    "make_corpus": "medvlm_audit.suites.reports.corpus",
    "read_corpus": "medvlm_audit.suites.reports.corpus",
    "write_corpus": "medvlm_audit.suites.reports.corpus",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
