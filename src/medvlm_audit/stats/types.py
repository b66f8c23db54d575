"""Result types of the statistics: an estimate, a paired difference, a permutation result."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ['Estimate', 'Mode', 'NOT_ESTIMABLE_N0', 'PairedDiff', 'PermutationResult']


Mode = Literal["exact-counts", "index"]


NOT_ESTIMABLE_N0 = "not estimable (n = 0)"


_NAN = float("nan")


@dataclass(frozen=True)
class Estimate:
    """A proportion or mean with uncertainty: point, SE, (1 - alpha) interval, n and how it was computed.

    ``boot_sd`` is the SD (ddof=1) of the bootstrap distribution: the released code's reported "SE" variant.
    """

    point: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    method: str
    boot_sd: float = _NAN

    @property
    def estimable(self) -> bool:
        """True when the point estimate is a number."""
        return not math.isnan(self.point)


@dataclass(frozen=True)
class PairedDiff:
    """mean(a) - mean(b) on shared cases: bootstrap SD, percentile interval, shift-and-reflect two-sided p."""

    diff: float
    sd: float
    ci_low: float
    ci_high: float
    p: float
    n: int
    method: str


@dataclass(frozen=True)
class PermutationResult:
    """A permutation test across groups: observed statistic, Monte-Carlo p = (c + 1)/(B + 1), kept/dropped groups.

    ``p_exact`` is the exact permutation p-value where it is cheap to enumerate (two groups, 0/1 values:
    hypergeometric tail); nan otherwise.
    """

    statistic: float
    p: float
    B: int
    n: int
    groups: tuple[str, ...]
    dropped: tuple[str, ...]
    test: str
    note: str
    p_exact: float = _NAN

