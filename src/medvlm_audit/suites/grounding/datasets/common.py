"""Shared pieces of the dataset builders: input discovery, label/view/sex encodings, the exclusion log,
per-stratum sampling with shortfall reports, swap partners, working/irrelevant boxes, image checks, saving.

Every builder turns a local copy of a dataset into a :class:`~medvlm_audit.suites.grounding.probeset.ProbeSet` plus an
``exclusions.csv`` (one row per excluded record: id, source, stage, reason) and a shortfall report
(requested vs obtained per stratum), so no record is ever dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.atomic import write_bytes_atomic
from medvlm_audit.boxes import irrelevant_box, working_box
from medvlm_audit.errors import AuditError
from medvlm_audit.images import load_dicom_gray, read_image_header  # noqa: F401  (re-exported for builders)
from medvlm_audit.suites.grounding.probeset import ProbeSet

SEED = 42
EXCLUSIONS_FILE = "exclusions.csv"
SHORTFALLS_FILE = "shortfalls.csv"
IMAGE_CHECK_CACHE = "image_checks.jsonl"
EXCLUSION_COLUMNS = ["record_id", "source", "stage", "reason"]


@dataclass(frozen=True)
class BuildOptions:
    """How a probe set is built, the same for every builder (``build_mimic``, ``build_chexpert``, ``build_nih``,
    ``build_vindr``, ``build_folder``, ``build_probe_train``); what is built is each builder's own arguments.

    ``check_images``: open every image before it is written (``full_decode``: decode it fully; ``workers``
    processes); ``seed``: sampling and swap partners; ``name``: the probe set's name (None: the builder's own,
    e.g. ``"nih"``); ``verbose``: print the summary; ``fingerprint_inputs``: record each input file's sha256.

    A builder takes ``options=BuildOptions(...)`` or the same fields as keywords (``check_images=False``):

    >>> o = BuildOptions.of(BuildOptions(workers=4), {"check_images": False}, "build_nih")
    >>> (o.check_images, o.workers, o.seed, o.named("nih"))
    (False, 4, 42, 'nih')
    >>> BuildOptions.of(None, {"worker": 4}, "build_nih")
    Traceback (most recent call last):
    ...
    TypeError: build_nih(): unknown option 'worker' (did you mean workers?); known: check_images, full_decode, ...
    """

    check_images: bool = True
    full_decode: bool = False
    workers: int = 2
    seed: int = SEED
    name: str | None = None
    verbose: bool = True
    fingerprint_inputs: bool = True

    @classmethod
    def of(cls, options: BuildOptions | None, overrides: Mapping[str, Any], builder: str) -> BuildOptions:
        """``options`` (default: the defaults) with the builder's keyword fields applied; an unknown keyword is a
        TypeError naming the builder (as Python names an unexpected keyword argument)."""
        from medvlm_audit.registry import check_known

        check_known("option", overrides, [f.name for f in fields(cls)], where=f"{builder}(): ", exc=TypeError)
        return replace(options if options is not None else cls(), **overrides)

    def named(self, default: str) -> str:
        """The probe set's name: ``name`` when given, else the builder's ``default``."""
        return self.name if self.name is not None else default

    def checker(self, out_dir: Path, image_root: Path) -> ImageChecker | None:
        """The image checker these options ask for (its cache in ``out_dir``); None when checks are off."""
        return checker_for(out_dir, image_root, self.check_images, self.workers, self.full_decode)


# label states of the CheXpert labeler encoding (MIMIC-CXR-JPG and CheXpert CSVs)
POS, NEG, UNC, BLANK = 1, 0, -1, -9

#: CheXpert-vocabulary column name (as in mimic-cxr-2.0.0-chexpert.csv / CheXpert train.csv) -> finding id
CHEXPERT_COLUMNS: dict[str, str] = {
    "Atelectasis": "atelectasis",
    "Cardiomegaly": "cardiomegaly",
    "Consolidation": "consolidation",
    "Edema": "edema",
    "Enlarged Cardiomediastinum": "enlarged_cardiomediastinum",
    "Fracture": "fracture",
    "Lung Lesion": "lung_lesion",
    "Lung Opacity": "lung_opacity",
    "No Finding": "no_finding",
    "Pleural Effusion": "pleural_effusion",
    "Pleural Other": "pleural_other",
    "Pneumonia": "pneumonia",
    "Pneumothorax": "pneumothorax",
    "Support Devices": "support_devices",
}
#: the 13 findings sampled 50 present / 50 absent (Supplementary Tables 8 and 9), in the paper's order
CHEXPERT_FINDINGS: tuple[str, ...] = (
    "atelectasis",
    "cardiomegaly",
    "consolidation",
    "edema",
    "enlarged_cardiomediastinum",
    "fracture",
    "lung_lesion",
    "lung_opacity",
    "pleural_effusion",
    "pleural_other",
    "pneumonia",
    "pneumothorax",
    "support_devices",
)

FRONTAL_VIEWS = ("PA", "AP")
#: every view code the builders know (MIMIC ViewPosition, CheXpert AP/PA, NIH View Position); others are
#: reported as "unknown view code" exclusions.
KNOWN_VIEWS = {
    "PA", "AP", "LATERAL", "LL", "RL", "AP AXIAL", "PA LLD", "PA RLD", "AP LLD", "AP RLD", "LAO", "RAO",
    "LPO", "RPO", "SWIMMERS", "XTABLE LATERAL", "LLD", "RLD", "LATERAL DECUB", "OBLIQUE", "AP LATERAL",
}


class DatasetError(AuditError):
    """A dataset input is missing or malformed (names the file, column, row and value)."""


# ----------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Shortfall:
    """One stratum that got fewer cases than requested, with the reason."""

    stratum: str
    requested: int
    obtained: int
    available: int
    reason: str


@dataclass
class BuildResult:
    """What a builder returns: the saved probe set, the exclusion log and the per-stratum shortfalls."""

    probe_set: ProbeSet
    exclusions: pd.DataFrame
    shortfalls: list[Shortfall]
    out_dir: Path
    counts: dict[str, int] = field(default_factory=dict)
    #: sampled cases lost at a later step (e.g. ``{"swap": 3}``), already subtracted from their strata
    lost: dict[str, int] = field(default_factory=dict)
    #: things the user should know about the inputs (e.g. CSV columns the builder does not read)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.probe_set.name}: {len(self.probe_set)} cases -> {self.out_dir}"]
        lines.extend(f"  warning: {w}" for w in self.warnings)
        for k, v in self.counts.items():
            lines.append(f"  {k}: {v}")
        lines.append(f"  exclusions: {len(self.exclusions)} records (see {EXCLUSIONS_FILE})")
        if self.lost:
            per = ", ".join(f"{n} at the {stage} step" if stage != "after sampling" else f"{n} unlogged"
                            for stage, n in self.lost.items())
            lines.append(f"  lost after sampling: {sum(self.lost.values())} case(s) ({per}); "
                         "counted in their strata and shortfalls")
        lines.extend(format_shortfalls(self.shortfalls).splitlines())
        return "\n".join(lines)


class ExclusionLog:
    """Collects excluded records (id, source, stage, reason); vectorised so 100k-row pools stay fast."""

    def __init__(self) -> None:
        self._parts: list[pd.DataFrame] = []

    def add(self, record_id: str, source: str, stage: str, reason: str) -> None:
        self._parts.append(pd.DataFrame([[str(record_id), source, stage, reason]], columns=EXCLUSION_COLUMNS))

    def add_many(self, ids: Iterable[Any], source: str, stage: str, reason: str | Sequence[str]) -> int:
        ids = pd.Series(list(ids) if not isinstance(ids, pd.Series) else ids, dtype=object).astype(str)
        if len(ids) == 0:
            return 0
        reasons = reason if isinstance(reason, str) else list(reason)
        part = pd.DataFrame({"record_id": ids.values, "source": source, "stage": stage, "reason": reasons})
        self._parts.append(part)
        return len(part)

    def frame(self) -> pd.DataFrame:
        if not self._parts:
            return pd.DataFrame(columns=EXCLUSION_COLUMNS)
        return pd.concat(self._parts, ignore_index=True)[EXCLUSION_COLUMNS]

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts)


def format_shortfalls(shortfalls: Sequence[Shortfall]) -> str:
    """Human-readable shortfall table (printed by every builder and kept in the provenance)."""
    if not shortfalls:
        return "  shortfalls: none (every stratum reached its requested count)"
    out = ["  shortfalls (stratum: obtained/requested, available, reason):"]
    for s in shortfalls:
        out.append(f"    {s.stratum}: {s.obtained}/{s.requested} (available {s.available}) - {s.reason}")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ inputs


def find_file(root: Path, names: Sequence[str], what: str) -> Path:
    """First existing ``root/name`` (also tried with ``.gz``); a DatasetError lists what was looked for."""
    root = Path(root)
    tried: list[str] = []
    for name in names:
        for cand in (name, name + ".gz") if not name.endswith(".gz") else (name,):
            p = root / cand
            tried.append(str(p))
            if p.is_file():
                return p
    raise DatasetError(f"{what}: none of the expected files exists: {', '.join(tried)}")


def read_csv(path: Path, required: Sequence[str], what: str, **kw: Any) -> pd.DataFrame:
    """Read a CSV (plain or .gz) and check it has the required columns; errors name the file and columns."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{what}: file {path} does not exist")
    try:
        df = pd.read_csv(path, **kw)
    except (pd.errors.ParserError, UnicodeDecodeError, EOFError, OSError) as e:
        raise DatasetError(f"{what}: cannot parse {path} ({e})") from e
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DatasetError(
            f"{what}: {path} lacks required column(s) {missing}; found columns {list(df.columns)[:30]}"
        )
    return df


def file_fingerprint(path: Path) -> dict[str, Any]:
    """Path, size and sha256 of an input file, recorded in the provenance."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": h.hexdigest()}


def check_unique(df: pd.DataFrame, cols: Sequence[str], path: Path, what: str) -> None:
    """Raise if the key columns repeat (duplicate ids within or across sources)."""
    dup = df.duplicated(list(cols), keep=False)
    if dup.any():
        first = df.loc[dup, list(cols)].head(3).to_dict("records")
        raise DatasetError(f"{what}: {path} has {int(dup.sum())} rows with duplicate {list(cols)}, e.g. {first}")


def decode_chexpert(values: pd.Series, path: Path, column: str) -> np.ndarray:
    """CheXpert-labeler encoding (1.0 / 0.0 / -1.0 / blank) -> int8 states POS/NEG/UNC/BLANK.

    Any other value raises a DatasetError naming the file, column, row and value.
    """
    num = pd.to_numeric(values, errors="coerce")
    bad = num.isna() & values.notna() & (values.astype(str).str.strip() != "")
    bad |= num.notna() & ~num.isin([1.0, 0.0, -1.0])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DatasetError(
            f"{path}: column {column!r} row {i + 2} has value {py(values.iloc[i])!r}; "
            "the CheXpert label encoding allows only 1.0, 0.0, -1.0 or blank"
        )
    out = np.full(len(values), BLANK, dtype=np.int8)
    arr = num.to_numpy()
    out[arr == 1.0] = POS
    out[arr == 0.0] = NEG
    out[arr == -1.0] = UNC
    return out


def py(v: Any) -> Any:
    """A numpy scalar as the plain Python value (for readable error messages)."""
    return v.item() if hasattr(v, "item") else v


def isin(values: pd.Series | np.ndarray, members: Iterable[Any]) -> np.ndarray:
    """Boolean membership test through a Python set (pandas' string isin is slow on 100k-row id columns)."""
    st = members if isinstance(members, (set, frozenset)) else set(members)
    return np.fromiter((v in st for v in np.asarray(values, dtype=object)), dtype=bool, count=len(values))


def normalize_sex(values: pd.Series) -> pd.Series:
    """M/F from M, F, Male, Female (any case); anything else (Unknown, blank, O) -> None."""
    s = values.astype("string").str.strip().str.upper()
    out = s.map({"M": "M", "F": "F", "MALE": "M", "FEMALE": "F"})
    return out.astype(object).where(out.notna(), None)


def normalize_view(values: pd.Series) -> pd.Series:
    """Upper-cased, stripped view codes ('' for missing)."""
    return values.astype("string").fillna("").str.strip().str.upper()


def view_exclusion_reason(view: str) -> str | None:
    """None for PA/AP; otherwise the reason the image is not a usable frontal view."""
    if view in FRONTAL_VIEWS:
        return None
    if view == "":
        return "missing view code"
    if view in KNOWN_VIEWS:
        return f"view {view} is not frontal (PA/AP)"
    return f"unknown view code {view!r}"


def view_reasons(views: pd.Series) -> pd.Series:
    """Vectorised :func:`view_exclusion_reason` (None where frontal)."""
    uniq = {v: view_exclusion_reason(v) for v in pd.unique(views)}
    return views.map(uniq)


# ------------------------------------------------------------------------------------------------ sampling


def stratum_rng(seed: int, *keys: str) -> np.random.Generator:
    """A generator seeded from the build seed and the stratum name, so strata are independent of each other."""
    digest = hashlib.sha256(("/".join([str(seed), *keys])).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def shuffled_one_per_patient(
    pool: pd.DataFrame, rng: np.random.Generator, patient_col: str = "patient_id", sort_col: str = "record_id"
) -> pd.DataFrame:
    """The pool in a seeded random order with at most one record per patient (input row order is irrelevant)."""
    if pool.empty:
        return pool
    pool = pool.sort_values(sort_col, kind="mergesort")
    perm = rng.permutation(len(pool))
    pool = pool.iloc[perm]
    return pool.drop_duplicates(patient_col, keep="first")


def allocate_balanced(available: dict[str, int], total: int) -> dict[str, int]:
    """Split ``total`` as evenly as possible over groups, a short group passing what it lacks to the others.

    Max-min fair ("water filling"): every group gets ``min(available, L)`` for the largest level ``L`` that fits
    in ``total``; the ``r`` units left over (fewer than the groups still above ``L``) go one each to the first
    ``r`` of those groups in sorted-name order. So 483 image-dependent ReXErr sentences over eight error types of
    which two have only 30 and 33 give 70 to each of the other six, as the released builder's fixed 70 per type
    (560 // 8) does; a round-by-round split would give 71/71/70/70/69/69.

    >>> allocate_balanced({"a": 30, "b": 33, "c": 200, "d": 200, "e": 200, "f": 200, "g": 200, "h": 200}, 483)
    {'a': 30, 'b': 33, 'c': 70, 'd': 70, 'e': 70, 'f': 70, 'g': 70, 'h': 70}
    >>> allocate_balanced({"a": 100, "b": 100, "c": 100}, 100)
    {'a': 34, 'b': 33, 'c': 33}
    """
    caps = {k: max(0, int(v)) for k, v in available.items()}
    total = min(max(0, int(total)), sum(caps.values()))
    if total == 0:
        return {k: 0 for k in caps}
    lo, hi = 0, max(caps.values())
    while lo < hi:  # the largest level L with sum(min(cap, L)) <= total
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for c in caps.values()) <= total:
            lo = mid
        else:
            hi = mid - 1
    alloc = {k: min(c, lo) for k, c in caps.items()}
    for k in sorted(k for k, c in caps.items() if c > lo)[: total - sum(alloc.values())]:
        alloc[k] += 1
    return alloc


# ------------------------------------------------------------------------------------------------ images


@dataclass(frozen=True)
class ImageCheck:
    path: str
    ok: bool
    width: int | None
    height: int | None
    error: str | None


class ImageChecker:
    """Parallel, resumable image checks: results are appended to a JSONL cache keyed by path, size and mtime.

    A rerun (after a crash or with more inputs) reads the cache and checks only what is new or changed.
    """

    def __init__(self, image_root: Path, cache_path: Path | None, workers: int = 2, full_decode: bool = False):
        self.image_root = Path(image_root)
        self.cache_path = cache_path
        self.workers = max(1, int(workers))
        self.full_decode = full_decode
        self._cache: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.n_checked = 0
        self.n_cached = 0
        if cache_path is not None and cache_path.exists():
            for line in cache_path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    self._cache[rec["path"]] = rec
                except (json.JSONDecodeError, KeyError):
                    continue  # a torn last line after a crash: that image is simply checked again

    def _key(self, full: Path) -> tuple[int, int] | None:
        try:
            st = full.stat()
            return st.st_size, st.st_mtime_ns
        except OSError:
            return None

    def _check_one(self, rel: str) -> ImageCheck:
        full = self.image_root / rel
        key = self._key(full)
        if key is None:
            return ImageCheck(rel, False, None, None, f"file {full} does not exist")
        cached = self._cache.get(rel)
        if cached is not None and cached.get("size") == key[0] and cached.get("mtime_ns") == key[1]:
            with self._lock:
                self.n_cached += 1
            return ImageCheck(rel, cached["ok"], cached.get("width"), cached.get("height"), cached.get("error"))
        try:
            w, h = read_image_header(full, self.full_decode)
            res = ImageCheck(rel, True, w, h, None)
        except DatasetError:
            raise
        except Exception as e:  # noqa: BLE001 - any decoder failure becomes an exclusion reason
            res = ImageCheck(rel, False, None, None, f"image {full} fails to decode ({type(e).__name__}: {e})")
        rec = {"path": rel, "size": key[0], "mtime_ns": key[1], **{k: v for k, v in asdict(res).items() if k != "path"}}
        with self._lock:
            self._cache[rel] = rec
            self.n_checked += 1
            if self.cache_path is not None:
                self.cache_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.cache_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
        return res

    def check(self, rel_paths: Iterable[str]) -> dict[str, ImageCheck]:
        """Check each distinct path (in parallel); returns path -> ImageCheck."""
        todo = sorted(set(rel_paths))
        if not todo:
            return {}
        if self.workers == 1 or len(todo) < 4:
            return {p: self._check_one(p) for p in todo}
        with ThreadPoolExecutor(self.workers) as ex:
            return dict(zip(todo, ex.map(self._check_one, todo)))

    def records(self) -> list[dict[str, Any]]:
        return list(self._cache.values())


def select_checked(
    strata: dict[str, pd.DataFrame],
    want: dict[str, int],
    checker: ImageChecker | None,
    log: ExclusionLog,
    source: str,
    path_col: str = "image_path",
) -> dict[str, pd.DataFrame]:
    """Take the first ``want[k]`` rows of each ordered candidate frame whose image passes the check.

    Failed images become exclusions (stage ``image_check``) and the next candidate takes their place; checks of
    all strata run together in parallel rounds.
    """
    taken: dict[str, list[int]] = {k: [] for k in strata}
    cursor = {k: 0 for k in strata}
    failed: set[str] = set()
    good: dict[str, ImageCheck] = {}
    while True:
        batch: dict[str, list[int]] = {}
        for k, df in strata.items():
            need = want.get(k, 0) - len(taken[k])
            if need <= 0 or cursor[k] >= len(df):
                continue
            stop = min(len(df), cursor[k] + need)
            batch[k] = list(range(cursor[k], stop))
            cursor[k] = stop
        if not batch:
            break
        if checker is not None:
            paths = {strata[k][path_col].iat[i] for k, idx in batch.items() for i in idx}
            res = checker.check(p for p in paths if p not in good and p not in failed)
            for p, r in res.items():
                if r.ok:
                    good[p] = r
                else:
                    failed.add(p)
                    log.add(p, source, "image_check", r.error or "image check failed")
        for k, idx in batch.items():
            for i in idx:
                if checker is None or strata[k][path_col].iat[i] in good:
                    taken[k].append(i)
    out = {}
    for k, df in strata.items():
        sel = df.iloc[taken[k]].copy()
        if checker is not None and len(sel):
            sel["_checked_w"] = [good[p].width for p in sel[path_col]]
            sel["_checked_h"] = [good[p].height for p in sel[path_col]]
        out[k] = sel
    return out


# ------------------------------------------------------------------------------------------------ swaps

#: partner draws per case before assign_swaps gives up on partners whose image fails the check
SWAP_DRAWS = 16


class SwapPool:
    """Frontal images that can serve as swap partners, indexed by a match key (e.g. ``cardiomegaly=1``).

    ``pick`` returns a seeded random pool image of another patient carrying the same key; ``None`` keys pick
    from the whole pool ("any different-patient frontal").
    """

    def __init__(self, paths: np.ndarray, patients: np.ndarray, keys: dict[str, np.ndarray], views: np.ndarray):
        self.paths = paths
        self.patients = patients
        self.views = views
        self.keys = keys  # key -> row indices
        self.all = np.arange(len(paths))

    def pick(
        self,
        key: str | None,
        patient: str,
        rng: np.random.Generator,
        exclude: set[str] | None = None,
        view: str | None = None,
        tries: int = 64,
    ) -> int | None:
        idx = self.all if key is None else self.keys.get(key, np.empty(0, dtype=np.int64))
        if len(idx) == 0:
            return None
        for _ in range(tries):
            j = int(idx[rng.integers(len(idx))])
            if (self.patients[j] != patient and (view is None or self.views[j] == view)
                    and (exclude is None or self.paths[j] not in exclude)):
                return j
        # dense fallback: every eligible candidate, then a seeded choice
        ok = self.patients[idx] != patient
        if view is not None:
            ok &= self.views[idx] == view
        cand = idx[ok]
        if exclude:
            cand = cand[~isin(self.paths[cand], exclude)]
        if len(cand) == 0:
            return None
        return int(cand[rng.integers(len(cand))])


def assign_swaps(
    cases: pd.DataFrame,
    pool: SwapPool,
    key_col: str,
    seed: int,
    log: ExclusionLog,
    source: str,
    checker: ImageChecker | None = None,
    same_view: bool = False,
    fallback_any: bool = False,
) -> pd.DataFrame:
    """Fill swap_image_path / swap_patient_id / swap_match for every case (label-matched, different patient).

    A case whose key has no partner gets a key-free partner only when ``fallback_any`` (ReXErr cases with no
    inferable finding); otherwise it is excluded with the reason. Partners whose image fails the check are
    logged and redrawn.
    """
    cases = cases.copy()
    n = len(cases)
    recs = cases.to_dict("records")
    rngs = [stratum_rng(seed, "swap", str(r["case_id"])) for r in recs]
    used: list[str | None] = []
    for r in recs:
        key = r[key_col]
        used.append(None if key is None or (isinstance(key, float) and np.isnan(key)) or key is pd.NA else str(key))
    keys0 = list(used)
    choice: list[int | None] = [None] * n
    tries = [0] * n
    failed: set[str] = set()
    pending = list(range(n))
    while pending:  # rounds: draw for every pending case, then check all drawn images together (in parallel)
        drawn: dict[int, int] = {}
        for i in pending:
            view = recs[i].get("view") if same_view else None
            j = pool.pick(used[i], str(recs[i]["patient_id"]), rngs[i], exclude=failed, view=view)
            if j is None and used[i] is not None and fallback_any:
                used[i] = None
                j = pool.pick(None, str(recs[i]["patient_id"]), rngs[i], exclude=failed, view=view)
            if j is not None:
                drawn[i] = j
        if checker is not None and drawn:
            res = checker.check(str(pool.paths[j]) for j in drawn.values())
            for p, rr in res.items():
                if not rr.ok and p not in failed:
                    failed.add(p)
                    log.add(p, source, "image_check", (rr.error or "image check failed") + " (swap candidate)")
        nxt = []
        for i in pending:
            j = drawn.get(i)
            if j is None:
                continue
            if str(pool.paths[j]) in failed:
                tries[i] += 1
                if tries[i] < SWAP_DRAWS:
                    nxt.append(i)
                continue
            choice[i] = j
        pending = nxt
    drop = [i for i in range(n) if choice[i] is None]
    for i in drop:
        key = keys0[i] or "any key"
        if tries[i] >= SWAP_DRAWS:
            why = (f"no swap partner with {key} whose image passes the check: {tries[i]} drawn partners failed it "
                   "(excluded)")
        elif tries[i]:
            why = (f"no different-patient frontal swap partner with {key} whose image passes the check "
                   f"({tries[i]} failed it) (excluded)")
        else:
            why = f"no different-patient frontal swap partner with {key} (excluded)"
        log.add(recs[i]["case_id"], source, "swap", why)
    cases["swap_image_path"] = [None if c is None else str(pool.paths[c]) for c in choice]
    cases["swap_patient_id"] = [None if c is None else str(pool.patients[c]) for c in choice]
    cases["swap_match"] = [None if c is None else (u if u is not None else "any_frontal") for c, u in zip(choice, used)]
    if drop:
        cases = cases.drop(cases.index[drop])
    return cases


# ------------------------------------------------------------------------------------------------ boxes


def add_boxes(df: pd.DataFrame, ann_w: str = "_ann_w", ann_h: str = "_ann_h", res: int = 224) -> pd.DataFrame:
    """Working (tbox_*, at ``res``) and irrelevant (ibox_*) boxes for rows with a source box.

    The working box comes from the annotation's own coordinate frame (``ann_w`` x ``ann_h``), exactly as the
    paper rescales MS-CXR boxes; rows without a box keep NA.
    """
    df = df.copy()
    for p in ("tbox", "ibox"):
        for c in ("x0", "y0", "x1", "y1"):
            df[f"{p}_{c}"] = pd.NA
    df["ibox_overlaps"] = False
    has = df[["box_x0", "box_y0", "box_x1", "box_y1"]].notna().all(axis=1) if "box_x0" in df else pd.Series(False)
    for i in np.flatnonzero(has.to_numpy()):
        r = df.iloc[i]
        ax0, ay0, ax1, ay1 = (float(r[f"_ann_{c}"]) for c in ("x0", "y0", "x1", "y1"))
        tb = working_box((ax0, ay0, ax1, ay1), float(r[ann_w]), float(r[ann_h]), res)
        ib, ov = irrelevant_box(tb, res)
        for c, v in zip(("x0", "y0", "x1", "y1"), tb):
            df.iat[i, df.columns.get_loc(f"tbox_{c}")] = v
        for c, v in zip(("x0", "y0", "x1", "y1"), ib):
            df.iat[i, df.columns.get_loc(f"ibox_{c}")] = v
        df.iat[i, df.columns.get_loc("ibox_overlaps")] = bool(ov)
    return df


def box_size_at(x0: pd.Series, y0: pd.Series, x1: pd.Series, y1: pd.Series, w: pd.Series, h: pd.Series, res: int = 224):
    """Box width and height (float) after rescaling a w x h image to res x res."""
    return (x1 - x0) * res / w, (y1 - y0) * res / h


def box_outside_reason(x0, y0, x1, y1, w, h, tol: float = 0.5) -> pd.Series:
    """Per-row reason a box is degenerate or lies outside its w x h image (None where fine). An inverted box
    (x1 < x0 or y1 < y0: the corners swapped) is said to be inverted, not "under 1 px".

    >>> s = lambda *v: pd.Series([float(x) for x in v])
    >>> box_outside_reason(s(40, 10, 10), s(40, 10, 10), s(20, 50, 10.5), s(120, 5, 50), s(200, 200, 200),
    ...                    s(200, 200, 200)).tolist()  # doctest: +NORMALIZE_WHITESPACE
    ['box (40.0, 40.0, 20.0, 120.0) is inverted: x1 < x0 (x0, y0 is the top left corner, x1, y1 the bottom right)',
     'box (10.0, 10.0, 50.0, 5.0) is inverted: y1 < y0 (x0, y0 is the top left corner, x1, y1 the bottom right)',
     'box (10.0, 10.0, 10.5, 50.0) is under 1 px']
    """
    inv_x, inv_y = x1 < x0, y1 < y0
    inverted = inv_x | inv_y
    bad_size = ((x1 - x0 < 1) | (y1 - y0 < 1)) & ~inverted
    outside = (x0 < -tol) | (y0 < -tol) | (x1 > w + tol) | (y1 > h + tol)
    reason = pd.Series([None] * len(x0), index=x0.index, dtype=object)
    txt = (
        "box (" + x0.round(1).astype(str) + ", " + y0.round(1).astype(str) + ", " + x1.round(1).astype(str) + ", "
        + y1.round(1).astype(str) + ")"
    )
    reason[outside] = txt[outside] + " lies outside the " + w[outside].astype(str) + "x" + h[outside].astype(str) + " image"
    reason[bad_size & ~outside] = txt[bad_size & ~outside] + " is under 1 px"
    which = pd.Series(np.where(inv_x & inv_y, "x1 < x0 and y1 < y0", np.where(inv_x, "x1 < x0", "y1 < y0")),
                      index=x0.index)
    sel = inverted & ~outside
    reason[sel] = (txt[sel] + " is inverted: " + which[sel]
                   + " (x0, y0 is the top left corner, x1, y1 the bottom right)")
    return reason


def vanishing_box_reason(x0: pd.Series, y0: pd.Series, x1: pd.Series, y1: pd.Series, w: pd.Series, h: pd.Series,
                         res: int = 224) -> pd.Series:
    """Per-row reason a box disappears at the working resolution (its rounded working box is under 1 px), else
    None; only matters when the minimum box side is lowered to 0 (tiny boxes in large images)."""
    reason = pd.Series([None] * len(x0), index=x0.index, dtype=object)
    ok = pd.concat([x0, y0, x1, y1, w, h], axis=1).notna().all(axis=1).to_numpy()
    for i in np.flatnonzero(ok):
        tb = working_box((float(x0.iat[i]), float(y0.iat[i]), float(x1.iat[i]), float(y1.iat[i])),
                         float(w.iat[i]), float(h.iat[i]), res)
        if tb[2] - tb[0] < 1 or tb[3] - tb[1] < 1:
            reason.iat[i] = f"box rounds to {list(tb)} at {res} px, under 1 px (nothing to mask)"
    return reason


# ------------------------------------------------------------------------------------------------ saving


def _atomic_write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, text)


def finalize(
    manifest: pd.DataFrame,
    *,
    name: str,
    builder: str,
    image_root: Path,
    out_dir: Path,
    params: dict[str, Any],
    inputs: dict[str, Path],
    log: ExclusionLog,
    shortfalls: list[Shortfall],
    counts: dict[str, int],
    checker: ImageChecker | None,
    seed: int = SEED,
    verbose: bool = True,
    fingerprint: bool = True,
    extra: dict[str, Any] | None = None,
    validate: bool = True,
    strata: dict[str, dict[str, Any]] | None = None,
    sampled: pd.DataFrame | None = None,
    warnings: Sequence[str] = (),
) -> BuildResult:
    """Validate, save the ProbeSet to ``out_dir`` and write exclusions.csv, shortfalls.csv and the check cache.

    ``strata`` (stratum -> requested/obtained/available, optionally ``target`` for capped strata) is recounted
    from the final manifest: a case in ``sampled`` (case_id, stratum: the cases as sampled) that did not reach
    the manifest (e.g. no swap partner) is subtracted from its stratum, named with the stage that logged it, and
    its stratum gets a shortfall, so the strata, ``shortfalls.csv`` and the printed summary always agree with
    the manifest. ``validate=False`` (training sets of millions of rows) replaces the row-by-row manifest
    validation with vectorised checks of what those sets carry (kind, finding, binary label)."""
    dupmask = manifest["case_id"].duplicated(keep=False)
    if dupmask.any():
        d = manifest.loc[dupmask]
        src = d["source"].astype(str) if "source" in d else pd.Series("?", index=d.index)
        where = {cid: sorted(set(g)) for cid, g in src.groupby(d["case_id"], sort=True)}
        first = dict(list(where.items())[:5])
        raise DatasetError(f"{builder}: {len(where)} case id(s) occur more than once (within or across sources), "
                           f"e.g. {first} (case id: sources)")
    manifest = manifest[[c for c in manifest.columns if not c.startswith("_")]].reset_index(drop=True)
    if manifest.empty:
        _empty_build(builder, Path(out_dir), Path(image_root), log.frame())
    lost: dict[str, int] = {}
    if strata is not None:
        strata, shortfalls, lost = reconcile_strata(manifest, strata, shortfalls, sampled, log.frame())
        extra = {**(extra or {}), "strata": strata}
    from medvlm_audit import __version__

    prov = {
        "builder": builder,
        "package_version": __version__,
        "seed": seed,
        "parameters": params,
        "inputs": {k: (file_fingerprint(p) if fingerprint else {"path": str(p)}) for k, p in inputs.items()},
        "counts": counts,
        "shortfalls": [asdict(s) for s in shortfalls],
        "n_exclusions": len(log),
        "lost_after_sampling": lost,
        "warnings": list(warnings),
        "image_checks": None if checker is None else {"checked": checker.n_checked, "cached": checker.n_cached},
        **(extra or {}),
    }
    ps = ProbeSet(manifest, Path(image_root), prov, name=name)
    if validate:
        ps.validate(check_files=False)
    else:
        _quick_validate(ps.df, builder)
    out_dir = Path(out_dir)
    ps.save(out_dir)
    excl = log.frame()
    write_bytes_atomic(out_dir / EXCLUSIONS_FILE, excl.to_csv(index=False))
    sf = pd.DataFrame([asdict(s) for s in shortfalls], columns=["stratum", "requested", "obtained", "available", "reason"])
    _atomic_write_text(out_dir / SHORTFALLS_FILE, sf.to_csv(index=False))
    if checker is not None:  # save() replaced the folder: put the resumable check cache back
        _atomic_write_text(out_dir / IMAGE_CHECK_CACHE, "".join(json.dumps(r) + "\n" for r in checker.records()))
    result = BuildResult(ProbeSet.load(out_dir, validate=False), excl, list(shortfalls), out_dir, counts, lost,
                         list(warnings))
    if verbose:
        print(result.summary())
    return result


def reconcile_strata(
    manifest: pd.DataFrame,
    strata: dict[str, dict[str, Any]],
    shortfalls: Sequence[Shortfall],
    sampled: pd.DataFrame | None,
    exclusions: pd.DataFrame,
) -> tuple[dict[str, dict[str, Any]], list[Shortfall], dict[str, int]]:
    """Strata and shortfalls recounted from the final manifest, with the sampled cases lost on the way.

    Returns (strata with ``obtained`` = cases of that stratum in the manifest and ``lost_after_sampling`` =
    {stage: n} where cases were lost, shortfalls in strata order with their ``obtained`` from the manifest and
    the losses added to their reason, {stage: n} over all strata). A stratum that loses cases below its target
    (``target``, else ``requested``) gets a shortfall even when it had none at sampling time.
    """
    strata = {k: dict(v) for k, v in strata.items()}
    final = manifest["stratum"].astype(str).value_counts() if "stratum" in manifest else pd.Series(dtype=int)
    per: dict[str, list[tuple[str, int, str]]] = {}
    total: dict[str, int] = {}
    if sampled is not None and len(sampled):
        gone = sampled.loc[~isin(sampled["case_id"].astype(str), set(manifest["case_id"].astype(str))),
                           ["case_id", "stratum"]].astype(str)
        if len(gone):
            ex = exclusions.drop_duplicates("record_id", keep="last").set_index("record_id")
            gone = gone.assign(stage=gone["case_id"].map(ex["stage"]).fillna("after sampling"),
                               reason=gone["case_id"].map(ex["reason"]).fillna("not in the final manifest"))
            for (k, stage), g in gone.groupby(["stratum", "stage"], sort=False):
                per.setdefault(k, []).append((stage, len(g), g["reason"].value_counts().index[0]))
                total[stage] = total.get(stage, 0) + len(g)
    by_stratum = {s.stratum: s for s in shortfalls}
    out: list[Shortfall] = []
    for k, info in strata.items():
        got = int(final.get(k, 0))
        if got < info["obtained"]:
            losses = per.get(k)
            if not losses:  # no sampled frame given: the loss is still counted, without its stage
                losses = [("after sampling", int(info["obtained"]) - got, "not in the final manifest")]
                total["after sampling"] = total.get("after sampling", 0) + losses[0][1]
            info["lost_after_sampling"] = {stage: n for stage, n, _ in losses}
            txt = "; ".join(f"{n} sampled case(s) lost " + ("after sampling" if stage == "after sampling" else
                                                             f"at the {stage} step") + f" (e.g. {why})"
                            for stage, n, why in losses)
        else:
            txt = ""
        info["obtained"] = got
        s = by_stratum.pop(k, None)
        target = int(info.get("target", info["requested"]))
        if s is not None:
            out.append(Shortfall(s.stratum, s.requested, got, s.available, "; ".join(x for x in (s.reason, txt) if x)))
        elif got < target:
            out.append(Shortfall(k, target, got, int(info["available"]), txt or "fewer cases than requested"))
    out.extend(by_stratum.values())
    return strata, out, total


def top_exclusion_reasons(excl: pd.DataFrame, n: int = 5) -> list[tuple[int, str, str]]:
    """The ``n`` commonest (count, stage, example reason) groups of an exclusion log.

    Reasons that differ only in a path or a number (``file /a/1.jpg does not exist``) form one group.
    """
    if excl.empty:
        return []
    key = excl["reason"].astype(str).str.replace(r"\S*/\S*", "<path>", regex=True).str.replace(
        r"\d+(?:\.\d+)?", "<n>", regex=True)
    g = excl.assign(_key=key).groupby(["stage", "_key"], sort=False)
    top = g.size().sort_values(ascending=False, kind="mergesort").head(n)
    first = g["reason"].first()
    return [(int(c), str(stage), str(first[(stage, k)])) for (stage, k), c in top.items()]


def _empty_build(builder: str, out_dir: Path, image_root: Path, excl: pd.DataFrame) -> None:
    """No record became a case: write exclusions.csv, leave nothing else, and raise saying why.

    The exclusions go to ``out_dir/exclusions.csv`` with no probe set beside them (the image-check cache and any
    earlier shortfalls.csv of a failed build are removed); a probe set already saved in ``out_dir`` is left as it was
    and the exclusions go beside the folder (``<out_dir>.exclusions.csv``)."""
    from medvlm_audit.suites.grounding.probeset import MANIFEST

    if (out_dir / MANIFEST).exists():
        target = out_dir.with_name(f"{out_dir.name}.{EXCLUSIONS_FILE}")
        where = f"{target} (the probe set already in {out_dir} is left as it was)"
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in (IMAGE_CHECK_CACHE, SHORTFALLS_FILE):
            (out_dir / name).unlink(missing_ok=True)
        target = out_dir / EXCLUSIONS_FILE
        where = str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(target, excl.to_csv(index=False))
    top = top_exclusion_reasons(excl)
    head = (f"{builder}: the probe set is empty: none of the {len(excl)} excluded records became a case; "
            f"exclusions written to {where}, nothing else saved. Top exclusion reasons:")
    lines = [head]
    lines += [f"  {c} x {stage}: {why}" for c, stage, why in top] or ["  (no record was read)"]
    checked = excl["stage"].eq("image_check")
    missing = checked & excl["reason"].astype(str).str.contains("does not exist")
    if missing.any() and missing.sum() * 2 >= checked.sum():
        lines.append(f"  most image files named by the labels do not exist under {image_root}: check that the "
                     "paths in the label file match the folder layout (e.g. valid/ in the CSV, val/ on disk)")
    raise DatasetError("\n".join(lines))


def _quick_validate(df: pd.DataFrame, builder: str) -> None:
    from medvlm_audit.findings import DISPLAY_NAMES

    if df.empty:
        raise DatasetError(f"{builder}: the probe set is empty; see exclusions.csv")
    bad = ~df["kind"].isin(["finding_presence"]) | ~df["finding"].isin(list(DISPLAY_NAMES))
    bad |= ~pd.to_numeric(df["label"], errors="coerce").isin([0, 1]) | df["image_path"].isna()
    if bad.any():
        r = df.loc[bad].iloc[0]
        raise DatasetError(f"{builder}: case {r['case_id']!r} has kind {r['kind']!r}, finding {r['finding']!r}, "
                           f"label {r['label']!r}, image_path {r['image_path']!r}")


def checker_for(out_dir: Path, image_root: Path, check_images: bool, workers: int, full_decode: bool) -> ImageChecker | None:
    """An ImageChecker whose cache lives in the output folder (None when checks are off)."""
    if not check_images:
        return None
    return ImageChecker(image_root, Path(out_dir) / IMAGE_CHECK_CACHE, workers=workers, full_decode=full_decode)


def stratum_shortfall(stratum: str, requested: int, obtained: int, available: int, why: str) -> Shortfall | None:
    """A Shortfall when obtained < requested, else None."""
    if obtained >= requested:
        return None
    return Shortfall(stratum, int(requested), int(obtained), int(available), why)


def one_image_per_study(pool: pd.DataFrame, log: ExclusionLog, source: str, stage: str, tiebreak: str) -> pd.DataFrame:
    """Keep one frontal image per study (PA before AP, then ``tiebreak``), logging the others as excluded."""
    pool = pool.assign(_vo=(pool["view"] != "PA").astype(int)).sort_values(["study_id", "_vo", tiebreak],
                                                                         kind="mergesort")
    dup = pool["study_id"].duplicated(keep="first")
    log.add_many(pool.loc[dup, "record_id"], source, stage, "another frontal image of the same study represents it")
    return pool.loc[~dup]


def apply_filters(
    df: pd.DataFrame,
    filters: Sequence[tuple[str, pd.Series | Callable[[pd.DataFrame], pd.Series]]],
    log: ExclusionLog,
    source: str,
    id_col: str = "record_id",
) -> pd.DataFrame:
    """Apply (stage, reason-series) filters in order; rows with a non-null reason are logged and removed."""
    for stage, reasons in filters:
        r = reasons(df) if callable(reasons) else reasons.reindex(df.index)
        bad = r.notna()
        if bad.any():
            log.add_many(df.loc[bad, id_col], source, stage, r[bad].astype(str).tolist())
            df = df.loc[~bad]
    return df


def sample_label_strata(
    pool: pd.DataFrame,
    *,
    findings: Sequence[str],
    per_finding: int,
    n_normal: int,
    negatives: str,
    seed: int,
    prefix: str,
    source: str,
    log: ExclusionLog,
    checker: ImageChecker | None,
    eligible: str,
) -> tuple[pd.DataFrame, list[Shortfall], dict[str, dict[str, int]]]:
    """Per finding ``per_finding`` present + ``per_finding`` absent records, plus ``n_normal`` No-Finding ones.

    ``pool`` has one row per eligible image with an int8 label-state column per finding (POS/NEG/UNC/BLANK) and
    ``record_id``/``patient_id``/``image_path``. At most one record per patient per stratum; uncertain labels
    are logged as exclusions for that finding. Negatives: ``explicit`` (0.0 only), ``explicit_then_blank``
    (explicit first, then not-mentioned), ``explicit_or_blank`` (mixed). Normals are asked "any acute
    abnormality?" so their label is 0 (finding_state records the No Finding = 1.0 label).
    """
    shortfalls: list[Shortfall] = []
    strata_info: dict[str, dict[str, int]] = {}
    normal_key = f"{prefix}:no_finding:normal"
    strata: dict[str, pd.DataFrame] = {}
    want: dict[str, int] = {}
    avail: dict[str, int] = {}
    meta_of: dict[str, tuple[str, int, int]] = {}
    for f in findings:
        st = pool[f].to_numpy()
        unc = pool[st == UNC]
        log.add_many(unc["record_id"], source, f"{prefix}:{f}", f"uncertain (-1.0) label for {f} (not eligible for this finding)")
        pos = shuffled_one_per_patient(pool[st == POS], stratum_rng(seed, prefix, f, "present"))
        exp = shuffled_one_per_patient(pool[st == NEG], stratum_rng(seed, prefix, f, "absent"))
        blank = pool[st == BLANK]
        if negatives == "explicit":
            neg = exp
        elif negatives == "explicit_then_blank":
            blank = shuffled_one_per_patient(blank[~isin(blank["patient_id"], exp["patient_id"])],
                                             stratum_rng(seed, prefix, f, "absent_blank"))
            neg = pd.concat([exp, blank])
        else:
            neg = shuffled_one_per_patient(pd.concat([pool[st == NEG], blank]), stratum_rng(seed, prefix, f, "absent"))
        for lab, cand in (("present", pos), ("absent", neg)):
            k = f"{prefix}:{f}:{lab}"
            strata[k], want[k], avail[k] = cand, per_finding, len(cand)
            meta_of[k] = (f, 1 if lab == "present" else 0, POS if lab == "present" else NEG)
    normals = shuffled_one_per_patient(pool[pool["no_finding"].to_numpy() == POS], stratum_rng(seed, prefix, "no_finding"))
    strata[normal_key], want[normal_key] = normals, n_normal
    avail[normal_key] = len(normals)
    meta_of[normal_key] = ("no_finding", 0, POS)
    sel = select_checked(strata, want, checker, log, source)
    rows = []
    for k, df in sel.items():
        f, lab, state = meta_of[k]
        df = df.copy()
        if f != "no_finding":
            df["finding_state"] = df[f].astype(int)
        else:
            df["finding_state"] = POS
        df["finding"], df["label"], df["stratum"] = f, lab, k
        df["swap_key"] = f + ("=1" if state == POS else "=0")
        rows.append(df)
        strata_info[k] = {"requested": want[k], "obtained": len(df), "available": avail[k]}
        why = (f"too few eligible records ({eligible})"
               if len(df) >= avail[k] else "candidate images failed the image check")
        s = stratum_shortfall(k, want[k], len(df), avail[k], why)
        if s:
            shortfalls.append(s)
    return pd.concat(rows, ignore_index=True), shortfalls, strata_info
