"""What a resumed run pays to record its probe set's case rows (`RunStore.add_probe_set`): the case-row statement
of this tree (an upsert that rewrites only a row that differs, so a moved run folder's rows name its own files)
against the former ``INSERT OR IGNORE``, on the same rows, in the same process, alternated.

    PYTHONPATH=src python benchmarks/bench_case_rows.py --cases 50000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time

IGNORE = "INSERT OR IGNORE INTO cases VALUES(?, ?, ?)"
UPSERT = ("INSERT INTO cases VALUES(?, ?, ?) ON CONFLICT(probe_set, case_id) DO UPDATE "
          "SET row = excluded.row WHERE row != excluded.row")


def _resume_cost(stmt: str, rows: list[tuple[str, str, str]], folder: str, rounds: int) -> tuple[float, float]:
    """The best (wall, CPU) seconds of recording ``rows`` again into a store that holds them."""
    path = os.path.join(folder, f"cases-{abs(hash(stmt))}.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS cases(probe_set TEXT NOT NULL, case_id TEXT NOT NULL, row TEXT NOT NULL, "
               "PRIMARY KEY(probe_set, case_id))")
    db.execute("BEGIN")
    db.executemany(IGNORE, rows)
    db.execute("COMMIT")
    best = (float("inf"), float("inf"))
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        db.execute("BEGIN")
        db.executemany(stmt, rows)
        db.execute("COMMIT")
        best = min(best, (time.perf_counter() - t, time.process_time() - c))
    db.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rows = [("phantom", f"case-{i:07d}", json.dumps({"case_id": f"case-{i:07d}", "image": f"/data/images/{i}.png",
                                                    "finding": "pleural_effusion", "label": 1, "meta": "x" * 600}))
            for i in range(a.cases)]
    print(f"load average {os.getloadavg()[0]:.2f}; {a.cases:,} unchanged case rows recorded again")
    with tempfile.TemporaryDirectory() as folder:
        for k in range(2):  # alternated: IGNORE, UPSERT, IGNORE, UPSERT
            old = _resume_cost(IGNORE, rows, os.path.join(folder), a.rounds)
            new = _resume_cost(UPSERT, rows, os.path.join(folder), a.rounds)
            print(f"  pass {k + 1}: INSERT OR IGNORE {old[0]:.3f} s wall / {old[1]:.3f} s CPU; upsert {new[0]:.3f} s "
                  f"wall / {new[1]:.3f} s CPU; CPU ratio {new[1] / old[1]:.2f} "
                  f"(+{(new[1] - old[1]) / a.cases * 1e6:.2f} CPU-µs per case)")


if __name__ == "__main__":
    main()
