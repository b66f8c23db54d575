"""The prompt-sensitivity subsample: 100 cases balanced over findings and, within each finding, over labels.

Paper 000 (Robustness analyses) draws "a 100-case finding- and label-balanced sub-sample of the MIMIC probe set";
the released code sampled all-positive MS-CXR cases instead. Here the allocation is explicit: ``n`` is split as
evenly as possible over findings (a finding with too few cases passes its share on), then each finding's share
over its labels the same way; cases are drawn with seed 42 per (finding, label) stratum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from medvlm_audit.suites.grounding.datasets.common import SEED, allocate_balanced, stratum_rng
from medvlm_audit.suites.grounding.probeset import ProbeSet


def balanced_allocation(df: pd.DataFrame, n: int) -> dict[tuple[str, int], int]:
    """(finding, label) -> number of cases to draw, balanced over findings first, then labels."""
    counts = df.groupby(["finding", "label"]).size()
    by_finding = counts.groupby(level=0).sum()
    per_finding = allocate_balanced({str(f): int(c) for f, c in by_finding.items()}, n)
    out: dict[tuple[str, int], int] = {}
    for f, k in per_finding.items():
        labs = {str(int(lab)): int(c) for (ff, lab), c in counts.items() if ff == f}
        for lab, m in allocate_balanced(labs, k).items():
            out[(f, int(lab))] = m
    return out


def balanced_subsample_ids(df: pd.DataFrame, n: int = 100, seed: int = SEED,
                           kinds: Sequence[str] = ("finding_presence",)) -> list[str]:
    """Case ids of the finding- and label-balanced subsample (manifest order preserved)."""
    elig = df[df["kind"].isin(list(kinds)) & df["finding"].notna() & df["label"].notna()].copy()
    elig["label"] = elig["label"].astype(int)
    alloc = balanced_allocation(elig, n)
    chosen: set[str] = set()
    for (f, lab), k in alloc.items():
        sub = elig[(elig["finding"] == f) & (elig["label"] == lab)].sort_values("case_id", kind="mergesort")
        perm = stratum_rng(seed, "prompt_subsample", f, str(lab)).permutation(len(sub))
        chosen.update(sub["case_id"].iloc[perm[:k]].tolist())
    return [c for c in df["case_id"] if c in chosen]


def prompt_sensitivity_subsample(probe_set: ProbeSet, n: int = 100, seed: int = SEED,
                                 kinds: Sequence[str] = ("finding_presence",), name: str | None = None) -> ProbeSet:
    """A new ProbeSet with the balanced subsample; provenance names the parent set, its hash and the allocation."""
    df = probe_set.df
    ids = set(balanced_subsample_ids(df, n, seed, kinds))
    sub = df[df["case_id"].isin(ids)].reset_index(drop=True)
    elig = df[df["kind"].isin(list(kinds)) & df["finding"].notna()].assign(label=lambda d: d["label"].astype(int))
    alloc = balanced_allocation(elig, n)
    prov: dict[str, Any] = {
        "builder": "prompt_sensitivity_subsample",
        "seed": seed,
        "parameters": {"n": n, "kinds": list(kinds)},
        "parent": {"name": probe_set.name, "content_hash": probe_set.content_hash},
        "allocation": {f"{f}:{lab}": k for (f, lab), k in sorted(alloc.items())},
        "shortfall": max(0, n - len(sub)),
    }
    return ProbeSet(sub, probe_set.image_root, prov, name=name or f"{probe_set.name}-prompt{n}")


def prompt_subsample(probe_set: ProbeSet, n: int = 100, seed: int = SEED,
                     kinds: Sequence[str] = ("finding_presence",)) -> frozenset[str]:
    """Case ids of the prompt-sensitivity subsample of ``probe_set`` (what the runner's prompt variants use)."""
    return frozenset(balanced_subsample_ids(probe_set.df, n, seed, kinds))


#: which probe sets of a run the prompt-sensitivity subsample is drawn from by default: the first (primary) one,
#: as the paper draws "a 100-case ... sub-sample of the MIMIC probe set"
PROMPT_SUBSAMPLE_FROM = "primary"


def run_prompt_subsample(probe_sets: Sequence[ProbeSet], n: int = 100, seed: int = SEED,
                         source: str | Sequence[str] = PROMPT_SUBSAMPLE_FROM) -> frozenset[str]:
    """Case ids that get the non-default prompt variants in a run over ``probe_sets``.

    ``source``: ``"primary"`` (default: ``n`` cases of the first probe set, so a MIMIC + CheXpert run has 100,
    not 200), ``"all"`` (``n`` cases of every probe set), or probe-set names (``n`` of each named set).
    """
    if not probe_sets:
        return frozenset()
    if isinstance(source, str) and source == "primary":
        chosen = [probe_sets[0]]
    elif isinstance(source, str) and source == "all":
        chosen = list(probe_sets)
    else:
        names = [source] if isinstance(source, str) else list(source)
        by_name = {ps.name: ps for ps in probe_sets}
        unknown = [x for x in names if x not in by_name]
        if unknown:
            raise ValueError(f"prompt subsample source(s) {unknown} are not probe sets of this run; "
                             f"use 'primary', 'all' or one of {sorted(by_name)}")
        chosen = [by_name[x] for x in names]
    return frozenset().union(*(prompt_subsample(ps, n=n, seed=seed) for ps in chosen))
