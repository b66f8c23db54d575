"""What the run explorer (`medvlm-audit view`) needs of a reports run beyond its tidy table: each image's reference
report, and per model x strategy the words the corpus audit classed (erasure, new bias, bias flip, preservation),
BH-gated or only ungated, so a case page can mark them in the reference and in each strategy's report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.store import RunStore

#: the audit's word categories the explorer marks (class names come from here, never from a file)
MARKED = ("erasure", "new_bias", "bias_flip", "preservation")


def reference_texts(run_dir: str | Path) -> dict[str, str]:
    """Reference report text by id, from the corpus the run recorded (``reference`` option: ``iu`` or a JSONL);
    empty when it cannot be read (the explorer then shows no reference)."""
    from medvlm_audit.suites.reports.analysis import reference_corpus

    try:
        with RunStore.open_dir(run_dir, readonly=True) as store:
            spec = str((store.meta().get("config") or {}).get("reference") or "iu")
        corpus = reference_corpus(spec)
    except Exception:  # noqa: BLE001 - a missing corpus only loses the reference column of the explorer
        return {}
    return dict(zip(corpus.ids, corpus.texts))


def marked_terms(run_dir: str | Path) -> dict[tuple[str, str], dict[str, tuple[str, bool]]]:
    """(model, strategy) -> word -> (category, gated?) from ``report/cad.csv``: the gated category when it is
    one of :data:`MARKED`, else the ungated one."""
    f = Path(run_dir) / "report" / "cad.csv"
    if not f.is_file():
        return {}
    try:
        cad = pd.read_csv(f)
    except Exception:  # noqa: BLE001
        return {}
    out: dict[tuple[str, str], dict[str, tuple[str, bool]]] = {}
    for r in cad.itertuples(index=False):
        d: Any = r._asdict()
        cat, gated = d.get("category"), True
        if cat not in MARKED:
            cat, gated = d.get("category_ungated"), False
        if cat in MARKED and isinstance(d.get("word"), str):
            out.setdefault((str(d["model"]), str(d["strategy"])), {})[d["word"]] = (str(cat), gated)
    return out
