"""GREEN (Ostmeier et al. 2024, "GREEN: Generative Radiology Report Evaluation and Error Notation") from a LOCAL
judge model (or, optionally, one served behind an OpenAI-compatible endpoint).

GREEN asks a fine-tuned language model (e.g. a local copy of StanfordAIMI/GREEN-RadLlama2-7b) to compare a
candidate report with the reference and to write, per error category (a)-(f), the number of clinically
significant and insignificant errors and the number of matched findings; per pair

    GREEN = matched / (matched + clinically significant errors),  0 when no finding is matched

(:func:`medvlm_audit.suites.reports.clinical.formulas.green_scores`), averaged over the pairs whose judgement could be read.

The prompt (:data:`GREEN_PROMPT`, each report cut to its first 300 words), the chat template
(:data:`GREEN_CHAT_TEMPLATE`, with the tokenizer's end-of-sequence token as padding, left padding and
``add_eos_token=True``) and greedy decoding to 2048 tokens in all are verbatim from the released code,
github.com/Stanford-AIMI/GREEN at commit d72c1951e69683b93405968901fd4f14cc6c27b0 (``green_score/utils.py``
``make_prompt``; ``green_score/green.py``). The parser follows the released ``parse_error_counts`` (a section
is the text after ``[<Category>]:``; lines ``(a) ...: N.`` .. ``(f)`` or ``(1)`` .. ``(6)``; a section starting
with "No" has no errors; the matched count is the number opening its section) with one deliberate difference:
where the released code silently counts a missing section or an unreadable count as 0 (which scores a garbage
judgement 0), :func:`parse_green` rejects the output, and the pair is left out and counted in ``note``. A
section also ends at the next ``[...]:`` header, not only at a blank line.

Server mode (``base_url=``): the prompt goes as one user message to ``/chat/completions`` (temperature 0) with
:class:`medvlm_audit.models.openai_compat.OpenAIChatModel`; the server applies its own chat template, so serve
the judge with the GREEN template (vLLM ``--chat-template``) to match the local path. The API key is read from
the environment variable named by ``api_key_env`` at request time and never stored.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medvlm_audit import stats
from medvlm_audit.aio import run_sync
from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.suites.reports.clinical import ClinicalScore, check_pairs
from medvlm_audit.suites.reports.clinical.folders import model_folder, torch_device, transformers_modules
from medvlm_audit.suites.reports.clinical.formulas import green_scores

METRIC = "GREEN"
SOURCE = "Stanford-AIMI/GREEN@d72c1951e69683b93405968901fd4f14cc6c27b0"

#: the released prompt (``make_prompt``), verbatim; ``{reference}`` and ``{candidate}`` are the two reports
GREEN_PROMPT = (
    "Objective: Evaluate the accuracy of a candidate radiology report in comparison to a reference "
    "radiology report composed by expert radiologists.\n"
    "\n"
    "    Process Overview: You will be presented with:\n"
    "\n"
    "    1. The criteria for making a judgment.\n"
    "    2. The reference radiology report.\n"
    "    3. The candidate radiology report.\n"
    "    4. The desired format for your assessment.\n"
    "\n"
    "    1. Criteria for Judgment:\n"
    "\n"
    "    For each candidate report, determine:\n"
    "\n"
    "    The count of clinically significant errors.\n"
    "    The count of clinically insignificant errors.\n"
    "\n"
    "    Errors can fall into one of these categories:\n"
    "\n"
    "    a) False report of a finding in the candidate.\n"
    "    b) Missing a finding present in the reference.\n"
    "    c) Misidentification of a finding's anatomic location/position.\n"
    "    d) Misassessment of the severity of a finding.\n"
    "    e) Mentioning a comparison that isn't in the reference.\n"
    "    f) Omitting a comparison detailing a change from a prior study.\n"
    "    Note: Concentrate on the clinical findings rather than the report's writing style. "
    "Evaluate only the findings that appear in both reports.\n"
    "\n"
    "    2. Reference Report:\n"
    "    {reference}\n"
    "\n"
    "    3. Candidate Report:\n"
    "    {candidate}\n"
    "\n"
    "    4. Reporting Your Assessment:\n"
    "\n"
    "    Follow this specific format for your output, even if no errors are found:\n"
    "    ```\n"
    "    [Explanation]:\n"
    "    <Explanation>\n"
    "\n"
    "    [Clinically Significant Errors]:\n"
    "    (a) <Error Type>: <The number of errors>. <Error 1>; <Error 2>; ...; <Error n>\n"
    "    ....\n"
    "    (f) <Error Type>: <The number of errors>. <Error 1>; <Error 2>; ...; <Error n>\n"
    "\n"
    "    [Clinically Insignificant Errors]:\n"
    "    (a) <Error Type>: <The number of errors>. <Error 1>; <Error 2>; ...; <Error n>\n"
    "    ....\n"
    "    (f) <Error Type>: <The number of errors>. <Error 1>; <Error 2>; ...; <Error n>\n"
    "\n"
    "    [Matched Findings]:\n"
    "    <The number of matched findings>. <Finding 1>; <Finding 2>; ...; <Finding n>\n"
    "    ```\n"
)

#: the released chat template (``GREEN.__init__``), verbatim
GREEN_CHAT_TEMPLATE = (
    "{% for message in messages %}\n{% if message['from'] == 'human' %}\n{{ '<|user|>\n' + message['value'] + "
    "eos_token }}\n{% elif message['from'] == 'system' %}\n{{ '<|system|>\n' + message['value'] + eos_token }}\n"
    "{% elif message['from'] == 'gpt' %}\n{{ '<|assistant|>\n'  + message['value'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)

CATEGORIES = ("Clinically Significant Errors", "Clinically Insignificant Errors", "Matched Findings")
ERROR_TYPES = (
    "False report of a finding in the candidate",
    "Missing a finding present in the reference",
    "Misidentification of a finding's anatomic location/position",
    "Misassessment of the severity of a finding",
    "Mentioning a comparison that isn't in the reference",
    "Omitting a comparison detailing a change from a prior study",
)
MAX_WORDS = 300  # released: each report cut to its first 300 words
MAX_LENGTH = 2048  # released: prompt + judgement, in tokens


def green_prompt(reference: str, candidate: str, max_words: int = MAX_WORDS) -> str:
    """The released GREEN prompt for one pair (each report cut to its first ``max_words`` words)."""
    ref = " ".join(str(reference).split()[:max_words])
    cand = " ".join(str(candidate).split()[:max_words])
    return GREEN_PROMPT.format(reference=ref, candidate=cand)


def clean_completion(text: str) -> str:
    """The judge's text after its last ``<|assistant|>`` tag, without ``</s>`` and ``<unk>`` (as released)."""
    if "<|assistant|>" in text:
        text = text.split("<|assistant|>")[-1]
    return text.replace("</s>", "").replace("<unk>", "")


# ------------------------------------------------------------------------------------------ parser


class GreenParseError(ValueError):
    """A judge output that does not hold a readable GREEN judgement; ``reason`` is a short category."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class GreenJudgement:
    """One parsed judgement: error counts per category (a)-(f) and the number of matched findings."""

    significant: tuple[int, ...]
    insignificant: tuple[int, ...] | None  # None when that section is missing or unreadable (not scored)
    matched: int


_COUNT = re.compile(r":\s*(\d+)\s*(?:\.|;|$)")
_NONE = re.compile(r":\s*(?:no|none)\b", re.IGNORECASE)
_HEADER = re.compile(r"\n\s*\[[^\]\n]+\]:")
_BLANK = re.compile(r"\n\s*\n")


def _section(text: str, category: str) -> str | None:
    m = re.search(r"\[" + re.escape(category) + r"\]:", text)
    if m is None:
        return None
    rest = text[m.end():].lstrip()
    end = len(rest)
    for pat in (_BLANK, _HEADER):
        hit = pat.search(rest)
        if hit is not None:
            end = min(end, hit.start())
    return rest[:end]


def _error_counts(section: str, what: str) -> tuple[int, ...]:
    if section.startswith("No"):
        return (0,) * 6
    lines = re.findall(r"\(([a-f])\) (.*)", section)
    keys = "abcdef"
    if not lines:
        lines = re.findall(r"\(([1-6])\) (.*)", section)
        keys = "123456"
    if not lines:
        raise GreenParseError(f"{what} without (a)-(f) lines")
    counts = [0] * 6
    for key, rest in lines:
        m = _COUNT.search(rest)
        if m is not None:
            counts[keys.index(key)] = int(m.group(1))
        elif _NONE.search(rest) is None:
            raise GreenParseError(f"{what} line without a count", f"({key}) {rest[:60]}")
    return tuple(counts)


def parse_green(text: str) -> GreenJudgement:
    """The judgement in one GREEN output, or :class:`GreenParseError` (never a silent 0).

    >>> out = ("[Explanation]:\\nOne finding missed.\\n\\n[Clinically Significant Errors]:\\n"
    ...        "(a) False report of a finding in the candidate: 0.\\n"
    ...        "(b) Missing a finding present in the reference: 1. Effusion\\n\\n"
    ...        "[Clinically Insignificant Errors]:\\nNo errors.\\n\\n[Matched Findings]:\\n2. Cardiomegaly; Edema")
    >>> parse_green(out)
    GreenJudgement(significant=(0, 1, 0, 0, 0, 0), insignificant=(0, 0, 0, 0, 0, 0), matched=2)
    """
    if not isinstance(text, str) or not text.strip():
        raise GreenParseError("empty output")
    text = clean_completion(text)
    sig_text = _section(text, CATEGORIES[0])
    if sig_text is None:
        raise GreenParseError("no [Clinically Significant Errors] section")
    significant = _error_counts(sig_text, "significant errors")
    ins_text = _section(text, CATEGORIES[1])
    try:
        insignificant = None if ins_text is None else _error_counts(ins_text, "insignificant errors")
    except GreenParseError:
        insignificant = None
    matched_text = _section(text, CATEGORIES[2])
    if matched_text is None:
        raise GreenParseError("no [Matched Findings] section")
    if matched_text.startswith("No"):
        matched = 0
    else:
        m = re.match(r"(\d+)\s*(?:\.|;|$)", matched_text)
        if m is None:
            raise GreenParseError("matched findings without a count", matched_text[:60])
        matched = int(m.group(1))
    return GreenJudgement(significant, insignificant, matched)


# ------------------------------------------------------------------------------------------ judges

Judge = Callable[[list[str]], list[str | None]]  # prompts -> judge outputs (None: the call failed)


class LocalJudge:
    """A causal LM from a local folder with the released chat template, greedy decoding, left padding."""

    def __init__(self, folder: Path, *, device: str, dtype: str | None = None, max_new_tokens: int | None = None,
                 max_length: int = MAX_LENGTH, batch_size: int = 8, trust_remote_code: bool = False) -> None:
        torch, tf = transformers_modules(METRIC)
        self._torch = torch
        self.folder, self.device = folder, device
        self.max_new_tokens, self.max_length, self.batch_size = max_new_tokens, int(max_length), int(batch_size)
        name = dtype or ("float16" if device.startswith("cuda") else "float32")
        torch_dtype = getattr(torch, name, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ConfigError(f"{METRIC}: dtype must be a torch dtype name (float32, float16, bfloat16), got {dtype!r}")
        kw = {"dtype" if int(tf.__version__.split(".")[0]) >= 5 else "torch_dtype": torch_dtype}
        try:
            self.tokenizer = tf.AutoTokenizer.from_pretrained(
                str(folder), local_files_only=True, add_eos_token=True, use_fast=True, padding_side="left",
                trust_remote_code=trust_remote_code)
            self.model = tf.AutoModelForCausalLM.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=trust_remote_code, **kw).eval().to(device)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{METRIC}: cannot load the judge model from {folder}: {e}") from e
        tok = self.tokenizer
        if tok.eos_token is None:
            raise ConfigError(f"{METRIC}: the tokenizer in {folder} has no end-of-sequence token (eos_token)")
        tok.chat_template = GREEN_CHAT_TEMPLATE
        tok.pad_token = tok.eos_token
        tok.padding_side = "left"
        tok.clean_up_tokenization_spaces = True

    def describe(self) -> str:
        budget = (f"max_new_tokens {self.max_new_tokens}" if self.max_new_tokens is not None
                  else f"max_length {self.max_length} tokens in all")
        return f"local judge {self.folder.name} (greedy, {budget})"

    def render(self, prompt: str) -> str:
        """The judge's input text: the prompt as the human turn of the released chat template."""
        return self.tokenizer.apply_chat_template(
            [{"from": "human", "value": prompt}, {"from": "gpt", "value": ""}], tokenize=False,
            add_generation_prompt=True)

    def __call__(self, prompts: list[str]) -> list[str | None]:
        torch, tok = self._torch, self.tokenizer
        out: list[str | None] = []
        for lo in range(0, len(prompts), self.batch_size):
            enc = tok([self.render(p) for p in prompts[lo:lo + self.batch_size]], return_tensors="pt",
                      padding=True, truncation=True, max_length=self.max_length)
            enc = {k: v.to(self.device) for k, v in enc.items()}
            budget = ({"max_new_tokens": self.max_new_tokens} if self.max_new_tokens is not None
                      else {"max_length": self.max_length})
            with torch.inference_mode():
                seq = self.model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                          do_sample=False, num_beams=1, **budget)
            new = seq[:, enc["input_ids"].shape[1]:]
            out.extend(clean_completion(t) for t in tok.batch_decode(new, skip_special_tokens=True))
        return out


class ServerJudge:
    """The judge behind an OpenAI-compatible endpoint (temperature 0), through the project's chat client."""

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None, max_new_tokens: int = 1024,
                 timeout_s: float = 300.0, max_concurrency: int = 8) -> None:
        from medvlm_audit.models.openai_compat import OpenAIChatModel

        self.model_name, self.max_new_tokens = model, int(max_new_tokens)
        self.client = OpenAIChatModel(name="green-judge", model=model, base_urls=base_url, api_key_env=api_key_env,
                                      timeout_s=timeout_s, max_concurrency=max_concurrency, modality="text_only")

    def describe(self) -> str:
        return (f"judge {self.model_name.rstrip('/').rsplit('/', 1)[-1]} at an OpenAI-compatible endpoint (temperature 0, max_tokens "
                f"{self.max_new_tokens}; the server's chat template)")

    def __call__(self, prompts: list[str]) -> list[str | None]:
        from medvlm_audit.models.base import Decoding, Message, ModelInput

        dec = Decoding(max_new_tokens=self.max_new_tokens, temperature=0.0, logprobs=False)
        inputs = [ModelInput(messages=(Message("user", p),), decoding=dec) for p in prompts]

        async def ask() -> list[Any]:
            try:
                return await self.client.generate(inputs)
            finally:
                await self.client.aclose()

        return [r.text if r.ok and r.text is not None else None for r in run_sync(ask())]


# ------------------------------------------------------------------------------------------ metric


class GreenMetric:
    """GREEN with a judge; :meth:`generate` (prompts -> outputs) is the only step that calls a model."""

    name = "green"

    def __init__(self, judge: Judge, describe: str, max_words: int = MAX_WORDS) -> None:
        self.judge, self.judge_text, self.max_words = judge, describe, int(max_words)
        self.last_outputs: list[str | None] = []

    def generate(self, prompts: list[str]) -> list[str | None]:
        """One judge output per prompt (None where the judge call failed)."""
        return self.judge(prompts)

    def judgements(self, hypotheses: Sequence[str], references: Sequence[str]) -> list[GreenJudgement | str]:
        """Per pair the parsed judgement, or the reason it could not be read."""
        hyps, refs = check_pairs(METRIC, hypotheses, references)
        outputs = self.generate([green_prompt(r, h, self.max_words) for h, r in zip(hyps, refs)]) if hyps else []
        if len(outputs) != len(hyps):
            raise AuditError(f"{METRIC}: the judge returned {len(outputs)} outputs for {len(hyps)} prompts")
        self.last_outputs = list(outputs)
        got: list[GreenJudgement | str] = []
        for o in outputs:
            if o is None:
                got.append("judge call failed")
                continue
            try:
                got.append(parse_green(o))
            except GreenParseError as e:
                got.append(e.reason)
        return got

    def score(self, hypotheses: Sequence[str], references: Sequence[str], *, B: int = 1000,
              seed: int = 0) -> list[ClinicalScore]:
        got = self.judgements(hypotheses, references)
        ok = [g for g in got if isinstance(g, GreenJudgement)]
        bad = Counter(g for g in got if isinstance(g, str))
        matched = np.array([g.matched for g in ok], dtype=np.int64)
        sig = np.array([g.significant for g in ok], dtype=np.int64).reshape(len(ok), 6)
        values = green_scores(matched, sig)
        est = stats.bootstrap_mean(values, B=B, seed=seed)
        est_err = stats.bootstrap_mean(sig.sum(axis=1).astype(np.float64), B=B, seed=seed)
        note = ""
        if bad:
            why = "; ".join(f"{k} {v}" for k, v in bad.most_common())
            note = f"{sum(bad.values())} of {len(got)} judge outputs unparsable (left out): {why}"
        elif not got:
            note = "no pairs to score"
        base = f"GREEN (Ostmeier et al. 2024; prompt and parser of {SOURCE}): {self.judge_text}"
        return [
            ClinicalScore("green", est.point, est.n,
                          f"{base}; per pair matched / (matched + clinically significant errors), 0 when no "
                          f"finding matched; mean over parsed pairs; {est.method}",
                          est.ci_low, est.ci_high, "fraction", note),
            ClinicalScore("green_significant_errors", est_err.point, est_err.n,
                          f"{base}; clinically significant errors (a)-(f) per report, mean over parsed pairs; "
                          f"{est_err.method}", est_err.ci_low, est_err.ci_high, "errors per report", note),
        ]


def load(path: Path, *, max_new_tokens: int | None = None, max_length: int = MAX_LENGTH, batch_size: int = 8,
         device: str | None = None, dtype: str | None = None, trust_remote_code: bool = False,
         max_words: int = MAX_WORDS, base_url: str | None = None, model: str | None = None,
         api_key_env: str | None = None, timeout_s: float = 300.0, max_concurrency: int = 8) -> GreenMetric:
    """GREEN with the judge in the local folder ``path``; with ``base_url`` the judge is the served model
    ``model`` (default: ``path`` as given, e.g. "StanfordAIMI/GREEN-RadLlama2-7b") instead."""
    if max_new_tokens is not None and int(max_new_tokens) < 1:
        raise ConfigError(f"{METRIC}: max_new_tokens must be >= 1, got {max_new_tokens}")
    if int(batch_size) < 1 or int(max_length) < 16 or int(max_words) < 1:
        raise ConfigError(f"{METRIC}: need batch_size >= 1, max_length >= 16 and max_words >= 1")
    if base_url:
        judge: Any = ServerJudge(base_url, model or str(path), api_key_env=api_key_env,
                                 max_new_tokens=max_new_tokens or 1024, timeout_s=timeout_s,
                                 max_concurrency=max_concurrency)
    else:
        folder = model_folder(Path(path), "judge model", METRIC)
        judge = LocalJudge(folder, device=torch_device(device), dtype=dtype, max_new_tokens=max_new_tokens,
                           max_length=max_length, batch_size=batch_size, trust_remote_code=trust_remote_code)
    return GreenMetric(judge, judge.describe(), max_words=max_words)
