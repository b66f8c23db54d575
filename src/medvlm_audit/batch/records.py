"""The run store's record of submitted batches (table ``batches``), written before each step returns.

One row per submission: the model, a random nonce (also sent as the batch's metadata, so a batch created
just before a kill is found again by listing the provider's batches), the custom ids it holds, the uploaded
file, the batch id and its state. A row is written *before* the upload, updated with the file id before the
batch is created and with the batch id as soon as the provider returns it; it is closed (``done``) only after
the batch's answers are committed. A ``run`` killed at any point therefore resumes by polling the same batch.
No credential is ever written here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from medvlm_audit.store import RunStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches(nonce TEXT PRIMARY KEY, model TEXT NOT NULL, keys TEXT NOT NULL,
    n INTEGER NOT NULL, input_file TEXT, batch_id TEXT, status TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, message TEXT);
"""


@dataclass
class BatchRecord:
    nonce: str
    model: str
    keys: list[str]
    input_file: str | None = None
    batch_id: str | None = None
    status: str = "preparing"
    done: bool = False


def ensure(store: RunStore) -> None:
    store._write(lambda: store.db.executescript(SCHEMA), begin=False)


def open_records(store: RunStore, model: str) -> list[BatchRecord]:
    """This model's submissions whose answers are not committed yet, oldest first."""
    ensure(store)
    rows = store.db.execute("SELECT nonce, model, keys, input_file, batch_id, status FROM batches "
                            "WHERE model = ? AND done = 0 ORDER BY created_at", (model,)).fetchall()
    return [BatchRecord(n, m, json.loads(k), f, b, s) for n, m, k, f, b, s in rows]


def all_records(store: RunStore) -> list[dict]:
    """Every submission of the run (for summaries and tests), oldest first."""
    try:
        rows = store.db.execute("SELECT nonce, model, n, input_file, batch_id, status, done, message FROM batches "
                                "ORDER BY created_at").fetchall()
    except Exception:  # noqa: BLE001  no table: no batch was ever submitted
        return []
    cols = ("nonce", "model", "n", "input_file", "batch_id", "status", "done", "message")
    return [dict(zip(cols, r)) for r in rows]


def add(store: RunStore, rec: BatchRecord) -> None:
    now = time.time()
    store._write(lambda: store.db.execute(
        "INSERT INTO batches(nonce, model, keys, n, input_file, batch_id, status, done, created_at, updated_at) "
        "VALUES(?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
        (rec.nonce, rec.model, json.dumps(rec.keys), len(rec.keys), rec.input_file, rec.batch_id, rec.status, now,
         now)))


def update(store: RunStore, rec: BatchRecord, message: str | None = None) -> None:
    store._write(lambda: store.db.execute(
        "UPDATE batches SET input_file = ?, batch_id = ?, status = ?, done = ?, updated_at = ?, "
        "message = COALESCE(?, message) WHERE nonce = ?",
        (rec.input_file, rec.batch_id, rec.status, int(rec.done), time.time(), message, rec.nonce)))
