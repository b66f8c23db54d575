"""The study store (one SQLite file per study, WAL mode) and ``create_study``.

A study is a set of *items* (one question to a reader: a case under one condition, a model error, a CoT text,
an MCQ item, a benchmark), each with a ``view`` (exactly what the reader is shown: question text, options, the
CoT, the box to draw) and a ``source`` (what the reader is never shown: probe set, case, condition, model,
label, how to render the image). Every reader gets every item in her own seeded order in which two items of
the same case are never adjacent (so the mask conditions of one case never follow each other).

Reader tokens are ``secrets.token_urlsafe(32)`` values stored only as sha256 hashes; the per-reader CSRF token
is an HMAC of the token hash under a study secret. Every answer is committed as it is given (autosave); a
history of every change is kept beside the current answer.

Images are never copied into the study unless asked (``copy_images=True``): the source records the image
file and the recipe (working resolution, mask box) that the run used, and the app renders it per request
with the same pure pixel operations (:mod:`medvlm_audit.images`). The items themselves are built by the task's
sampler (a suite's :class:`~medvlm_audit.readers.tasks.ReaderTask`, found by name through the suite registry).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import __version__
from medvlm_audit.readers.tasks import SampleRequest, StudyError, TaskSpec

__all__ = [
    "STUDY_FILE",
    "Reader",
    "Study",
    "StoreBusyError",
    "StudyError",
    "create_study",
    "hash_token",
    "reader_order",
]

STUDY_FILE = "study.sqlite"
_ROWS_PER_STATEMENT = 100  # 600 bound values at most: under SQLite's oldest limit (999)
INVITATIONS = "invitations.csv"
ADMIN_FILE = "admin-token.txt"
#: a reading time the app records (``elapsed_ms`` of an answer: whole milliseconds from the item shown to the
#: answer given, as the page measures it): at least 1 ms, at most 24 h; anything else is refused
ELAPSED_MS_MIN = 1.0
ELAPSED_MS_MAX = 86_400_000.0


def elapsed_seconds(raw_ms: str | None) -> float | None:
    """An answer's ``elapsed_ms`` form field in seconds; None when absent or empty (the time is not recorded).
    ValueError naming the field for anything but a number from 1 ms to 24 h (NaN, infinities, 0, negative).

    >>> elapsed_seconds("1234"), elapsed_seconds(""), elapsed_seconds(None)
    (1.234, None, None)
    >>> elapsed_seconds("0.0001")
    Traceback (most recent call last):
    ValueError: elapsed_ms must be a number of milliseconds from 1 to 86400000 (24 h), got '0.0001'
    """
    if raw_ms is None or not raw_ms.strip():
        return None
    try:
        ms = float(raw_ms)
    except ValueError:
        ms = math.nan
    if not (math.isfinite(ms) and ELAPSED_MS_MIN <= ms <= ELAPSED_MS_MAX):
        raise ValueError(f"elapsed_ms must be a number of milliseconds from {ELAPSED_MS_MIN:.0f} to "
                         f"{ELAPSED_MS_MAX:.0f} (24 h), got {raw_ms[:40]!r}")
    return ms / 1000.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS readers(reader_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
    token_hash TEXT NOT NULL UNIQUE, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS items(item_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, unit TEXT NOT NULL,
    view TEXT NOT NULL, source TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS assignments(reader_id INTEGER NOT NULL, item_id TEXT NOT NULL, position INTEGER NOT NULL,
    PRIMARY KEY(reader_id, item_id), UNIQUE(reader_id, position));
CREATE TABLE IF NOT EXISTS answers(reader_id INTEGER NOT NULL, item_id TEXT NOT NULL, scale TEXT NOT NULL,
    value TEXT NOT NULL, answered_at REAL NOT NULL, elapsed_s REAL, revisions INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(reader_id, item_id, scale));
CREATE TABLE IF NOT EXISTS answer_log(id INTEGER PRIMARY KEY AUTOINCREMENT, reader_id INTEGER NOT NULL,
    item_id TEXT NOT NULL, scale TEXT NOT NULL, value TEXT NOT NULL, at REAL NOT NULL, elapsed_s REAL);
CREATE TABLE IF NOT EXISTS activity(reader_id INTEGER PRIMARY KEY, last_seen REAL NOT NULL);
"""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Reader:
    reader_id: int
    name: str
    token_hash: str


# ------------------------------------------------------------------------------------------------ the store


class StoreBusyError(StudyError):
    """Another process holds the study store's write lock: nothing was written; try again shortly."""


class Study:
    """Read/write access to one study folder, shared by the web server's worker threads.

    Each thread keeps one SQLite connection (its PRAGMAs set once, a busy timeout on writes); what never
    changes while a study runs (readers, their item order, the items) is read once and kept in memory, so a
    page view costs at most one query (the reader's answers; none when a server caches them) and writes nothing: a page view's activity time is kept
    in memory and written with the reader's next answer. ``write_wait_s`` bounds how long an answer waits
    for another process's write lock before :class:`StoreBusyError` (the page then says "retrying")."""

    def __init__(self, study_dir: str | Path, *, write_wait_s: float = 1.0, cache_answers: bool = False) -> None:
        self.dir = Path(study_dir)
        self.path = self.dir / STUDY_FILE
        if not self.path.exists():
            raise StudyError(f"{self.dir}: no study store ({STUDY_FILE}); create one with `medvlm-audit readers create`")
        self.write_wait_s = float(write_wait_s)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._readers: dict[str, Reader] | None = None  # token hash -> reader
        self._orders: dict[int, list[str]] = {}
        self._items: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # item id -> (view, source), parsed
        self._assigned: dict[int, frozenset[str]] = {}  # reader id -> her item ids
        self.items_in_memory = False  # every item parsed and kept (``preload``): ``item`` reads no database
        self._csrf: dict[str, str] = {}  # token hash -> CSRF token
        self._seen: dict[int, float] = {}  # page views not yet written (reader id -> time)
        # reader id -> her answers, kept current by save_answer: for a server, the study's one writer of answers
        self._answers: dict[int, dict[str, dict[str, str]]] | None = {} if cache_answers else None
        self._n_complete: dict[int, int] = {}  # reader id -> how many of her cached answers' items are complete
        self._locked_at = 0.0  # when a write last found the store locked
        meta = self.meta()
        self.task: str = meta["task"]
        from medvlm_audit.readers.catalog import reader_task

        self.task_suite: str | None = meta.get("task_suite")  # the suite that declares the task
        self.reader_task = reader_task(self.task, self.task_suite)  # its scales, sampler, analysis, export
        self.spec: TaskSpec = self.reader_task.spec_for([tuple(a) for a in meta.get("axes") or []] or None)
        self._secret = bytes.fromhex(meta["secret"])

    @staticmethod
    def _connect(path: Path, busy_timeout_s: float = 10.0) -> sqlite3.Connection:
        db = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        return db

    def _con(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use, kept)."""
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = self._connect(self.path, self.write_wait_s)
            self._local.wait_ms = int(self.write_wait_s * 1000)
        return con

    def close(self) -> None:
        """Close this thread's connection (others close with their threads' end or the process)."""
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

    @contextmanager
    def db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        con = self._con()
        if not write:
            yield con
            return
        # right after a write found the store locked, later writes fail at once instead of each waiting
        # out the timeout in turn (the page retries them); then one waits again
        busy = StoreBusyError(f"{self.path}: the study store is locked by another process; nothing was written, "
                              "try again")
        t0 = time.monotonic()
        wait_s = 0.0 if t0 - self._locked_at < 0.5 else self.write_wait_s
        # one writer thread at a time waits on SQLite's lock; the others wait here
        got = self._write_lock.acquire(timeout=wait_s) if wait_s > 0 else self._write_lock.acquire(blocking=False)
        if not got:
            raise busy
        try:
            wait_ms = max(0, int((wait_s - (time.monotonic() - t0)) * 1000))
            if wait_ms != self._local.wait_ms:
                con.execute(f"PRAGMA busy_timeout={wait_ms}")
                self._local.wait_ms = wait_ms
            try:
                con.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    self._locked_at = time.monotonic()
                    raise busy from None
                raise
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        finally:
            self._write_lock.release()

    # --- meta, readers, security --------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        with self.db() as con:
            return {k: json.loads(v) for k, v in con.execute("SELECT k, v FROM meta")}

    def public_meta(self) -> dict[str, Any]:
        """Meta without the secret and the admin hash."""
        return {k: v for k, v in self.meta().items() if k not in ("secret", "admin_token_hash")}

    def readers(self) -> list[Reader]:
        with self.db() as con:
            return [Reader(*r) for r in con.execute("SELECT reader_id, name, token_hash FROM readers ORDER BY reader_id")]

    def reader_by_token(self, token: str) -> Reader | None:
        """The reader whose token this is, or None (a forged token matches no stored hash)."""
        if not isinstance(token, str) or not 20 <= len(token) <= 200:
            return None
        h = hash_token(token)
        if self._readers is None:  # readers are fixed when the study is created
            self._readers = {r.token_hash: r for r in self.readers()}
        row = self._readers.get(h)
        if row is None or not hmac.compare_digest(row.token_hash, h):
            return None
        return row

    def check_admin(self, token: str) -> bool:
        stored = self.meta().get("admin_token_hash", "")
        return isinstance(token, str) and bool(stored) and hmac.compare_digest(stored, hash_token(token))

    def rotate_admin_token(self) -> str:
        """A new admin token (the old one stops working); returns it once."""
        tok = secrets.token_urlsafe(32)
        with self.db(write=True) as con:
            con.execute("INSERT OR REPLACE INTO meta VALUES('admin_token_hash', ?)", (json.dumps(hash_token(tok)),))
        return tok

    def csrf_token(self, reader: Reader) -> str:
        got = self._csrf.get(reader.token_hash)
        if got is None:  # an HMAC of the reader's token hash: fixed for the study, computed once per reader
            got = self._csrf[reader.token_hash] = hmac.new(
                self._secret, f"csrf:{reader.token_hash}".encode(), hashlib.sha256).hexdigest()
        return got

    def admin_csrf_token(self) -> str:
        return hmac.new(self._secret, b"csrf:admin", hashlib.sha256).hexdigest()

    def check_csrf(self, reader: Reader, token: str | None) -> bool:
        return isinstance(token, str) and hmac.compare_digest(self.csrf_token(reader), token)

    # --- items ---------------------------------------------------------------------------------------
    def order(self, reader: Reader) -> list[str]:
        got = self._orders.get(reader.reader_id)
        if got is None:  # assignments are fixed when the study is created
            with self.db() as con:
                got = [r[0] for r in con.execute(
                    "SELECT item_id FROM assignments WHERE reader_id = ? ORDER BY position", (reader.reader_id,))]
            self._orders[reader.reader_id] = got
        return list(got)

    def assigned(self, reader: Reader) -> frozenset[str]:
        """The ids of the items assigned to this reader (fixed when the study is created; read once)."""
        got = self._assigned.get(reader.reader_id)
        if got is None:
            got = self._assigned[reader.reader_id] = frozenset(self._orders.get(reader.reader_id) or self.order(reader))
        return got

    def item(self, reader: Reader, item_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(view, source) of an item assigned to this reader, else None (another reader's or unknown id).
        Parsed once and shared by every caller: treat both as read-only."""
        if item_id not in self.assigned(reader):
            return None
        got = self._items.get(item_id)
        if got is None:
            with self.db() as con:
                row = con.execute("SELECT view, source FROM items WHERE item_id = ?", (item_id,)).fetchone()
            if row is None:  # pragma: no cover - an assignment names an item of the study
                return None
            got = (json.loads(row[0]), json.loads(row[1]))
            if len(self._items) < 100_000:
                self._items[item_id] = got
        return got

    def all_items(self) -> pd.DataFrame:
        with self.db() as con:
            df = pd.read_sql_query("SELECT item_id, seq, unit, view, source FROM items ORDER BY seq", con)
        return df

    # --- answers -------------------------------------------------------------------------------------
    def answers(self, reader: Reader) -> dict[str, dict[str, str]]:
        """item_id -> {scale: value} of this reader (treat as read-only: it may be the cached copy)."""
        if self._answers is None:
            return self._read_answers(reader)
        cached = self._answers.get(reader.reader_id)
        if cached is not None:
            return cached
        # filled under the lock that save_answer updates the cache under: an answer committed while this read
        # runs is either in what it reads or applied to the cache right after
        with self._lock:
            cached = self._answers.get(reader.reader_id)
            if cached is None:
                cached = self._answers[reader.reader_id] = self._read_answers(reader)
                self._n_complete[reader.reader_id] = sum(self.is_complete(g) for g in cached.values())
        return cached

    def _read_answers(self, reader: Reader) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        with self.db() as con:
            for item_id, scale, value in con.execute(
                    "SELECT item_id, scale, value FROM answers WHERE reader_id = ?", (reader.reader_id,)):
                out.setdefault(item_id, {})[scale] = value
        return out

    def cached_answers(self, reader: Reader) -> dict[str, dict[str, str]] | None:
        """The reader's answers when held in memory (a server that caches them), else None: no database call."""
        return self._answers.get(reader.reader_id) if self._answers is not None else None

    def cached_progress(self, reader: Reader) -> tuple[dict[str, dict[str, str]], int] | None:
        """(the reader's answers, how many of her items are complete) when held in memory, else None: no
        database call and no pass over her items (the count is kept as answers are saved)."""
        if self._answers is None:
            return None
        with self._lock:
            got = self._answers.get(reader.reader_id)
            return None if got is None else (got, self._n_complete[reader.reader_id])

    def cached_item(self, reader: Reader, item_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None | bool:
        """``item`` from memory (read-only, shared); None for an item not assigned to this reader; False when
        it would need the database."""
        assigned = self._assigned.get(reader.reader_id)
        if assigned is None:
            return False
        if item_id not in assigned:
            return None
        return self._items.get(item_id, False)

    def preload(self) -> None:
        """Read readers, their orders and items once (a server does this at start, in one transaction)."""
        with self.db() as con:
            con.execute("BEGIN")
            try:
                self._readers = {r[2]: Reader(*r) for r in con.execute(
                    "SELECT reader_id, name, token_hash FROM readers")}
                orders: dict[int, list[str]] = {}
                for rid, item_id in con.execute("SELECT reader_id, item_id FROM assignments ORDER BY reader_id, position"):
                    orders.setdefault(rid, []).append(item_id)
                self._orders.update(orders)
                self._assigned.update({rid: frozenset(orders.get(rid, ())) for rid in
                                       (r.reader_id for r in self._readers.values())})
                n = 0
                for item_id, view, source in con.execute("SELECT item_id, view, source FROM items LIMIT 100000"):
                    self._items[item_id] = (json.loads(view), json.loads(source))
                    n += 1
                self.items_in_memory = n == con.execute("SELECT COUNT(*) FROM items").fetchone()[0]
            finally:
                con.execute("COMMIT")

    def is_complete(self, given: dict[str, str]) -> bool:
        return all(s.name in given for s in self.spec.scales)

    def check_answer(self, reader: Reader, item_id: str, scale: str, value: str,
                     elapsed_s: float | None) -> tuple[Reader, str, str, str, float | None]:
        """One answer validated against the task's scales and the reader's items, as ``save_answers`` takes
        it (an impossible time becomes None); raises KeyError for an item not assigned to this reader and
        ValueError for an unknown scale or value. Reads the database only for a reader's first answer when
        her items were not preloaded."""
        sc = next((s for s in self.spec.scales if s.name == scale), None)
        if sc is None:
            raise ValueError(f"unknown scale {scale!r}")
        if value not in {c.value for c in sc.choices}:
            raise ValueError(f"{value!r} is not an answer of scale {scale!r}")
        if item_id not in self.assigned(reader):
            raise KeyError(item_id)
        if elapsed_s is not None and not (math.isfinite(elapsed_s)
                                          and ELAPSED_MS_MIN <= elapsed_s * 1000.0 <= ELAPSED_MS_MAX):
            elapsed_s = None
        return reader, item_id, scale, value, elapsed_s

    def save_answer(self, reader: Reader, item_id: str, scale: str, value: str, elapsed_s: float | None) -> None:
        """Commit one answer (validated against the task's scales) and log it; raises KeyError for an item not
        assigned to this reader and ValueError for an unknown scale or value."""
        self.save_answers([self.check_answer(reader, item_id, scale, value, elapsed_s)])

    def save_answers(self, answers: Sequence[tuple[Reader, str, str, str, float | None]]) -> None:
        """Commit answers (each as ``check_answer`` returns it) in one transaction, in order, each logged, with
        the page views of every reader since the last write: all are stored when this returns, none when it
        raises (:class:`StoreBusyError` when another process holds the write lock)."""
        if not answers:
            return
        now = time.time()
        rows = [(r.reader_id, item_id, scale, value, now, elapsed_s) for r, item_id, scale, value, elapsed_s in answers]
        with self._lock:
            seen = dict(self._seen)
        for r in answers:
            seen[r[0].reader_id] = now
        with self.db(write=True) as con:
            # one statement per table and chunk of rows, not one SQLite step per row: Python's sqlite3 releases
            # the GIL around every step, and in a server each step's return competes with the event-loop thread
            for k in range(0, len(rows), _ROWS_PER_STATEMENT):
                chunk = rows[k:k + _ROWS_PER_STATEMENT]
                values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(chunk))
                flat = [v for row in chunk for v in row]
                con.execute(
                    "INSERT INTO answers(reader_id, item_id, scale, value, answered_at, elapsed_s) "
                    f"VALUES {values} ON CONFLICT(reader_id, item_id, scale) DO UPDATE SET "
                    "value = excluded.value, answered_at = excluded.answered_at, elapsed_s = excluded.elapsed_s, "
                    "revisions = answers.revisions + (answers.value != excluded.value)", flat)
                con.execute(f"INSERT INTO answer_log(reader_id, item_id, scale, value, at, elapsed_s) VALUES {values}",
                            flat)
            active = list(seen.items())
            for k in range(0, len(active), _ROWS_PER_STATEMENT):
                chunk = active[k:k + _ROWS_PER_STATEMENT]
                con.execute(f"INSERT INTO activity VALUES {', '.join(['(?, ?)'] * len(chunk))} ON CONFLICT(reader_id) "
                            "DO UPDATE SET last_seen = max(last_seen, excluded.last_seen)",
                            [v for row in chunk for v in row])
        with self._lock:
            for rid, t in seen.items():
                if self._seen.get(rid, 0.0) <= t:
                    self._seen.pop(rid, None)
            if self._answers is not None:
                for rid, item_id, scale, value, _, _ in rows:
                    old = self._answers.get(rid)
                    if old is not None:  # copy on write: readers of the old dict see a whole one
                        was = old.get(item_id, {})
                        now_given = {**was, scale: value}
                        self._answers[rid] = {**old, item_id: now_given}
                        self._n_complete[rid] += self.is_complete(now_given) - self.is_complete(was)

    def touch(self, reader: Reader) -> None:
        """A page view: kept in memory (no write per page), written with the next answer of any reader."""
        with self._lock:
            self._seen[reader.reader_id] = time.time()

    def progress(self) -> pd.DataFrame:
        """Per reader: items assigned, items complete, answers given, last activity (no answer values)."""
        n_scales = len(self.spec.scales)
        with self.db() as con:
            rows = con.execute(
                "SELECT r.reader_id, r.name, (SELECT COUNT(*) FROM assignments a WHERE a.reader_id = r.reader_id), "
                "(SELECT COUNT(*) FROM (SELECT item_id FROM answers s WHERE s.reader_id = r.reader_id "
                " GROUP BY item_id HAVING COUNT(*) >= ?)), "
                "(SELECT last_seen FROM activity v WHERE v.reader_id = r.reader_id) FROM readers r ORDER BY r.reader_id",
                (n_scales,)).fetchall()
        with self._lock:
            seen = dict(self._seen)
        rows = [(*r[:4], max((t for t in (r[4], seen.get(r[0])) if t is not None), default=None)) for r in rows]
        df = pd.DataFrame(rows, columns=["reader_id", "reader", "assigned", "complete", "last_seen"])
        df["percent"] = np.where(df["assigned"] > 0, 100.0 * df["complete"] / df["assigned"].clip(lower=1), 0.0)
        return df

    def answer_table(self) -> pd.DataFrame:
        """Every current answer joined with its item's source (for export and analysis)."""
        with self.db() as con:
            df = pd.read_sql_query(
                "SELECT r.name AS reader, s.item_id, s.scale, s.value AS answer, s.answered_at, s.elapsed_s, "
                "s.revisions, i.source, a.position FROM answers s JOIN readers r ON r.reader_id = s.reader_id "
                "JOIN items i ON i.item_id = s.item_id JOIN assignments a ON a.reader_id = s.reader_id "
                "AND a.item_id = s.item_id ORDER BY r.reader_id, a.position, s.scale", con)
        return df


# ------------------------------------------------------------------------------------------------ ordering


def _reader_seed(seed: int, name: str) -> list[int]:
    return [int(seed), int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")]


def _feasible(counts: dict[str, int], prev: str | None) -> bool:
    """Can the remaining items be ordered with no two equal units adjacent, the first not equal to ``prev``?"""
    n = sum(counts.values())
    if n == 0:
        return True
    half = (n + 1) // 2
    if max(counts.values()) > half:
        return False
    return not (n % 2 == 1 and prev is not None and counts.get(prev, 0) == half)


def reader_order(units: Sequence[str], seed: int, reader: str) -> list[int]:
    """A seeded random order of the items (positions into ``units``) in which no two adjacent items share a unit.

    At each step the next unit is drawn uniformly among those that differ from the previous one and leave the
    rest orderable (a unit can be placed apart from itself iff it holds at most half of the remaining items,
    rounded up). Raises StudyError when no such order exists. The seed is (study seed, sha256 of the reader's
    name), so each reader has her own order and the same study recreated gives the same orders.
    """
    rng = np.random.default_rng(_reader_seed(seed, reader))
    by_unit: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        by_unit.setdefault(str(u), []).append(i)
    counts = {u: len(v) for u, v in by_unit.items()}
    if not _feasible(counts, None):
        raise StudyError("no order can keep the items of one case apart: one case holds more than half of the items")
    for u in sorted(by_unit):
        rng.shuffle(by_unit[u])
    out: list[int] = []
    prev: str | None = None
    names = sorted(by_unit)
    while len(out) < len(units):
        cands = []
        for u in names:
            if u == prev or counts[u] == 0:
                continue
            counts[u] -= 1
            if _feasible(counts, u):
                cands.append(u)
            counts[u] += 1
        u = cands[int(rng.integers(len(cands)))]
        counts[u] -= 1
        out.append(by_unit[u].pop())
        prev = u
    return out


def _load_items_file(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.exists():
        raise StudyError(f"{p}: items file not found")
    try:
        if p.suffix == ".parquet":
            return pd.read_parquet(p)
        if p.suffix in (".jsonl", ".json"):
            return pd.read_json(p, lines=p.suffix == ".jsonl")
        return pd.read_csv(p)
    except Exception as e:
        raise StudyError(f"{p}: cannot read items ({e})") from e


# ------------------------------------------------------------------------------------------------ create


def create_study(
    run_dir: str | Path | None,
    task: str,
    n: int,
    readers: Sequence[str],
    seed: int = 42,
    out: str | Path = "study",
    *,
    items: pd.DataFrame | str | Path | None = None,
    probe_set: str | None = None,
    models: Sequence[str] | None = None,
    axes: Sequence[tuple[str, str]] | None = None,
    copy_images: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """Create a study folder: ``study.sqlite``, ``invitations.csv`` (reader, token_path) and ``admin-token.txt``.

    ``task``: a reader task a suite declares (``Suite.reader_tasks()``); its sampler builds the items from the
    run (``run_dir``) or from ``items`` (a DataFrame or a CSV / JSONL / Parquet file), and ``n`` is what the
    task counts (``ReaderTask.n_means``). ``options``: the task's own options (``ReaderTask.options``, e.g.
    grounding's ``boxed_only`` and ``resolution``); an unknown one is refused. ``axes``: the rubric axes of a
    task whose axes are chosen per study. Returns {"study_dir", "tokens": {reader: token}, "admin_token",
    "n_items"}: the only time tokens exist in clear (invitations.csv holds the reader paths for the lead).
    """
    from medvlm_audit.readers.catalog import reader_task, task_suites
    from medvlm_audit.registry import did_you_mean

    rtask = reader_task(task)
    task_suite = task_suites()[task]
    unknown = sorted(set(options) - set(rtask.options))
    if unknown:
        raise StudyError(f"task {task}: unknown option {unknown[0]!r}{did_you_mean(unknown[0], rtask.options)}; "
                         f"known: {', '.join(sorted(rtask.options)) or 'none'}")
    options = {**rtask.options, **options}
    names = [str(r).strip() for r in readers]
    if not names or any(not r for r in names):
        raise StudyError("name at least one reader (--reader NAME), no empty names")
    if len(set(names)) != len(names):
        raise StudyError(f"reader names must be unique, got {names}")
    if n < 1:
        raise StudyError(f"--n must be at least 1, got {n}")
    out = Path(out)
    if (out / STUDY_FILE).exists():
        raise StudyError(f"{out}: a study already exists there; choose another --out")
    run = Path(run_dir) if run_dir is not None else None
    items_df = _load_items_file(items) if isinstance(items, (str, Path)) else items
    built = rtask.sample(SampleRequest(task, run, n, seed, items_df, probe_set, models, options))
    spec = rtask.spec_for(list(axes) if axes else None)
    _check_images(built)

    tokens = {r: secrets.token_urlsafe(32) for r in names}
    admin = secrets.token_urlsafe(32)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (STUDY_FILE + ".tmp")
    if tmp.exists():
        tmp.unlink()
    # owner-only from the first byte (SQLite gives its -wal and -shm files the same mode): it holds the
    # token hashes, the CSRF secret and every answer
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    con = Study._connect(tmp)
    try:
        con.executescript(SCHEMA)
        con.execute("BEGIN")
        meta = {"task": task, "task_suite": task_suite, "run_dir": str(run.resolve()) if run else None, "n": n, "seed": seed,
                "created_at": time.time(), "package_version": __version__, "secret": secrets.token_hex(32),
                "admin_token_hash": hash_token(admin), "probe_set": probe_set, "options": options,
                "axes": [list(a) for a in axes] if axes else None, "copy_images": copy_images,
                "scales": [s.name for s in spec.scales], "n_items": len(built)}
        con.executemany("INSERT INTO meta VALUES(?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        ids = [it["item_id"] for it in built]
        if len(set(ids)) != len(ids):
            raise StudyError("two items got the same id (duplicate rows in the source?)")
        con.executemany("INSERT INTO items VALUES(?, ?, ?, ?, ?)",
                        [(it["item_id"], k, it["unit"], json.dumps(it["view"]), json.dumps(it["source"], default=str))
                         for k, it in enumerate(built)])
        now = time.time()
        units = [it["unit"] for it in built]
        for rid, name in enumerate(names, 1):
            con.execute("INSERT INTO readers VALUES(?, ?, ?, ?)", (rid, name, hash_token(tokens[name]), now))
            order = reader_order(units, seed, name)
            con.executemany("INSERT INTO assignments VALUES(?, ?, ?)",
                            [(rid, ids[j], pos) for pos, j in enumerate(order)])
        con.execute("COMMIT")
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        for side in ("-wal", "-shm"):
            Path(str(tmp) + side).unlink(missing_ok=True)
        raise
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    for side in ("-wal", "-shm"):
        Path(str(tmp) + side).unlink(missing_ok=True)
    os.replace(tmp, out / STUDY_FILE)
    if copy_images:
        _copy_images(out, built)
    from medvlm_audit.atomic import csv_bytes, write_files_atomic

    inv = pd.DataFrame({"reader": names, "token_path": [f"/r/{tokens[r]}" for r in names]})
    # owner-only from creation: the links are the readers' credentials
    write_files_atomic(out, [(INVITATIONS, csv_bytes(inv)), (ADMIN_FILE, f"/admin/{admin}\n".encode())], mode=0o600)
    return {"study_dir": out, "tokens": tokens, "admin_token": admin, "n_items": len(built)}


def _check_images(items: list[dict[str, Any]]) -> None:
    """Every image an item needs exists and its header decodes, and where the run recorded the pixel hash the
    reader's rendering gives exactly the pixels the models saw."""
    from medvlm_audit.images import check_image_header
    from medvlm_audit.models.base import pixel_sha256

    checked: set[str] = set()
    for it in items:
        for rec in it["source"].get("images", []):
            p = rec["path"]
            if p not in checked:
                try:
                    check_image_header(p)
                except Exception as e:
                    raise StudyError(f"item for case {it['unit']!r}: {e}") from e
                checked.add(p)
        want = it["source"].get("image_sha256")
        if want:
            from medvlm_audit.readers.render import render_pixels

            got = pixel_sha256(render_pixels(it["source"]["images"][0]))
            if got != want:
                raise StudyError(f"case {it['unit']!r} under {it['source'].get('condition')}: the rendered image "
                                 f"differs from the one the run's models saw (sha256 {got[:12]} != {want[:12]})")


def _copy_images(out: Path, items: list[dict[str, Any]]) -> None:
    from medvlm_audit.readers.render import encode_png, render_pixels

    folder = out / "images"
    folder.mkdir(exist_ok=True)
    for it in items:
        for k, rec in enumerate(it["source"].get("images", [])):
            (folder / f"{it['item_id']}-{k}.png").write_bytes(encode_png(render_pixels(rec)))
