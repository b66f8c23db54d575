"""The run store: one SQLite file per run (WAL mode), each finished answer committed as it arrives.

It keeps hashes, paths, model text and the resolved config; never image pixels, never credentials.
Tables: meta, probe_sets, cases, models, trials (model x case x condition x sample -> key), requests
(key -> input description, and whether it asked for log-probabilities), responses (key -> answer), skipped
(conditions that did not apply), image_hashes (recipe -> pixel sha256, so a resumed run does not re-render to plan), imported (parsed
answers and confidences imported from another tool's result files), derived (values a suite computes from
stored answers and keeps so that a later invocation need not compute them again, e.g. a score per answer text:
kind -> key -> JSON; only ever a cache, every value can be recomputed from the rest of the store).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote

from medvlm_audit.errors import AuditError, RunLockedError, StoreError, StoreLockedError
from medvlm_audit.models.base import ErrorInfo, Response

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows: no advisory run lock)
    fcntl = None  # type: ignore[assignment]

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS probe_sets(name TEXT PRIMARY KEY, path TEXT, content_hash TEXT, n_cases INTEGER,
    provenance TEXT);
CREATE TABLE IF NOT EXISTS cases(probe_set TEXT NOT NULL, case_id TEXT NOT NULL, row TEXT NOT NULL,
    PRIMARY KEY(probe_set, case_id));
CREATE TABLE IF NOT EXISTS models(name TEXT PRIMARY KEY, modality TEXT NOT NULL, identity TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials(model TEXT NOT NULL, probe_set TEXT NOT NULL, case_id TEXT NOT NULL,
    condition TEXT NOT NULL, sample_index INTEGER NOT NULL, key TEXT NOT NULL, image_sha256 TEXT, payload TEXT,
    PRIMARY KEY(model, probe_set, case_id, condition, sample_index));
CREATE INDEX IF NOT EXISTS trials_key ON trials(key);
CREATE TABLE IF NOT EXISTS requests(key TEXT PRIMARY KEY, model TEXT NOT NULL, input TEXT NOT NULL,
    logprobs INTEGER);
CREATE TABLE IF NOT EXISTS responses(key TEXT PRIMARY KEY, text TEXT, top_logprobs TEXT, finish_reason TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER, latency_s REAL, error_kind TEXT, error_message TEXT,
    attempts INTEGER, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS skipped(probe_set TEXT NOT NULL, case_id TEXT NOT NULL, condition TEXT NOT NULL,
    reason TEXT NOT NULL, PRIMARY KEY(probe_set, case_id, condition));
CREATE TABLE IF NOT EXISTS image_hashes(recipe TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS imported(key TEXT PRIMARY KEY, parsed INTEGER NOT NULL, confidence REAL);
CREATE TABLE IF NOT EXISTS answer_details(key TEXT PRIMARY KEY, effective TEXT, reasoning TEXT);
CREATE TABLE IF NOT EXISTS effective_decodings(id TEXT PRIMARY KEY, decoding TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS derived(kind TEXT NOT NULL, k TEXT NOT NULL, v TEXT NOT NULL, PRIMARY KEY(kind, k))
    WITHOUT ROWID;
"""

STORE_FILE = "run.sqlite"
LOCK_FILE = "run.lock"

#: how long a write waits, retrying with backoff, while another process holds the store's write lock
DEFAULT_LOCK_WAIT_S = 60.0
_BUSY_TIMEOUT_MS = 200  # one attempt's wait inside SQLite; the retry loop around it makes the bounded wait
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED (extended codes keep these in their low byte)


def _is_busy(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return "locked" in str(e) or "busy" in str(e)


def store_error(path: Path, e: sqlite3.Error | OSError, doing: str = "write to") -> StoreError:
    """A StoreError naming the store file and the cause (SQLite's or the OS's words)."""
    if isinstance(e, OSError):
        cause = f"{e.strerror or e}" + (f" ({e.filename})" if e.filename and str(e.filename) != str(path) else "")
    else:
        cause = str(e)
    return StoreError(f"cannot {doing} the run store {path}: {cause}", cause)


def _utf8(text: str | None) -> str | None:
    r"""``text`` as SQLite can store it: a lone surrogate (a server's JSON may hold ``"\ud800"``, which Python
    decodes to an unpaired surrogate that has no UTF-8) becomes U+FFFD; every other text is returned as is.

    >>> import json
    >>> _utf8("ok"), _utf8(json.loads(r'"a\ud800b"')), _utf8("é😀")
    ('ok', 'a�b', 'é😀')
    """
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class RunStore:
    """Thin typed wrapper over the run's SQLite file. Use from one thread at a time (in a run: its writer thread).

    Every write runs in its own ``BEGIN IMMEDIATE`` transaction; while another process holds the write lock it
    is retried with backoff for up to ``lock_wait_s`` seconds, then fails with :class:`StoreLockedError`. Any
    other failure to write (disk full, read-only file) raises :class:`StoreError` naming the file and the
    cause; what was committed before stays. ``readonly=True`` opens the store for reading only (``export``,
    ``report``), which also works on read-only media."""

    def __init__(self, path: str | Path, *, readonly: bool = False, lock_wait_s: float = DEFAULT_LOCK_WAIT_S
                 ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.lock_wait_s = float(lock_wait_s)
        self._copy_dir: Path | None = None
        self._run_lock: RunLock | None = None
        self._has_lp_column: bool | None = None
        self._effective_ids: dict[int, tuple[Any, str, str]] = {}
        if readonly:
            self.db = self._connect_readonly()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise store_error(self.path, e, "create") from None
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._write(lambda: self.db.execute("PRAGMA journal_mode=WAL"), begin=False)
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed answer survives a kill
            self._write(lambda: self.db.executescript(SCHEMA), begin=False)
            if "logprobs" not in self._columns("requests"):
                self._write(self._migrate)
        except sqlite3.Error as e:
            raise store_error(self.path, e, "open") from None

    def _migrate(self) -> None:
        """Bring a store written by an older version up to this schema (in one write transaction, on its first
        writable open): ``requests.logprobs``, the request's log-probabilities flag as a column (it was read from
        the stored description with ``json_extract``, which parses every description), filled once from the
        descriptions. A store migrated so cannot be resumed by a version before the column (its insert names
        three columns: SQLite refuses it, naming the table), but it can still be read by one."""
        # checked again inside the transaction: another process may have migrated it meanwhile
        if "logprobs" not in self._columns("requests"):
            self.db.execute("ALTER TABLE requests ADD COLUMN logprobs INTEGER")
            self.db.execute("UPDATE requests SET logprobs = COALESCE(json_extract(input, '$.decoding.logprobs') = 1, 0) "
                            "WHERE json_valid(input)")

    def _columns(self, table: str) -> set[str]:
        return {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}

    def _lp_asked(self, q: str = "q") -> str:
        """SQL: whether request row ``q`` asked for log-probabilities: the column where the store has it (NULL only
        where a row was written without it: then its description), else the description (an older store opened
        read-only)."""
        js = f"json_extract({q}.input, '$.decoding.logprobs') = 1"
        if self._has_lp_column is None:
            self._has_lp_column = "logprobs" in self._columns("requests")
        return f"COALESCE({q}.logprobs, {js})" if self._has_lp_column else js

    def _connect_readonly(self) -> sqlite3.Connection:
        """mode=ro; where the directory cannot hold the WAL index (read-only media): immutable=1 when no
        WAL file is pending, else a private copy of the database and its WAL (so nothing committed is missed)."""
        if not self.path.is_file():
            raise AuditError(f"{self.path.parent}: no run store ({self.path.name}) found")
        uri = "file:" + quote(str(self.path.resolve()))
        try:
            db = sqlite3.connect(uri + "?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout={int(self.lock_wait_s * 1000)}")
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.Error:
            pass
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            if wal.is_file() and wal.stat().st_size > 0:
                self._copy_dir = Path(tempfile.mkdtemp(prefix="medvlm-ro-store-"))
                shutil.copy2(self.path, self._copy_dir / self.path.name)
                shutil.copy2(wal, self._copy_dir / wal.name)
                db = sqlite3.connect(self._copy_dir / self.path.name, isolation_level=None, check_same_thread=False)
            else:
                db = sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None, check_same_thread=False)
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return db
        except (sqlite3.Error, OSError) as e:
            self._drop_copy()
            raise store_error(self.path, e, "read") from None

    def _drop_copy(self) -> None:
        if self._copy_dir is not None:
            shutil.rmtree(self._copy_dir, ignore_errors=True)
            self._copy_dir = None

    def _rollback_quietly(self) -> None:
        """Roll back if a transaction is still open: SQLite has already rolled back after e.g. SQLITE_FULL,
        and a second ROLLBACK ("no transaction is active") must not hide the original error."""
        if self.db.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _write(self, fn: Callable[[], object], *, wait_s: float | None = None, begin: bool = True) -> None:
        """Run ``fn`` in one write transaction (joins an open one), retrying while the store is locked.

        ``wait_s``: how long to retry a locked store (default ``lock_wait_s``; 0 = one attempt)."""
        if self.readonly:
            raise StoreError(f"the run store {self.path} was opened read-only", "opened read-only")
        if begin and self.db.in_transaction:
            fn()
            return
        deadline = time.monotonic() + (self.lock_wait_s if wait_s is None else wait_s)
        pause = 0.01
        while True:
            try:
                if begin:
                    self.db.execute("BEGIN IMMEDIATE")
                try:
                    fn()
                    if begin:
                        self.db.execute("COMMIT")
                    return
                except BaseException:
                    self._rollback_quietly()
                    raise
            except sqlite3.Error as e:
                left = deadline - time.monotonic()
                if _is_busy(e) and left > 0:
                    time.sleep(min(pause, left))
                    pause = min(pause * 2, 1.0)
                    continue
                if _is_busy(e):
                    waited = self.lock_wait_s if wait_s is None else wait_s
                    cause = f"database is locked (another process held its write lock for more than {waited:g} s)"
                    raise StoreLockedError(f"cannot write to the run store {self.path}: {cause}", cause) from None
                raise store_error(self.path, e) from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One explicit transaction (the connection autocommits, so bulk writes must BEGIN themselves).

        Nested uses join the outermost one, so several bulk writes can commit together. No retry here
        (the body cannot be re-run): prefer the store's own write methods, which retry a locked store."""
        if self.db.in_transaction:
            yield
            return
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise store_error(self.path, e) from None
        try:
            yield
            self.db.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback_quietly()
            raise store_error(self.path, e) from None
        except BaseException:
            self._rollback_quietly()
            raise

    @classmethod
    def open_dir(cls, run_dir: str | Path, *, readonly: bool = False) -> RunStore:
        return cls(Path(run_dir) / STORE_FILE, readonly=readonly)

    @classmethod
    def open_for_run(cls, run_dir: str | Path, *, lock_wait_s: float = DEFAULT_LOCK_WAIT_S) -> RunStore:
        """The store of a run about to ask models: takes the run directory's exclusive lock first (a second
        `run` on the same directory refuses), released when the store is closed."""
        lock = RunLock(run_dir).acquire()
        try:
            store = cls(Path(run_dir) / STORE_FILE, lock_wait_s=lock_wait_s)
        except BaseException:
            lock.release()
            raise
        store._run_lock = lock
        return store

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            self._drop_copy()
            if self._run_lock is not None:
                self._run_lock.release()
                self._run_lock = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- meta -----------------------------------------------------------------------------------
    def set_meta(self, **kv: Any) -> None:
        rows = [(k, json.dumps(v, default=str)) for k, v in kv.items()]
        self._write(lambda: self.db.executemany("INSERT OR REPLACE INTO meta(k, v) VALUES(?, ?)", rows))

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.db.execute("SELECT k, v FROM meta")}

    # --- planning -------------------------------------------------------------------------------
    def add_probe_set(self, name: str, path: str, content_hash: str, rows: pd.DataFrame | Sequence[dict[str, Any]],
                      provenance: dict, also: Sequence[str] = ()) -> None:
        """Record a probe set and its case rows: a table, or a sequence of its rows already as JSON-ready dicts.
        ``also``: the same set's hash as an earlier version computed it (accepted, and replaced by ``content_hash``)."""
        prev = self.db.execute("SELECT content_hash FROM probe_sets WHERE name = ?", (name,)).fetchone()
        if prev is not None and prev[0] != content_hash and prev[0] not in also:
            raise ValueError(
                f"probe set {name!r} changed since this run was started (hash {prev[0][:12]} -> {content_hash[:12]}); "
                "start a new run directory"
            )
        records = (rows.astype(object).where(rows.notna(), None).to_dict("records") if hasattr(rows, "to_dict")
                   else rows)
        ps_row = (name, path, content_hash, len(rows), json.dumps(provenance, default=str))

        def write() -> None:
            self.db.execute("INSERT OR REPLACE INTO probe_sets VALUES(?, ?, ?, ?, ?)", ps_row)
            # streamed: the rows' JSON (~800 bytes per case) is never held for the whole set at once; a row that
            # differs (the same set in a moved run folder: its file paths) is rewritten, an equal one left alone
            self.db.executemany("INSERT INTO cases VALUES(?, ?, ?) ON CONFLICT(probe_set, case_id) DO UPDATE "
                                "SET row = excluded.row WHERE row != excluded.row",
                                ((name, str(r["case_id"]), json.dumps(r, default=str)) for r in records))

        self._write(write)

    def add_model(self, name: str, modality: str, identity: dict) -> None:
        ident = json.dumps(identity, sort_keys=True, default=str)
        prev = self.db.execute("SELECT identity FROM models WHERE name = ?", (name,)).fetchone()
        self._write(lambda: self.db.execute("INSERT OR REPLACE INTO models VALUES(?, ?, ?)", (name, modality, ident)))
        if prev is not None and prev[0] != ident:
            # a changed model identity gives new keys: old answers stay in the store but are no longer planned
            self.set_meta(**{f"identity_changed:{name}": time.time()})

    def add_trials(self, rows: Sequence[tuple]) -> None:
        """rows: (model, probe_set, case_id, condition, sample_index, key, image_sha256, payload_json)."""
        self._write(lambda: self.db.executemany("INSERT OR REPLACE INTO trials VALUES(?, ?, ?, ?, ?, ?, ?, ?)", rows))

    def add_requests(self, rows: Iterable[tuple[str, str, str, int]]) -> None:
        """rows: (key, model, input description JSON, 1 if it asks for log-probabilities else 0)."""
        rows = list(rows)
        self._write(lambda: self.db.executemany(
            "INSERT OR IGNORE INTO requests(key, model, input, logprobs) VALUES(?, ?, ?, ?)", rows))

    def add_plan_rows(self, image_hashes: Sequence[tuple[str, str]], trials: Sequence[tuple],
                      requests: Sequence[tuple[str, str, str, int]]) -> None:
        """Image hashes, trials and requests in one transaction (retried as a whole while locked)."""

        def write() -> None:
            self.add_image_hashes(image_hashes)
            self.add_trials(trials)
            self.add_requests(requests)

        self._write(write)

    def add_skipped(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        self._write(lambda: self.db.executemany("INSERT OR REPLACE INTO skipped VALUES(?, ?, ?, ?)", rows))

    def image_hashes(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT recipe, sha256 FROM image_hashes"))

    def add_image_hashes(self, rows: Sequence[tuple[str, str]]) -> None:
        self._write(lambda: self.db.executemany("INSERT OR REPLACE INTO image_hashes VALUES(?, ?)", rows))

    # --- answers --------------------------------------------------------------------------------
    def answered_keys(self, include_errors: bool = True, missing_logprobs: str = "keep") -> set[str]:
        """Keys whose stored answer counts as done. ``include_errors=False`` leaves errors out (to re-ask them);
        ``missing_logprobs``: "keep" (answers lacking requested log-probabilities are done), "retry" (they are
        re-asked), "retry-partial" (re-asked only for models that returned log-probabilities for some other
        answer, i.e. that evidently can: a model that never returns them is not re-asked over and over)."""
        q = "SELECT key FROM responses" + ("" if include_errors else " WHERE error_kind IS NULL")
        done = {k for (k,) in self.db.execute(q)}
        if missing_logprobs != "keep":
            done -= self.missing_logprob_keys(partial_only=missing_logprobs == "retry-partial")
        return done

    def stored_errors(self) -> dict[str, tuple[str, str]]:
        """key -> (error kind, message) of every stored error (an answer that ended in an error)."""
        return {k: (kind, msg or "") for k, kind, msg in self.db.execute(
            "SELECT key, error_kind, error_message FROM responses WHERE error_kind IS NOT NULL")}

    def _missing_lp(self) -> str:
        return f"r.error_kind IS NULL AND (r.top_logprobs IS NULL OR r.top_logprobs = '[]') AND {self._lp_asked()}"

    def missing_logprob_keys(self, partial_only: bool = False) -> set[str]:
        """Answers stored without the log-probabilities their request asked for (no confidence)."""
        sql = f"SELECT r.key FROM responses r JOIN requests q ON q.key = r.key WHERE {self._missing_lp()}"
        if partial_only:
            sql += (" AND q.model IN (SELECT q2.model FROM responses r2 JOIN requests q2 ON q2.key = r2.key "
                    "WHERE r2.top_logprobs IS NOT NULL AND r2.top_logprobs != '[]')")
        return {k for (k,) in self.db.execute(sql)}

    def model_totals(self) -> dict[str, dict[str, Any]]:
        """Per model, what the whole store holds (every invocation so far): trials, distinct inputs, answers,
        errors by kind, inputs not asked yet, and the confidence coverage (answers carrying the log-probabilities
        their request asked for / answers whose request asked for them)."""
        out: dict[str, dict[str, Any]] = {}
        rows = self.db.execute(
            f"""
            WITH k AS (SELECT DISTINCT model, key FROM trials)
            SELECT k.model, COUNT(*), COUNT(r.key), SUM(r.key IS NULL AND i.key IS NULL),
                   SUM(r.error_kind IS NULL AND {self._lp_asked()}),
                   SUM(CASE WHEN r.key IS NOT NULL AND {self._missing_lp()} THEN 1 ELSE 0 END)
            FROM k LEFT JOIN responses r ON r.key = k.key LEFT JOIN requests q ON q.key = k.key
                   LEFT JOIN imported i ON i.key = k.key
            GROUP BY k.model ORDER BY k.model
            """
        ).fetchall()
        trials = dict(self.db.execute("SELECT model, COUNT(*) FROM trials GROUP BY model").fetchall())
        for model, n_keys, answered, not_asked, lp_wanted, lp_missing in rows:
            lp_wanted, lp_missing = int(lp_wanted or 0), int(lp_missing or 0)
            out[model] = {
                "trials": int(trials.get(model, 0)), "distinct_inputs": int(n_keys), "answered": int(answered),
                "errors": {}, "not_asked": int(not_asked or 0), "logprobs_requested": lp_wanted,
                "logprobs_missing": lp_missing,
                "confidence_coverage": round((lp_wanted - lp_missing) / lp_wanted, 4) if lp_wanted else None,
            }
        for model, kind, n in self.db.execute(
            "WITH k AS (SELECT DISTINCT model, key FROM trials) SELECT k.model, r.error_kind, COUNT(*) FROM k "
            "JOIN responses r ON r.key = k.key WHERE r.error_kind IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2"
        ):
            out[model]["errors"][kind] = int(n)
        return out

    def put_response(self, key: str, r: Response) -> None:
        """Commit one answer (its own transaction: nothing finished is lost if the process dies next)."""
        self.put_responses([(key, r)])

    def put_responses(self, items: Sequence[tuple[str, Response]], *, wait_s: float | None = None) -> None:
        """Commit answers in one transaction (the runner's writer thread: the answers that arrived while it
        committed the previous ones).

        ``wait_s``: how long to retry while another process holds the write lock (default ``lock_wait_s``)."""
        now = time.time()
        rows = [
            (
                key,
                _utf8(r.text),
                json.dumps(r.top_logprobs) if r.top_logprobs is not None else None,
                r.finish_reason,
                r.prompt_tokens,
                r.completion_tokens,
                r.latency_s,
                r.error.kind if r.error else None,
                _utf8(r.error.message) if r.error else None,
                r.error.attempts if r.error else 1,
                now,
            )
            for key, r in items
        ]
        # what the engine was asked (effective decoding, stored once per distinct value: most answers of a
        # strategy share it) and the reasoning text, beside the answer
        details, decodings = [], {}
        memo = self._effective_ids
        for key, r in items:
            if not (r.effective or r.reasoning):
                continue
            eid = None
            if r.effective:
                # a client hands back the same dict for every answer of one decoding: serialised once per object
                # (the memo holds the object, so its id is not reused while it is here)
                hit = memo.get(id(r.effective))
                if hit is None or hit[0] is not r.effective:
                    text = json.dumps(r.effective, sort_keys=True, default=str)
                    if len(memo) >= 256:
                        memo.clear()
                    hit = memo[id(r.effective)] = (r.effective, hashlib.sha1(text.encode()).hexdigest()[:20], text)
                eid = hit[1]
                decodings[eid] = hit[2]
            details.append((key, eid, _utf8(r.reasoning)))

        def write() -> None:
            self.db.executemany("INSERT OR REPLACE INTO responses VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            if decodings:
                self.db.executemany("INSERT OR IGNORE INTO effective_decodings VALUES(?, ?)", decodings.items())
            if details:
                self.db.executemany("INSERT OR REPLACE INTO answer_details VALUES(?, ?, ?)", details)

        self._write(write, wait_s=wait_s)

    def get_response(self, key: str) -> Response | None:
        row = self.db.execute(
            "SELECT text, top_logprobs, finish_reason, prompt_tokens, completion_tokens, latency_s, error_kind, "
            "error_message, attempts FROM responses WHERE key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        text, tl, fr, pt, ct, lat, ek, em, att = row
        det = (self.db.execute("SELECT e.decoding, d.reasoning FROM answer_details d LEFT JOIN effective_decodings e "
                               "ON e.id = d.effective WHERE d.key = ?", (key,)).fetchone()
               if self.has_table("answer_details") and self.has_table("effective_decodings") else None)
        eff, reasoning = (json.loads(det[0]) if det and det[0] else None), (det[1] if det else None)
        return Response(
            text,
            tuple((t, lp) for t, lp in json.loads(tl)) if tl else None,
            fr,
            pt,
            ct,
            lat,
            ErrorInfo(ek, em or "", att or 1) if ek else None,
            effective=eff,
            reasoning=reasoning,
        )

    def has_table(self, name: str) -> bool:
        """Whether the store has this table (a run written by an older version may lack a later one)."""
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() \
            is not None

    def add_imported(self, rows: Sequence[tuple[str, int, float | None]]) -> None:
        self._write(lambda: self.db.executemany("INSERT OR REPLACE INTO imported VALUES(?, ?, ?)", rows))

    # --- derived values (a cache of what a suite computes from stored answers) ---------------------
    def derived(self, kind: str) -> dict[str, str]:
        """The values stored under ``kind`` (key -> JSON text); empty for a store without them."""
        if not self.has_table("derived"):
            return {}
        return dict(self.db.execute("SELECT k, v FROM derived WHERE kind = ?", (kind,)))

    def put_derived(self, family: str, kind: str, rows: Sequence[tuple[str, str]]) -> None:
        """Store (key, JSON) values under ``kind`` and drop the other kinds of its ``family`` (values an older
        scorer or another knowledge base computed: ``kind`` names what the values were computed with). Nothing on
        a read-only store."""
        if self.readonly or not rows:
            return

        def write() -> None:
            self.db.execute("DELETE FROM derived WHERE kind >= ? AND kind < ? AND kind != ?",
                            (family + ":", family + ";", kind))
            self.db.executemany("INSERT OR REPLACE INTO derived(kind, k, v) VALUES(?, ?, ?)",
                                [(kind, k, v) for k, v in rows])

        self._write(write)

    # --- reading --------------------------------------------------------------------------------
    def frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        import pandas as pd  # imported when a table is read, so a run's path needs none (issue 23)

        return pd.read_sql_query(sql, self.db, params=params)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A query's column names and rows as plain tuples (what :meth:`frame` holds, without pandas)."""
        cur = self.db.execute(sql, params)
        return [d[0] for d in cur.description], cur.fetchall()

    def counts(self) -> dict[str, int]:
        out = {}
        for t in ("trials", "requests", "responses", "skipped"):
            out[t] = self.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        out["errors"] = self.db.execute("SELECT COUNT(*) FROM responses WHERE error_kind IS NOT NULL").fetchone()[0]
        return out


class RunLock:
    """The exclusive lock of a run directory: ``RUN/run.lock`` flock-ed for the life of one `run` process and
    holding its PID. The kernel drops the flock when its holder dies, so a crashed run's lock is taken over."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.fd: int | None = None

    def holder(self) -> str:
        try:
            # the first line: while a new holder's shorter PID overwrites a longer one, the tail is stale
            return self.path.read_text().split("\n", 1)[0].strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(self) -> RunLock:
        if fcntl is None:  # pragma: no cover
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = self.holder()
            alive = ""
            if pid.isdigit():
                try:
                    os.kill(int(pid), 0)
                except ProcessLookupError:
                    alive = ", no longer running: a process it started still holds the lock"
                except PermissionError:
                    pass
            raise RunLockedError(
                f"{self.path.parent} is being run by another process (PID {pid}{alive}; lock file {self.path}); "
                "wait for it to finish or stop it, then run again"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:  # the PID over whatever was there, then cut to its length: the file is never observed empty
            data = f"{os.getpid()}\n".encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        except OSError as e:  # e.g. a full disk: name the lock file
            os.close(fd)
            raise OSError(e.errno, e.strerror, str(self.path)) from None
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)  # the file stays: unlinking it would let two processes lock two inodes
        except OSError:
            pass
        finally:
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = None
