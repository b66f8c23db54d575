"""Statistics of inference shared by every audit suite: plain functions on numpy arrays.

One topic per module, public names re-exported here (``from medvlm_audit import stats; stats.proportion``).
A metric that one paper defines lives in its suite, not here (e.g. ``suites/reports/cad.py``).

Conventions (DESIGN.md "Statistics conventions"; paper 000, Methods "Statistical analysis"):

* Values are fractions in [0, 1]; callers convert to percent.
* A proportion is reported as the sample mean, the analytic SE sqrt(p(1-p)/n) and a percentile bootstrap
  interval (10,000 resamples, seed 0).
* A paired difference is reported as the difference of means, the SD of the bootstrap differences, the percentile
  interval and a two-sided shift-and-reflect p-value (Supplementary Algorithm 1 of the paper).
* Checked against the authors' released code (github.com/mahshadlotfinia/causal, ``Inference/stats_utils.py``):
  bootstrap SDs use ``ddof=1``; intervals use ``np.percentile`` with its default (linear) interpolation;
  index resampling is ``np.random.RandomState(seed).randint(0, n, size=(B, n))``. The released code has **no**
  clustered bootstrap: the patient-clustered option is this project's addition (beyond the paper). It draws
  ``randint(0, K, size=(B, K))`` over the sorted unique cluster ids and takes the ratio of summed values to
  summed cluster sizes.
* Two resampling modes for 0/1 outcomes. ``"exact-counts"`` draws the resampled counts directly (binomial for one
  proportion, multinomial over the four outcome pairs for a paired difference, multinomial over cluster *types*
  for a clustered bootstrap): the same distribution as index resampling at O(B) cost, from
  ``np.random.default_rng(seed)``. ``"index"`` draws the released code's index matrix chunk by chunk (bounded
  memory) from the same ``RandomState`` stream: the draws, and so the means and intervals of a given vector, are
  bit-identical to the released code's one-shot ``values[idx].mean(1)`` (tested). The released code's *results*
  are reproduced only when the vector is in its row order (the grounding analysis keeps the files' order in
  index mode) and its AUROC is :func:`auroc_released`; :func:`auroc` (Mann-Whitney, ties 1/2) differs from it
  whenever scores are tied.
* Statistics with no count shortcut (AUROC, means of real values such as a Brier score or an ECE bin) resample
  n uniform draws with replacement in ``exact-counts`` mode too, from fixed blocks of 500 resamples, block i
  drawn from ``default_rng(SeedSequence(seed).spawn(...)[i])``; worker threads fill the blocks, and the result
  is the same for any number of threads. With few distinct values the counts come from a multinomial instead.

Degenerate inputs (n = 0, one class, a single group, constant values) never raise and never warn: they return
nan / None and say why in ``method`` / ``note`` (e.g. "not estimable (n = 0)"). Malformed inputs (values outside
{0, 1} where 0/1 is required, nan values, length mismatches) raise ``ValueError`` naming the argument and index.
"""

from __future__ import annotations

from medvlm_audit.stats.agreement import (
    cohen_kappa,
    cohen_kappa_interval,
    fleiss_kappa,
    fleiss_kappa_interval,
    kendall_tau_b,
    ordinal_median_iqr,
    percent_agreement,
    ratings_to_counts,
)
from medvlm_audit.stats.calibration import brier, ece, ece_terms
from medvlm_audit.stats.consensus import (
    TauEstimate,
    kendall_tau_b_bootstrap,
    kendall_tau_b_rows,
    leave_one_out_ceiling,
    weighted_kendall_tau_b,
    z_consensus,
)
from medvlm_audit.stats.multiplicity import benjamini_hochberg
from medvlm_audit.stats.paired import (
    cluster_paired_difference,
    collapsed_change_interval,
    mcnemar_exact,
    paired_difference,
    paired_difference_values,
    paired_from_draws,
    shift_reflect_p,
)
from medvlm_audit.stats.permutation import (
    permutation_p_two_sided,
    permutation_p_upper,
    permutation_test,
    spearman_permutation,
)
from medvlm_audit.stats.ranking import (
    auroc,
    auroc_interval,
    auroc_interval_released,
    auroc_released,
    case_bootstrap,
)
from medvlm_audit.stats.rates import (
    RATE_WILSON_EVENTS,
    binomial_test,
    bounded_mean_interval_at_edge,
    chance_test,
    poisson_binomial_sf,
    proportion,
    rate_interval,
    rate_interval_method,
    rate_intervals_limit,
    wilson_interval,
)
from medvlm_audit.stats.resample import (
    bias_corrected_interval,
    bootstrap_bias,
    bootstrap_draws_sd,
    bootstrap_estimate,
    bootstrap_mean,
    bootstrap_sd,
    bounded_mean_estimate,
    case_bootstrap_ratios,
    cluster_bootstrap_ratios,
    cluster_ratio_se,
    mean_estimate,
    percentile_interval,
)
from medvlm_audit.stats.types import NOT_ESTIMABLE_N0, Estimate, Mode, PairedDiff, PermutationResult

__all__ = [
    'NOT_ESTIMABLE_N0',
    'RATE_WILSON_EVENTS',
    'Estimate',
    'Mode',
    'PairedDiff',
    'PermutationResult',
    'TauEstimate',
    'auroc',
    'auroc_interval',
    'auroc_interval_released',
    'auroc_released',
    'benjamini_hochberg',
    'bias_corrected_interval',
    'binomial_test',
    'bootstrap_bias',
    'bootstrap_draws_sd',
    'bootstrap_estimate',
    'bootstrap_mean',
    'bootstrap_sd',
    'bounded_mean_estimate',
    'brier',
    'case_bootstrap',
    'case_bootstrap_ratios',
    'chance_test',
    'cluster_bootstrap_ratios',
    'cluster_paired_difference',
    'collapsed_change_interval',
    'cluster_ratio_se',
    'cohen_kappa',
    'cohen_kappa_interval',
    'ece',
    'ece_terms',
    'fleiss_kappa',
    'fleiss_kappa_interval',
    'kendall_tau_b',
    'kendall_tau_b_bootstrap',
    'kendall_tau_b_rows',
    'leave_one_out_ceiling',
    'mcnemar_exact',
    'mean_estimate',
    'ordinal_median_iqr',
    'paired_difference',
    'paired_difference_values',
    'paired_from_draws',
    'percent_agreement',
    'percentile_interval',
    'permutation_p_two_sided',
    'permutation_p_upper',
    'permutation_test',
    'poisson_binomial_sf',
    'proportion',
    'rate_interval',
    'rate_interval_method',
    'bounded_mean_interval_at_edge',
    'rate_intervals_limit',
    'ratings_to_counts',
    'shift_reflect_p',
    'spearman_permutation',
    'weighted_kendall_tau_b',
    'wilson_interval',
    'z_consensus',
]
