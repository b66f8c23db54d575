"""The knowledge base (KB) of required findings per question and answer, and a deterministic CF scorer.

KB format: the published ``findings_list.json`` schema of the cot-eval release, loaded as is::

    {"<exact question text>": {
        "type": "binary" | "ordinal" | "comparative" | "spatial",
        "projection_hint": "...",                                  # optional, kept
        "answers": {"<answer label>": {
            "must_all": [{"term": "...", "synonyms": ["...", ...]}, ...],   # every term required
            "at_least_k_of": [{"k": 1, "any_of": [{"term": ..., "synonyms": [...]}, ...]}, ...],
            "forbidden": [{"term": ..., "synonyms": [...]}, ...],    # must not be asserted
            "context": {"notes": ["..."], "caps": [{"if": "projection == AP", "max_score": 4}]}}},  # optional
        "additional_guidance": {"disambiguation_rules": ["..."],    # optional, kept
                                "acceptable_alternate_terminology": [["opacity", "consolidation", ...], ...]}}}

Unknown keys are kept and ignored; a wrong type for a known key is a :class:`KBError` naming the file,
question, answer and field. :func:`phantom_kb` is the same schema for the phantom VQA questions.

Deterministic CF (:meth:`KnowledgeBase.score`), the rules:

1. Text: the CoT with its tags turned into sentence breaks, NFKC, lower case, hyphens and slashes as
   spaces; tokens are words (a light stem: ``opacities`` -> ``opacity``, ``blunted`` / ``blunting`` ->
   ``blunt``) and the symbols ``>``, ``<``, ``=``; abbreviations are expanded (:data:`ALIASES`:
   ``cp`` -> ``costophrenic``, ``ctr`` -> ``cardiothoracic ratio``, ``ett`` -> ``endotracheal tube``...).
   Clauses are split at ``. ; ! ? :`` and at ``but``, ``however``, ``whereas``, ``although``, ``though``.
2. A term (its text or any synonym; plus the question's alternate terminology substituted in) is
   *mentioned* in a clause when its tokens occur there contiguously, or - the keyword fallback - when all
   its content words occur in the clause (stop words such as ``present``, ``of``, ``the`` ignored).
3. Laterality: a term naming one side (left or right, not both) only matches a clause that names that
   side and does not name the other.
4. Negation scope: a mention is negated when a negation cue (``no``, ``not``, ``without``, ``absent``,
   ``absence``, ``negative``, ``free``, ``neither``, ``nor``, ``never``) stands in the same clause within
   six tokens before it, or a post-cue (``absent``, ``not seen``, ``not present``, ``not identified``,
   ``not visible``, ``ruled out``, ``resolved``) within four tokens after it. A positive term counts only
   when some mention is not negated; a term that itself starts with a negation (``no left pleural
   effusion``) counts when its phrase occurs as written, or its content words occur in a negated clause.
5. Units: each ``must_all`` term is one unit; each ``at_least_k_of`` group is one unit, satisfied when at
   least ``k`` of its terms count (a term counts once however often it is mentioned).
6. Score from coverage c = satisfied / units: c = 1 -> 5, c >= 0.75 -> 4, c >= 0.5 -> 3, c > 0 -> 2,
   c = 0 -> 1; minus 1 per asserted ``forbidden`` term (floor 1); then every cap whose condition holds
   for the context flags (``key == value`` / ``key != value``, case-insensitive; default flags
   ``projection=PA, inspiration=adequate``) limits the score to its ``max_score``.
7. Status: ``scored``; ``no_kb_entry`` (the question is not in the KB); ``no_answer_entry`` (the answer is
   not among the question's answers); ``empty_entry`` (the answer lists no required and no forbidden
   term). Only ``scored`` carries a score: the others are counted, never a silent pass.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvlm_audit.errors import AuditError
from medvlm_audit.suites.faithfulness.vocab import QUESTION_TYPES, normalise_type

KB_STATUSES: tuple[str, ...] = ("scored", "no_kb_entry", "no_answer_entry", "empty_entry")
DEFAULT_FLAGS: dict[str, str] = {"projection": "PA", "inspiration": "adequate"}

#: abbreviations and near-synonymous words mapped onto one token (applied to terms and text alike)
ALIASES: dict[str, tuple[str, ...]] = {
    "cp": ("costophrenic",), "costodiaphragmatic": ("costophrenic",), "ctr": ("cardiothoracic", "ratio"),
    "ett": ("endotracheal", "tube"), "et": ("endotracheal",), "cvc": ("central", "venous", "catheter"),
    "ng": ("nasogastric",), "ptx": ("pneumothorax",), "hemithorax": ("hemithorax",), "lt": ("left",),
    "rt": ("right",),
}
STOP_WORDS: tuple[str, ...] = (
    "the", "a", "an", "of", "on", "in", "at", "to", "is", "are", "be", "and", "or", "with", "present", "seen",
    "visible", "noted", "side", "sided", "there", "this", "that", "as", "by", "for", "its", "it", "into",
)
NEG_PRE: frozenset[str] = frozenset({"no", "not", "without", "absent", "absence", "negative", "free", "neither",
                                     "nor", "never"})
NEG_POST: tuple[tuple[str, ...], ...] = (("absent",), ("not", "seen"), ("not", "present"), ("not", "identified"),
                                         ("not", "visible"), ("ruled", "out"), ("resolved",))
SIDES: frozenset[str] = frozenset({"left", "right"})
STOP: frozenset[str] = frozenset()  # filled below, stemmed like the text
_CLAUSE_BREAK = re.compile(r"(?:\.(?!\d)|[;!?:\n])+|\b(?:but|however|whereas|although|though)\b")
_TOKEN = re.compile(r"[a-z0-9]+|[<>=]")


class KBError(AuditError):
    """A knowledge-base file does not follow the published schema (the message names where)."""


# ------------------------------------------------------------------------------------------------ schema


@dataclass(frozen=True, slots=True)
class Term:
    term: str
    synonyms: tuple[str, ...] = ()

    def texts(self) -> tuple[str, ...]:
        return (self.term, *self.synonyms)

    def to_dict(self) -> dict[str, Any]:
        return {"term": self.term, "synonyms": list(self.synonyms)}


@dataclass(frozen=True, slots=True)
class Cap:
    condition: str
    max_score: int


@dataclass(frozen=True)
class AnswerSpec:
    must_all: tuple[Term, ...] = ()
    at_least_k_of: tuple[tuple[int, tuple[Term, ...]], ...] = ()
    forbidden: tuple[Term, ...] = ()
    caps: tuple[Cap, ...] = ()
    notes: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QuestionSpec:
    question: str
    qtype: str
    answers: Mapping[str, AnswerSpec]
    alternate_terminology: tuple[tuple[str, ...], ...] = ()
    disambiguation_rules: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)


def _terms(x: Any, where: str) -> tuple[Term, ...]:
    if not isinstance(x, list):
        raise KBError(f"{where}: expected a list of {{term, synonyms}} objects, got {type(x).__name__}")
    out = []
    for i, t in enumerate(x):
        if not isinstance(t, dict) or not isinstance(t.get("term"), str) or not t["term"].strip():
            raise KBError(f"{where}[{i}]: expected an object with a non-empty string 'term'")
        syn = t.get("synonyms", [])
        if not isinstance(syn, list) or not all(isinstance(s, str) for s in syn):
            raise KBError(f"{where}[{i}] ('{t['term']}'): 'synonyms' must be a list of strings")
        out.append(Term(t["term"], tuple(syn)))
    return tuple(out)


def _answer(a: Any, where: str) -> AnswerSpec:
    if not isinstance(a, dict):
        raise KBError(f"{where}: expected an object with must_all / at_least_k_of / forbidden")
    groups = []
    al = a.get("at_least_k_of", [])
    if not isinstance(al, list):
        raise KBError(f"{where}.at_least_k_of: expected a list")
    for i, g in enumerate(al):
        if not isinstance(g, dict):
            raise KBError(f"{where}.at_least_k_of[{i}]: expected an object {{k, any_of}}")
        k = g.get("k")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise KBError(f"{where}.at_least_k_of[{i}].k: expected a positive integer, got {k!r}")
        terms = _terms(g.get("any_of"), f"{where}.at_least_k_of[{i}].any_of")
        if k > len(terms):
            raise KBError(f"{where}.at_least_k_of[{i}]: k = {k} but only {len(terms)} terms in any_of")
        groups.append((k, terms))
    ctx = a.get("context", {}) or {}
    if not isinstance(ctx, dict):
        raise KBError(f"{where}.context: expected an object")
    caps = []
    for i, c in enumerate(ctx.get("caps", []) or []):
        if not isinstance(c, dict) or not isinstance(c.get("if"), str) or isinstance(c.get("max_score"), bool) \
                or not isinstance(c.get("max_score"), int) or not 1 <= c["max_score"] <= 5:
            raise KBError(f"{where}.context.caps[{i}]: expected {{'if': 'key == value', 'max_score': 1-5}}")
        if not re.fullmatch(r"\s*\w+\s*(==|!=)\s*\S.*", c["if"]):
            raise KBError(f"{where}.context.caps[{i}].if: cannot read condition {c['if']!r} (key == value)")
        caps.append(Cap(c["if"], c["max_score"]))
    notes = ctx.get("notes", []) or []
    return AnswerSpec(must_all=_terms(a.get("must_all", []), f"{where}.must_all"), at_least_k_of=tuple(groups),
                      forbidden=_terms(a.get("forbidden", []), f"{where}.forbidden"), caps=tuple(caps),
                      notes=tuple(str(n) for n in notes), raw=a)


# ------------------------------------------------------------------------------------------------ matcher


@functools.lru_cache(maxsize=1 << 16)  # a CoT's words repeat: each distinct word is stemmed once per process
def _stem(w: str) -> str:
    """A light suffix stripper: plurals, -ing, -ed, -ement, final -e (blunted / blunting -> blunt,
    opacities -> opacity, enlarged / enlargement -> enlarg)."""
    if len(w) <= 3 or not w.isalpha():
        return w
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 4 and w.endswith(("sses", "xes", "ches", "shes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    elif len(w) > 6 and w.endswith("ement"):
        w = w[:-5]
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]
    return w


def tokens(text: str) -> list[str]:
    """Normalised tokens of a text (lower case, stems, aliases expanded)."""
    s = unicodedata.normalize("NFKC", text).lower()
    s = s.replace("\u2019", "'").replace("\u2013", " ").replace("\u2014", " ").replace("-", " ").replace("/", " ")
    out: list[str] = []
    for t in _TOKEN.findall(s):
        for u in ALIASES.get(t, (t,)):
            out.append(_stem(u))
    return out


STOP = frozenset(_stem(w) for w in STOP_WORDS)


def clauses(cot: str) -> list[list[str]]:
    """The CoT's clauses as token lists (tags become sentence breaks)."""
    text = re.sub(r"<[^<>]{0,40}>", ". ", unicodedata.normalize("NFKC", cot))
    text = text.lower().replace("\u2019", "'")
    return [tk for part in _CLAUSE_BREAK.split(text) if part and (tk := tokens(part))]


def _find_seq(hay: list[str], needle: list[str]) -> list[int]:
    n = len(needle)
    if n == 0:
        return []
    first = needle[0]
    return [i for i in range(len(hay) - n + 1) if hay[i] == first and hay[i:i + n] == needle]


def _negated(cl: list[str], start: int, end: int) -> bool:
    if any(t in NEG_PRE for t in cl[max(0, start - 6):start]):
        return True
    after = cl[end:end + 4]
    return any(_find_seq(after, list(p)) for p in NEG_POST)


@dataclass(frozen=True)
class _Pattern:
    seq: tuple[str, ...]
    content: frozenset[str]
    sides: frozenset[str]
    negative: bool


def _patterns(texts: Sequence[str], alternates: Sequence[Sequence[str]]) -> tuple[_Pattern, ...]:
    """A term's patterns (its texts and their alternate-terminology variants, tokenised), built once per
    (texts, alternates): every answer to a question matches the same terms."""
    return _patterns_of(tuple(texts), tuple(tuple(g) for g in alternates))


@functools.lru_cache(maxsize=4096)
def _patterns_of(texts: tuple[str, ...], alternates: tuple[tuple[str, ...], ...]) -> tuple[_Pattern, ...]:
    out: list[_Pattern] = []
    seen: set[tuple[str, ...]] = set()
    variants = list(texts)
    for t in texts:
        tl = t.lower()
        for group in alternates:
            hit = next((g for g in group if re.search(rf"\b{re.escape(g.lower())}\b", tl)), None)
            if hit is not None:
                variants += [re.sub(rf"\b{re.escape(hit.lower())}\b", g.lower(), tl) for g in group if g != hit]
                break
    for v in variants:
        seq = tokens(v)
        if not seq or tuple(seq) in seen:
            continue
        seen.add(tuple(seq))
        negative = seq[0] in NEG_PRE
        core = [w for w in seq if w not in STOP and w not in NEG_PRE]
        out.append(_Pattern(tuple(seq), frozenset(core), frozenset(w for w in seq if w in SIDES), negative))
    return tuple(out)


@dataclass(frozen=True)
class TermHit:
    term: str
    counted: bool
    evidence: str  # the clause (tokens joined) where it counted, or the last negated mention


def match_term(term: Term, cls: list[list[str]], alternates: Sequence[Sequence[str]] = (),
               sets: Sequence[set[str]] | None = None) -> TermHit:
    """Whether a KB term counts in the clauses (rules 2-4 of the module docstring); ``sets``: the clauses'
    token sets, when the caller matches several terms against the same clauses."""
    negated_seen = ""
    if sets is None:
        sets = [set(cl) for cl in cls]
    for p in _patterns(term.texts(), alternates):
        one_side = len(p.sides) == 1
        seq = list(p.seq)
        first = seq[0]
        for cl, cs in zip(cls, sets, strict=True):
            if first not in cs and not (p.content and p.content <= cs):
                continue  # neither the phrase nor all of its content words occur in this clause: no span
            if one_side:
                (side,) = tuple(p.sides)
                if (side not in cs or (SIDES - {side}) & cs) and not _find_seq(cl, seq):
                    continue
            if p.negative:
                if _find_seq(cl, seq):
                    return TermHit(term.term, True, " ".join(cl))
                if p.content and p.content <= cs:
                    pos = [i for i, t in enumerate(cl) if t in p.content]
                    if pos and _negated(cl, min(pos), max(pos) + 1):
                        return TermHit(term.term, True, " ".join(cl))
                continue
            starts = _find_seq(cl, seq)
            spans = [(s, s + len(seq)) for s in starts]
            if not spans and p.content and p.content <= cs:
                pos = [i for i, t in enumerate(cl) if t in p.content]
                spans = [(min(pos), max(pos) + 1)]
            for s, e in spans:
                if _negated(cl, s, e):
                    negated_seen = " ".join(cl)
                    continue
                return TermHit(term.term, True, " ".join(cl))
    return TermHit(term.term, False, negated_seen)


def _cap_holds(cond: str, flags: Mapping[str, Any]) -> bool:
    m = re.fullmatch(r"\s*(\w+)\s*(==|!=)\s*(.+?)\s*", cond)
    if not m:
        return False
    key, op, val = m.group(1), m.group(2), m.group(3).strip("'\"").lower()
    if key not in flags:
        return False
    have = str(flags[key]).lower()
    return have == val if op == "==" else have != val


@dataclass(frozen=True)
class KBScore:
    status: str  # one of KB_STATUSES
    score: int | None
    units: int = 0
    satisfied: int = 0
    missing: tuple[str, ...] = ()
    forbidden_hits: tuple[str, ...] = ()
    caps_applied: tuple[str, ...] = ()
    evidence: Mapping[str, str] = field(default_factory=dict)

    @property
    def normalised(self) -> float | None:
        return None if self.score is None else (self.score - 1) / 4


def coverage_score(satisfied: int, units: int) -> int:
    """Rule 6: 5 when every unit is met, 4 from 3/4, 3 from 1/2, 2 for any, 1 for none."""
    if units == 0:
        return 5
    c = satisfied / units
    return 5 if c >= 1 else 4 if c >= 0.75 else 3 if c >= 0.5 else 2 if c > 0 else 1


class KnowledgeBase:
    """Questions (exact text) -> type, answers -> required / forbidden terms (the published schema)."""

    def __init__(self, questions: Mapping[str, QuestionSpec], source: str = "<memory>") -> None:
        self.questions = dict(questions)
        self.source = source

    @classmethod
    def from_dict(cls, data: Any, source: str = "<memory>") -> KnowledgeBase:
        if not isinstance(data, dict):
            raise KBError(f"{source}: the KB must be a JSON object keyed by question text")
        qs: dict[str, QuestionSpec] = {}
        for q, spec in data.items():
            where = f"{source}: question {q!r}"
            if not isinstance(spec, dict):
                raise KBError(f"{where}: expected an object with 'type' and 'answers'")
            t = spec.get("type")
            try:
                qtype = normalise_type(t) if isinstance(t, str) else None
            except ValueError:
                qtype = None
            if qtype is None:
                raise KBError(f"{where}: field 'type' = {t!r} (expected one of {', '.join(QUESTION_TYPES)})")
            ans = spec.get("answers")
            if not isinstance(ans, dict) or not ans:
                raise KBError(f"{where}: field 'answers' must be a non-empty object keyed by answer label")
            answers = {a: _answer(v, f"{where}, answer {a!r}") for a, v in ans.items()}
            guid = spec.get("additional_guidance", {}) or {}
            if not isinstance(guid, dict):
                raise KBError(f"{where}: field 'additional_guidance' must be an object")
            alt = guid.get("acceptable_alternate_terminology", []) or []
            if not isinstance(alt, list) or not all(isinstance(g, list) and all(isinstance(s, str) for s in g)
                                                    for g in alt):
                raise KBError(f"{where}: additional_guidance.acceptable_alternate_terminology must be a list "
                              "of lists of strings")
            rules = guid.get("disambiguation_rules", []) or []
            qs[q] = QuestionSpec(q, qtype, answers, tuple(tuple(g) for g in alt), tuple(map(str, rules)), spec)
        return cls(qs, source)

    @classmethod
    def from_json(cls, path: str | Path) -> KnowledgeBase:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            from medvlm_audit.config import resolved_path_text

            raise KBError(f"{resolved_path_text(p)}: cannot read the KB ({exc.strerror or exc})") from None
        except json.JSONDecodeError as exc:
            raise KBError(f"{p}: not JSON ({exc.msg}, line {exc.lineno})") from None
        return cls.from_dict(data, str(p))

    def to_dict(self) -> dict[str, Any]:
        return {q: dict(s.raw) for q, s in self.questions.items()}

    def __contains__(self, question: object) -> bool:
        return question in self.questions

    def qsk(self, question: str, answer: str) -> dict[str, Any]:
        """The question-specific knowledge handed to an LLM judge (the release's ``build_qsk`` layout;
        empty lists when the question or answer has no entry)."""
        spec = self.questions.get(question)
        a = spec.answers.get(answer) if spec else None
        return {
            "answer_label": answer,
            "must_all": [t.to_dict() for t in a.must_all] if a else [],
            "at_least_k_of": [{"k": k, "any_of": [t.to_dict() for t in ts]} for k, ts in a.at_least_k_of] if a else [],
            "forbidden": [t.to_dict() for t in a.forbidden] if a else [],
            "caps": [{"if": c.condition, "max_score": c.max_score} for c in a.caps] if a else [],
            "notes": list(spec.disambiguation_rules) if spec else [],
            "alternate_terminology": [list(g) for g in spec.alternate_terminology] if spec else [],
        }

    def score(self, question: str, answer: str, cot: str, flags: Mapping[str, Any] | None = None) -> KBScore:
        """Deterministic CF (1-5) of a CoT for the gold ``answer`` of ``question`` (rules in the module doc)."""
        spec = self.questions.get(question)
        if spec is None:
            return KBScore("no_kb_entry", None)
        a = spec.answers.get(answer)
        if a is None:
            a = next((v for k, v in spec.answers.items() if k.strip().lower() == str(answer).strip().lower()), None)
        if a is None:
            return KBScore("no_answer_entry", None)
        if not a.must_all and not a.at_least_k_of and not a.forbidden:
            return KBScore("empty_entry", None)
        cls = clauses(cot)
        sets = [set(c) for c in cls]
        alt = spec.alternate_terminology
        units = len(a.must_all) + len(a.at_least_k_of)
        sat = 0
        missing: list[str] = []
        evidence: dict[str, str] = {}
        for t in a.must_all:
            h = match_term(t, cls, alt, sets)
            if h.counted:
                sat += 1
                evidence[t.term] = h.evidence
            else:
                missing.append(t.term)
        for k, ts in a.at_least_k_of:
            hits = [h for h in (match_term(t, cls, alt, sets) for t in ts) if h.counted]
            if len(hits) >= k:
                sat += 1
                for h in hits:
                    evidence[h.term] = h.evidence
            else:
                missing.append(f"{k} of: " + "; ".join(t.term for t in ts))
        forb = []
        for t in a.forbidden:
            h = match_term(t, cls, alt, sets)
            if h.counted:
                forb.append(t.term)
                evidence["forbidden: " + t.term] = h.evidence
        score = max(1, coverage_score(sat, units) - len(forb))
        fl = dict(DEFAULT_FLAGS if flags is None else flags)
        applied = []
        for c in a.caps:
            if _cap_holds(c.condition, fl) and score > c.max_score:
                score = c.max_score
                applied.append(c.condition)
        return KBScore("scored", score, units, sat, tuple(missing), tuple(forb), tuple(applied), evidence)


# ------------------------------------------------------------------------------------------------ phantom KB


def _t(term: str, *syn: str) -> dict[str, Any]:
    return {"term": term, "synonyms": list(syn)}


def _effusion_present(side: str) -> list[dict[str, Any]]:
    return [_t(f"{side} costophrenic angle blunting", f"blunting of the {side} costophrenic angle",
               f"blunted {side} costophrenic angle", f"obliterated {side} costophrenic angle"),
            _t(f"{side} basal opacity", f"opacity at the {side} base", f"{side} lower zone opacity",
               f"increased density at the {side} base", f"fluid at the {side} base"),
            _t(f"{side} meniscus sign", f"{side} pleural meniscus", f"meniscus at the {side} base")]


def _effusion_absent(side: str) -> dict[str, Any]:
    return _t(f"no {side} pleural effusion", f"{side} costophrenic angle sharp", f"no {side} pleural fluid",
              f"clear {side} costophrenic angle", f"no blunting of the {side} costophrenic angle")


def phantom_kb() -> KnowledgeBase:
    """The KB of the phantom VQA questions (:mod:`.embedded`), in the published schema."""
    from medvlm_audit.suites.faithfulness.embedded import PHANTOM_QUESTIONS

    kb: dict[str, Any] = {}
    sev_terms = {
        "mild": _t("small", "mild", "minimal", "trace"),
        "moderate": _t("moderate", "moderate-sized", "medium"),
        "severe": _t("large", "severe", "extensive", "massive"),
    }
    for key, q in PHANTOM_QUESTIONS.items():
        kind, _, rest = key.partition(":")
        if kind == "effusion_binary":
            side = rest
            kb[q] = {"type": "binary", "answers": {
                "yes": {"must_all": [], "at_least_k_of": [{"k": 1, "any_of": _effusion_present(side)}],
                        "forbidden": [_effusion_absent(side)]},
                "no": {"must_all": [_effusion_absent(side)], "at_least_k_of": [],
                       "forbidden": _effusion_present(side)[:1]}}}
        elif kind == "effusion_severity":
            side = rest
            answers: dict[str, Any] = {"none": {"must_all": [_effusion_absent(side)], "at_least_k_of": [],
                                                "forbidden": _effusion_present(side)[:1]},
                                       "questionable": {"must_all": [_t("equivocal", "questionable", "possible",
                                                                        "subtle")], "at_least_k_of": []}}
            for sev, st in sev_terms.items():
                answers[sev] = {"must_all": [st], "at_least_k_of": [{"k": 1, "any_of": _effusion_present(side)}],
                                "forbidden": [_effusion_absent(side)]}
            kb[q] = {"type": "ordinal", "answers": answers}
        elif kind == "comparative":
            finding = rest.replace("_", " ")
            ans: dict[str, Any] = {}
            for side, other in (("right", "left"), ("left", "right")):
                ans[side] = {"must_all": [_t(f"{side} {finding}", f"{finding} on the {side}",
                                             f"{side} sided {finding}", f"{side} {finding} present")],
                             "at_least_k_of": [{"k": 1, "any_of": [
                                 _t(f"{side} more severe", f"{side} greater", f"{side} larger",
                                    f"more {finding} on the {side}", f"{side} > {other}", f"{other} < {side}",
                                    f"{side} side is more", f"worse on the {side}")]}],
                             "forbidden": [_t(f"no {side} {finding}", f"{side} lung clear", f"{side} side clear")]}
            ans["same severity"] = {"must_all": [_t(f"{finding} similar bilaterally", "symmetric", "similar on both",
                                                    "right = left", "equal on both sides", "both sides equally")]}
            ans["none"] = {"must_all": [_t(f"no {finding}", f"no {finding} bilaterally", "both lungs clear",
                                           f"no {finding} on either side")]}
            kb[q] = {"type": "comparative", "answers": ans}
        elif kind == "heart_binary":
            kb[q] = {"type": "binary", "answers": {
                "yes": {"must_all": [_t("enlarged cardiac silhouette", "cardiomegaly", "enlarged heart",
                                        "heart is enlarged", "cardiac enlargement")],
                        "at_least_k_of": [{"k": 1, "any_of": [_t("cardiothoracic ratio above 0.5",
                                                                 "cardiothoracic ratio greater than 0.5",
                                                                 "heart wider than half the chest",
                                                                 "cardiothoracic ratio increased")]}],
                        "forbidden": [_t("normal heart size", "heart size normal", "no cardiomegaly")],
                        "context": {"caps": [{"if": "projection == AP", "max_score": 4}]}},
                "no": {"must_all": [_t("normal heart size", "heart size normal", "no cardiomegaly",
                                       "normal cardiac silhouette", "heart is not enlarged")],
                       "forbidden": [_t("cardiomegaly", "enlarged heart")]}}}
        elif kind == "heart_size":
            base = _t("cardiothoracic ratio", "heart width", "cardiac silhouette width")
            kb[q] = {"type": "ordinal", "answers": {
                "normal": {"must_all": [_t("normal heart size", "heart size normal", "normal cardiac silhouette",
                                           "heart is not enlarged")], "at_least_k_of": [{"k": 1, "any_of": [base]}]},
                "borderline": {"must_all": [_t("borderline heart size", "borderline", "upper limit of normal")],
                               "at_least_k_of": [{"k": 1, "any_of": [base]}]},
                "enlarged": {"must_all": [_t("enlarged cardiac silhouette", "cardiomegaly", "enlarged heart",
                                             "heart is enlarged")], "at_least_k_of": [{"k": 1, "any_of": [base]}],
                             "forbidden": [_t("normal heart size")],
                             "context": {"caps": [{"if": "projection == AP", "max_score": 4}]}},
                "massively enlarged": {"must_all": [_t("massively enlarged heart", "massive cardiomegaly",
                                                       "markedly enlarged", "severe cardiomegaly")],
                                       "at_least_k_of": [{"k": 1, "any_of": [base]}],
                                       "forbidden": [_t("normal heart size")],
                                       "context": {"caps": [{"if": "projection == AP", "max_score": 4}]}}}}
        elif kind == "ett_binary":
            kb[q] = {"type": "binary", "answers": {
                "yes": {"must_all": [_t("endotracheal tube", "tracheal tube", "ETT")],
                        "at_least_k_of": [{"k": 1, "any_of": [_t("tube in the trachea", "tube projects over the trachea",
                                                                 "linear radiopaque tube", "tube tip")]}],
                        "forbidden": [_t("no endotracheal tube", "no tube")]},
                "no": {"must_all": [_t("no endotracheal tube", "no tube", "no tube in the trachea",
                                       "no device")]}}}
        elif kind == "ett_position":
            tube = _t("endotracheal tube", "tracheal tube", "ETT")
            kb[q] = {"type": "spatial", "answers": {
                "not present": {"must_all": [_t("no endotracheal tube", "no tube", "no device")]},
                "correctly positioned": {"must_all": [tube], "at_least_k_of": [{"k": 1, "any_of": [
                    _t("tip above the carina", "tip in the mid trachea", "appropriate position",
                       "correctly positioned", "well positioned")]}]},
                "too low": {"must_all": [tube], "at_least_k_of": [{"k": 1, "any_of": [
                    _t("tip too low", "tip at or below the carina", "too low", "tip near the carina", "advanced too far")]}]},
                "too high": {"must_all": [tube], "at_least_k_of": [{"k": 1, "any_of": [
                    _t("tip too high", "tip high in the trachea", "too high", "tip at the thoracic inlet")]}]}}}
        elif kind == "chest_tube_side":
            tube = _t("chest tube", "pleural drain", "thoracostomy tube")
            kb[q] = {"type": "spatial", "answers": {
                "none": {"must_all": [_t("no chest tube", "no pleural drain", "no tube")]},
                "right": {"must_all": [_t("right chest tube", "chest tube on the right", "right pleural drain")],
                          "forbidden": [_t("left chest tube")]},
                "left": {"must_all": [_t("left chest tube", "chest tube on the left", "left pleural drain")],
                         "forbidden": [_t("right chest tube")]},
                "both": {"must_all": [_t("bilateral chest tubes", "chest tubes on both sides",
                                         "chest tube on each side")], "at_least_k_of": [{"k": 1, "any_of": [tube]}]}}}
    return KnowledgeBase.from_dict(kb, "phantom KB")
