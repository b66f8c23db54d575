"""The six decoding conditions of the report audit (paper 002, Table 1) and a check that a model can honour them.

greedy; beam search (4 beams); temperature 0.3 with top-p 0.95; temperature 0.7 with top-p 0.95; top-k 50 at
temperature 1.0; top-p 0.9 at temperature 1.0. All with at most 512 new tokens. Stochastic strategies are asked
``samples`` times per input (``sample_index`` 0..samples-1, each seeded from the decoding seed and the index).
A strategy is only ever a :class:`~medvlm_audit.models.base.Decoding`: a model never sees its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding

MAX_NEW_TOKENS = 512


@dataclass(frozen=True)
class DecodingStrategy:
    name: str
    decoding: Decoding
    label: str

    @property
    def stochastic(self) -> bool:
        return self.decoding.temperature > 0

    def overrides(self) -> tuple[tuple[str, Any], ...]:
        """The Trial.decoding overrides of this strategy (every sampling field, so nothing is inherited)."""
        d = self.decoding
        return (("max_new_tokens", d.max_new_tokens), ("temperature", d.temperature), ("top_p", d.top_p),
                ("top_k", d.top_k), ("num_beams", d.num_beams), ("seed", d.seed), ("logprobs", False))


def _d(**kw: Any) -> Decoding:
    return Decoding(max_new_tokens=MAX_NEW_TOKENS, logprobs=False, seed=42, **kw)


STRATEGIES: dict[str, DecodingStrategy] = {s.name: s for s in (
    DecodingStrategy("greedy", _d(), "Greedy"),
    DecodingStrategy("beam4", _d(num_beams=4), "Beam (4)"),
    DecodingStrategy("t0.3", _d(temperature=0.3, top_p=0.95), "T = 0.3, top-p 0.95"),
    DecodingStrategy("t0.7", _d(temperature=0.7, top_p=0.95), "T = 0.7, top-p 0.95"),
    DecodingStrategy("top_k", _d(temperature=1.0, top_k=50), "top-k 50, T = 1.0"),
    DecodingStrategy("top_p", _d(temperature=1.0, top_p=0.9), "top-p 0.9, T = 1.0"),
)}
DEFAULT_STRATEGIES: tuple[str, ...] = tuple(STRATEGIES)


def strategy(name: str) -> DecodingStrategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown decoding strategy {name!r}; known: {', '.join(STRATEGIES)}") from None


def samples_for(s: DecodingStrategy, samples: int) -> int:
    """Samples per input: 1 for deterministic strategies, ``samples`` for stochastic ones."""
    if samples < 1:
        raise ConfigError(f"samples per input must be >= 1, got {samples}")
    return samples if s.stochastic else 1


def with_max_tokens(s: DecodingStrategy, max_new_tokens: int) -> DecodingStrategy:
    return replace(s, decoding=replace(s.decoding, max_new_tokens=max_new_tokens))


def check_model(model: Any, strategies: Iterable[DecodingStrategy | str]) -> None:
    """Raise ConfigError naming the model and strategy when a model cannot honour one of ``strategies``.

    A model declares what it can do with ``check_decoding(Decoding)`` (raising ConfigError); a model without it
    is assumed to honour every decoding (the reference generators act on their own next-token distribution).
    """
    check = getattr(model, "check_decoding", None) or getattr(getattr(model, "inner", None), "check_decoding", None)
    if check is None:  # (a TextOnly wrapper is checked through the model it wraps)
        return
    for s in strategies:
        st = strategy(s) if isinstance(s, str) else s
        try:
            check(st.decoding)
        except ConfigError as e:
            raise ConfigError(f"decoding strategy {st.name!r} ({st.label}): {e}") from e


def check_models(models: Sequence[Any], strategies: Iterable[DecodingStrategy | str]) -> None:
    names = list(strategies)
    for m in models:
        check_model(m, names)


def effective_table(tidy: Any, max_new_tokens: int | None = None) -> Any:
    """Per model x strategy, the decoding each engine was asked (the answers' stored effective decoding, read
    off the sent bodies as that engine reads them) beside the strategy's label, and ``mismatch``: the fields
    that differ from the label (empty when they agree; 'not recorded' for a model that does not say, e.g. an
    in-process reference generator). ``max_new_tokens``: the run's cap, which replaces the label's."""
    import json

    import pandas as pd

    from medvlm_audit.models.flavours import CONTRACT_FIELDS, mismatches

    rows = []
    col = tidy["effective_decoding"] if "effective_decoding" in tidy else pd.Series([None] * len(tidy))
    for (model, strat), idx in tidy.groupby(["model", "strategy"], sort=True).groups.items():
        effs = [json.loads(x) for x in col.loc[idx] if isinstance(x, str)]
        st = STRATEGIES.get(str(strat))
        row: dict[str, Any] = {"model": model, "strategy": strat, "label": st.label if st else str(strat),
                               "server": None, "answers": len(effs)}
        if not effs:
            rows.append({**row, **dict.fromkeys(CONTRACT_FIELDS), "mismatch": "not recorded"})
            continue
        first = effs[0]
        row["server"] = first.get("server")
        for f in CONTRACT_FIELDS:
            vals = {json.dumps(e.get(f), sort_keys=True) for e in effs}
            row[f] = "varies" if len(vals) > 1 and f != "seed" else (
                ", ".join(map(str, first.get(f))) if f == "stop" else first.get(f))
        seeds = sorted({e["seed"] for e in effs if e.get("seed") is not None})
        if len(seeds) > 1:  # one seed per sample (seed + sample index)
            row["seed"] = f"{seeds[0]}..{seeds[-1]}"
        problems: set[str] = set()
        if st is not None:
            label = st.decoding if max_new_tokens is None else replace(st.decoding, max_new_tokens=max_new_tokens)
            for e in effs:
                problems.update(mismatches(label, e))
        row["mismatch"] = "; ".join(sorted(problems))
        rows.append(row)
    return pd.DataFrame(rows, columns=["model", "strategy", "label", "server", "answers", *CONTRACT_FIELDS,
                                       "mismatch"])
