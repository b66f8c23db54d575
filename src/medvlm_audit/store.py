"""The run store: one SQLite file per run (WAL mode), each finished answer committed as it arrives.

It keeps hashes, paths, model text and the resolved config; never image pixels, never credentials.
Tables: meta, probe_sets, cases, models, trials (model x case x condition x sample -> key), requests
(key -> input description), responses (key -> answer), skipped (conditions that did not apply),
image_hashes (recipe -> pixel sha256, so a resumed run does not re-render to plan), imported (parsed
answers and confidences imported from another tool's result files).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import pandas as pd

from medvlm_audit.models.base import ErrorInfo, Response

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
CREATE TABLE IF NOT EXISTS requests(key TEXT PRIMARY KEY, model TEXT NOT NULL, input TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS responses(key TEXT PRIMARY KEY, text TEXT, top_logprobs TEXT, finish_reason TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER, latency_s REAL, error_kind TEXT, error_message TEXT,
    attempts INTEGER, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS skipped(probe_set TEXT NOT NULL, case_id TEXT NOT NULL, condition TEXT NOT NULL,
    reason TEXT NOT NULL, PRIMARY KEY(probe_set, case_id, condition));
CREATE TABLE IF NOT EXISTS image_hashes(recipe TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS imported(key TEXT PRIMARY KEY, parsed INTEGER NOT NULL, confidence REAL);
"""

STORE_FILE = "run.sqlite"


class RunStore:
    """Thin typed wrapper over the run's SQLite file. Use from one thread (the runner's event loop)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed answer survives a process kill
        self.db.execute("PRAGMA busy_timeout=10000")
        self.db.executescript(SCHEMA)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One explicit transaction (the connection autocommits, so bulk writes must BEGIN themselves).

        Nested uses join the outermost one, so several bulk writes can commit together."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @classmethod
    def open_dir(cls, run_dir: str | Path) -> RunStore:
        return cls(Path(run_dir) / STORE_FILE)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- meta -----------------------------------------------------------------------------------
    def set_meta(self, **kv: Any) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO meta(k, v) VALUES(?, ?)", [(k, json.dumps(v, default=str)) for k, v in kv.items()]
            )

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.db.execute("SELECT k, v FROM meta")}

    # --- planning -------------------------------------------------------------------------------
    def add_probe_set(self, name: str, path: str, content_hash: str, rows: pd.DataFrame, provenance: dict) -> None:
        prev = self.db.execute("SELECT content_hash FROM probe_sets WHERE name = ?", (name,)).fetchone()
        if prev is not None and prev[0] != content_hash:
            raise ValueError(
                f"probe set {name!r} changed since this run was started (hash {prev[0][:12]} -> {content_hash[:12]}); "
                "start a new run directory"
            )
        records = rows.astype(object).where(rows.notna(), None).to_dict("records")
        with self.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO probe_sets VALUES(?, ?, ?, ?, ?)",
                (name, path, content_hash, len(rows), json.dumps(provenance, default=str)),
            )
            self.db.executemany(
                "INSERT OR IGNORE INTO cases VALUES(?, ?, ?)",
                [(name, str(r["case_id"]), json.dumps(r, default=str)) for r in records],
            )

    def add_model(self, name: str, modality: str, identity: dict) -> None:
        ident = json.dumps(identity, sort_keys=True, default=str)
        prev = self.db.execute("SELECT identity FROM models WHERE name = ?", (name,)).fetchone()
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO models VALUES(?, ?, ?)", (name, modality, ident))
        if prev is not None and prev[0] != ident:
            # a changed model identity gives new keys: old answers stay in the store but are no longer planned
            self.set_meta(**{f"identity_changed:{name}": time.time()})

    def add_trials(self, rows: Sequence[tuple]) -> None:
        """rows: (model, probe_set, case_id, condition, sample_index, key, image_sha256, payload_json)."""
        with self.transaction():
            self.db.executemany("INSERT OR REPLACE INTO trials VALUES(?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def add_requests(self, rows: Iterable[tuple[str, str, str]]) -> None:
        with self.transaction():
            self.db.executemany("INSERT OR IGNORE INTO requests VALUES(?, ?, ?)", rows)

    def add_skipped(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        with self.transaction():
            self.db.executemany("INSERT OR REPLACE INTO skipped VALUES(?, ?, ?, ?)", rows)

    def image_hashes(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT recipe, sha256 FROM image_hashes"))

    def add_image_hashes(self, rows: Sequence[tuple[str, str]]) -> None:
        with self.transaction():
            self.db.executemany("INSERT OR REPLACE INTO image_hashes VALUES(?, ?)", rows)

    # --- answers --------------------------------------------------------------------------------
    def answered_keys(self, include_errors: bool = True) -> set[str]:
        q = "SELECT key FROM responses" + ("" if include_errors else " WHERE error_kind IS NULL")
        return {k for (k,) in self.db.execute(q)}

    def put_response(self, key: str, r: Response) -> None:
        """Commit one answer (its own transaction: nothing finished is lost if the process dies next)."""
        self.put_responses([(key, r)])

    def put_responses(self, items: Sequence[tuple[str, Response]]) -> None:
        """Commit answers in one transaction (the runner's group commit of one event-loop turn)."""
        now = time.time()
        rows = [
            (
                key,
                r.text,
                json.dumps(r.top_logprobs) if r.top_logprobs is not None else None,
                r.finish_reason,
                r.prompt_tokens,
                r.completion_tokens,
                r.latency_s,
                r.error.kind if r.error else None,
                r.error.message if r.error else None,
                r.error.attempts if r.error else 1,
                now,
            )
            for key, r in items
        ]
        with self.transaction():
            self.db.executemany("INSERT OR REPLACE INTO responses VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def get_response(self, key: str) -> Response | None:
        row = self.db.execute(
            "SELECT text, top_logprobs, finish_reason, prompt_tokens, completion_tokens, latency_s, error_kind, "
            "error_message, attempts FROM responses WHERE key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        text, tl, fr, pt, ct, lat, ek, em, att = row
        return Response(
            text,
            tuple((t, lp) for t, lp in json.loads(tl)) if tl else None,
            fr,
            pt,
            ct,
            lat,
            ErrorInfo(ek, em or "", att or 1) if ek else None,
        )

    def add_imported(self, rows: Sequence[tuple[str, int, float | None]]) -> None:
        with self.transaction():
            self.db.executemany("INSERT OR REPLACE INTO imported VALUES(?, ?, ?)", rows)

    # --- reading --------------------------------------------------------------------------------
    def frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        return pd.read_sql_query(sql, self.db, params=params)

    def counts(self) -> dict[str, int]:
        out = {}
        for t in ("trials", "requests", "responses", "skipped"):
            out[t] = self.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        out["errors"] = self.db.execute("SELECT COUNT(*) FROM responses WHERE error_kind IS NOT NULL").fetchone()[0]
        return out
