"""Server flavours: the decoding contract mapped to each OpenAI-compatible engine's request fields.

A :class:`~medvlm_audit.models.base.Decoding` names every field that changes the token distribution. Each flavour
sends all of them where the engine reads them, with the neutral value where a strategy does not use one, so
neither the server's defaults nor the model's ``generation_config.json`` can fill a gap. What a flavour cannot
send is refused before the run (:func:`check`), naming the option to set; nothing it rejects is sent.

========== ==========================================================================================
flavour    what is sent beyond the OpenAI fields (temperature, top_p, presence/frequency penalty, seed,
           stop, max_tokens)
========== ==========================================================================================
vllm       top_k (-1 = off), min_p, repetition_penalty, n and use_beam_search (beam width is ``n``:
           vLLM's ``to_beam_search_params`` reads ``n``, never ``best_of``), length_penalty with beams
sglang     top_k (-1 = off), min_p, repetition_penalty, n; no beam search
llamacpp   top_k (0 = off), min_p, repeat_penalty, typical_p 1, n_probs via logprobs; no beam search
tgi        nothing more: TGI's chat route has no top_k / min_p / repetition_penalty and applies none
           unless asked, so the neutral values hold; non-neutral ones are refused
ollama     nothing more: its OpenAI layer cannot set top_k / min_p / repeat_penalty and Ollama then uses
           its own (top_k 40): sampling (temperature > 0) is refused, greedy is unaffected
openai,    the OpenAI fields only; top-k, min-p, repetition penalty and beams are refused
azure
transformers  ``transformers serve``: the whole generation config as its ``generation_config`` JSON (every
           field explicit, so the folder's ``generation_config.json`` cannot fill one), seed, max_tokens;
           it refuses unknown fields (HTTP 422) and returns no log-probabilities
auto       identified before the run (:func:`identify`); unidentified: the OpenAI fields only, and a
           strategy needing an extension (beam, top-k, min-p, repetition penalty) is refused
========== ==========================================================================================

Reasoning models (``reasoning=True``): on ``openai`` / ``azure`` no temperature, top_p, penalties or logprobs
(the API refuses them) and ``max_completion_tokens``; everywhere no first-token log-probabilities (the first
token is a thinking token) and ``reasoning_effort`` when set.
"""

from __future__ import annotations

import json
import re
from typing import Any

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding

FLAVOURS: tuple[str, ...] = ("auto", "vllm", "sglang", "llamacpp", "ollama", "tgi", "openai", "azure",
                             "transformers")
#: flavours that take each extension of the OpenAI fields
_TOP_K = {"vllm", "sglang", "llamacpp", "transformers"}
_MIN_P = {"vllm", "sglang", "llamacpp", "transformers"}
_REPETITION = {"vllm", "sglang", "llamacpp", "transformers"}
_BEAMS = {"vllm", "transformers"}
_PENALTIES = {"vllm", "sglang", "llamacpp", "tgi", "ollama", "openai", "azure"}  # presence / frequency
_LOGPROBS = {"vllm", "sglang", "llamacpp", "tgi", "ollama", "openai", "azure", "unknown"}
#: the flavours an unidentified server (``auto``) may be: only what all of them take is sent
UNKNOWN = "unknown"

#: model names that imply a reasoning model (OpenAI o-series and GPT-5, DeepSeek-R1, QwQ)
REASONING_NAMES = re.compile(r"(?i)(^|/)(o[1-9](-mini|-pro|-preview)?(-\d|$)|gpt-5(?!-chat)|deepseek-r1|qwq)")


def implies_reasoning(model: str) -> bool:
    """Whether a served model's name names a known reasoning family.

    >>> [implies_reasoning(m) for m in ("o3-mini", "gpt-5", "gpt-5-chat-latest", "gpt-4o", "deepseek-r1")]
    [True, True, False, False, True]
    """
    return bool(REASONING_NAMES.search(model))


def _needs(d: Decoding) -> list[tuple[str, str, set[str]]]:
    """(field, value text, flavours that can send it) for each non-neutral extension field of ``d``."""
    out = []
    if d.top_k:
        out.append(("top_k", f"top_k={d.top_k}", _TOP_K))
    if d.min_p:
        out.append(("min_p", f"min_p={d.min_p:g}", _MIN_P))
    if d.repetition_penalty != 1.0:
        out.append(("repetition_penalty", f"repetition_penalty={d.repetition_penalty:g}", _REPETITION))
    if d.num_beams > 1:
        out.append(("num_beams", f"beam search (num_beams={d.num_beams})", _BEAMS))
    if d.presence_penalty or d.frequency_penalty:
        out.append(("penalty", f"presence/frequency penalty ({d.presence_penalty:g}/{d.frequency_penalty:g})",
                    _PENALTIES))
    return out


def check(flavour: str, d: Decoding, *, reasoning: bool = False, configured: str = "auto") -> None:
    """Raise ConfigError when ``flavour`` cannot run exactly ``d`` (before anything is asked), naming the option.

    ``configured`` is the ``server:`` the user set (``auto`` with ``flavour`` 'unknown' when identification
    failed)."""
    if d.num_beams < 1 or d.temperature < 0 or not 0 < d.top_p <= 1 or (d.top_k is not None and d.top_k < 0) \
            or not 0 <= d.min_p <= 1 or d.repetition_penalty <= 0 or d.max_new_tokens < 1:
        raise ConfigError(f"invalid decoding {d.as_dict()}")
    if d.temperature > 0 and d.num_beams > 1:
        raise ConfigError("beam sampling (num_beams > 1 with temperature > 0) is not a decoding the audit defines")
    where = (f"server: {flavour}" if flavour != UNKNOWN else
             "server: auto (the engine could not be identified)")
    engines = {"top_k": "vllm, sglang, llamacpp or transformers", "min_p": "vllm, sglang, llamacpp or transformers",
               "repetition_penalty": "vllm, sglang, llamacpp or transformers", "num_beams": "vllm or transformers",
               "penalty": "vllm, sglang, llamacpp, tgi, ollama, openai or azure"}
    for field, text, able in _needs(d):
        if flavour not in able:
            raise ConfigError(f"{text} cannot be sent to {where}: set server: to the engine that serves the "
                              f"model ({engines[field]})")
    if flavour == "ollama" and d.temperature > 0:
        raise ConfigError("sampling (temperature > 0) cannot be pinned on server: ollama: its OpenAI-compatible "
                          "API cannot set top_k / min_p / repeat_penalty, so Ollama's own top_k 40 would apply; "
                          "serve the model with llama.cpp (server: llamacpp) or vLLM for sampled strategies")
    if reasoning and flavour in ("openai", "azure") and (d.temperature not in (0.0, 1.0) or d.top_p != 1.0):
        raise ConfigError(f"temperature={d.temperature:g}, top_p={d.top_p:g} cannot be sent to a reasoning "
                          f"model on {where}: the API refuses temperature and top_p (it samples at its "
                          "fixed settings); use greedy or T = 1.0 with top-p 1.0")


def max_tokens_field(flavour: str, reasoning: bool, configured: str | None) -> str:
    """``max_tokens``, or ``max_completion_tokens`` for a reasoning model on the OpenAI API (or when configured)."""
    if configured:
        return configured
    return "max_completion_tokens" if reasoning and flavour in ("openai", "azure") else "max_tokens"


def request_fields(flavour: str, d: Decoding, sample_index: int, *, reasoning: bool = False,
                   max_tokens_field: str = "max_tokens", reasoning_effort: str | None = None) -> dict[str, Any]:
    """The sampling fields of one request body for ``flavour`` (messages and model are the caller's).

    Every contract field the engine reads is set, neutral values included. ``seed`` is ``d.seed + sample_index``
    so repeated samples differ yet stay reproducible. :func:`check` must have accepted ``d``."""
    seed = None if d.seed is None else int(d.seed) + int(sample_index)
    body: dict[str, Any] = {max_tokens_field: int(d.max_new_tokens)}
    fixed_sampling = reasoning and flavour in ("openai", "azure")
    if flavour == "transformers":
        body["generation_config"] = json.dumps(generation_config_fields(d), sort_keys=True)
        if seed is not None:
            body["seed"] = seed
        if d.stop:
            body["stop"] = list(d.stop)
        if reasoning_effort:
            pass  # transformers serve ignores reasoning_effort (it is in its unused fields): not sent
        return body
    if not fixed_sampling:
        body["temperature"] = float(d.temperature)
        body["top_p"] = float(d.top_p)
        body["presence_penalty"] = float(d.presence_penalty)
        body["frequency_penalty"] = float(d.frequency_penalty)
    if seed is not None:
        body["seed"] = seed
    if d.stop or flavour in ("vllm", "sglang", "llamacpp"):
        body["stop"] = list(d.stop)
    if flavour == "vllm":
        body.update(top_k=int(d.top_k or -1), min_p=float(d.min_p), repetition_penalty=float(d.repetition_penalty))
        if d.num_beams > 1:  # vLLM's chat route builds BeamSearchParams(beam_width=n); best_of is not read
            body.update(n=int(d.num_beams), use_beam_search=True, length_penalty=1.0)
        else:
            body.update(n=1, use_beam_search=False)
    elif flavour == "sglang":
        body.update(top_k=int(d.top_k or -1), min_p=float(d.min_p), repetition_penalty=float(d.repetition_penalty),
                    n=1)
    elif flavour == "llamacpp":
        body.update(top_k=int(d.top_k or 0), min_p=float(d.min_p), repeat_penalty=float(d.repetition_penalty),
                    typical_p=1.0, n=1)
    elif flavour in ("tgi", "ollama", "openai", "azure", UNKNOWN):
        body["n"] = 1
    if d.logprobs and not reasoning and flavour in _LOGPROBS:
        body["logprobs"] = True
        body["top_logprobs"] = int(d.top_logprobs)
    if reasoning and reasoning_effort:
        body["reasoning_effort"] = reasoning_effort
    return body


def generation_config_fields(d: Decoding) -> dict[str, Any]:
    """A transformers ``GenerationConfig`` from the Decoding alone: every sampling field set (never None), so
    ``generate`` fills nothing from a model folder's ``generation_config.json`` (transformers fills only None
    fields from it)."""
    sample = d.temperature > 0
    return {
        "max_new_tokens": int(d.max_new_tokens), "min_new_tokens": 0, "do_sample": bool(sample),
        "num_beams": int(d.num_beams), "num_beam_groups": 1, "num_return_sequences": 1,
        "temperature": float(d.temperature) if sample else 1.0, "top_p": float(d.top_p) if sample else 1.0,
        "top_k": int(d.top_k or 0) if sample else 0, "min_p": float(d.min_p) if sample else 0.0,
        "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
        "repetition_penalty": float(d.repetition_penalty), "encoder_repetition_penalty": 1.0,
        "no_repeat_ngram_size": 0, "length_penalty": 1.0, "diversity_penalty": 0.0,
        "early_stopping": False,
    }


#: the contract's fields, in the order tables show them
CONTRACT_FIELDS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                   "presence_penalty", "frequency_penalty", "num_beams", "seed", "stop")


def effective(flavour: str, body: dict[str, Any], *, reasoning: bool = False) -> dict[str, Any]:
    """What ``flavour`` reads from a sent ``body``, in the contract's names (the inverse of :func:`request_fields`,
    read off the body itself, so a mapping bug shows here). A field the engine is not sent and does not fix is
    None (left to the server's default or the model's generation config)."""
    out: dict[str, Any] = dict.fromkeys(CONTRACT_FIELDS)
    out["max_new_tokens"] = body.get("max_tokens", body.get("max_completion_tokens"))
    out["seed"] = body.get("seed")
    out["stop"] = list(body.get("stop") or [])
    if flavour == "transformers":
        gc = json.loads(body["generation_config"]) if isinstance(body.get("generation_config"), str) else {}
        sample = bool(gc.get("do_sample"))
        out.update(temperature=float(gc.get("temperature", 1.0)) if sample else 0.0,
                   top_p=gc.get("top_p") if sample else 1.0, top_k=gc.get("top_k") if sample else 0,
                   min_p=gc.get("min_p") if sample else 0.0, repetition_penalty=gc.get("repetition_penalty"),
                   presence_penalty=0.0, frequency_penalty=0.0, num_beams=gc.get("num_beams"))
        if out["max_new_tokens"] is None:
            out["max_new_tokens"] = gc.get("max_new_tokens")
        return out
    out.update(temperature=body.get("temperature"), top_p=body.get("top_p"),
               presence_penalty=body.get("presence_penalty"), frequency_penalty=body.get("frequency_penalty"))
    if flavour in ("vllm", "sglang"):
        k = body.get("top_k")
        out.update(top_k=0 if k is not None and k <= 0 else k, min_p=body.get("min_p"),
                   repetition_penalty=body.get("repetition_penalty"))
    elif flavour == "llamacpp":
        out.update(top_k=body.get("top_k"), min_p=body.get("min_p"), repetition_penalty=body.get("repeat_penalty"))
    elif flavour == "tgi" or flavour in ("openai", "azure"):  # applies none of these unless asked
        out.update(top_k=0, min_p=0.0, repetition_penalty=1.0)
    if flavour == "vllm":
        out["num_beams"] = int(body.get("n") or 1) if body.get("use_beam_search") else 1
    elif flavour in ("sglang", "llamacpp", "tgi", "ollama", "openai", "azure", UNKNOWN):
        out["num_beams"] = 1
    if reasoning and flavour in ("openai", "azure"):  # the API samples at fixed settings it does not report
        out.update(temperature=None, top_p=None)
    return out


def mismatches(label: Decoding, eff: dict[str, Any] | None) -> list[str]:
    """The contract fields whose effective value differs from the label's (None: not pinned), e.g.
    ``["num_beams: 1 (label 4)", "top_k: server default (label off)"]``; [] when they agree."""
    if not eff:
        return []
    want = label.sampling()
    out: list[str] = []
    for f in CONTRACT_FIELDS:
        if f not in eff or f == "seed":
            continue
        got, exp = eff[f], want[f]
        if f == "temperature" and exp == 0 and got is not None and float(got) == 0:
            continue
        if f in ("top_p", "top_k", "min_p") and want["temperature"] == 0 and got is not None:
            continue  # greedy: the sampling filters do not act
        if got is None:
            out.append(f"{f}: server default (label {_word(f, exp)})")
        elif f == "stop":
            if list(got) != list(exp):
                out.append(f"stop: {got} (label {exp})")
        elif not _same(got, exp):
            out.append(f"{f}: {_word(f, got)} (label {_word(f, exp)})")
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return abs(float(a) - float(b)) < 1e-9
    except (TypeError, ValueError):
        return a == b


def _word(field: str, v: Any) -> str:
    if field in ("top_k",) and v in (0, -1):
        return "off"
    return f"{v:g}" if isinstance(v, float) else str(v)
