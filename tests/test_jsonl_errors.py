"""A JSONL line that is not JSON is reported at its real column (fast): a line cut short says so at its last
column (the decoder alone says "column 1", the position after the line's newline), in every reader of JSON
lines (they all go through medvlm_audit.jsonl.iter_jsonl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medvlm_audit.errors import AuditError
from medvlm_audit.jsonl import iter_jsonl

GOOD = b'{"item_id": "it0", "question": "q", "options": ["a", "b"], "answer": "A"}\n'
CUT = b'{"item_id": "x", "question": "q",'  # 33 characters, cut after the comma


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"", b"   \n"])
def test_a_line_cut_short_is_reported_at_its_last_column(tmp_path: Path, end: bytes) -> None:
    p = tmp_path / "items.jsonl"
    p.write_bytes(GOOD + GOOD + CUT + end + (GOOD if end else b""))  # the last line of the file has no newline
    with pytest.raises(AuditError) as e:
        list(iter_jsonl(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}:3: not valid JSON (")
    assert f"after column {len(CUT)}: the line ends there (cut short?)" in msg
    assert "column 1" not in msg


def test_an_error_inside_a_line_is_reported_at_its_column(tmp_path: Path) -> None:
    p = tmp_path / "items.jsonl"
    line = '{"id": "é", "text": oops}'  # a multi-byte character before: columns count characters
    p.write_bytes(GOOD + line.encode() + b"\n")
    with pytest.raises(AuditError) as e:
        list(iter_jsonl(p, unit="row"))
    assert str(e.value) == f"{p}, row 2: not valid JSON (Expecting value at column {line.index('oops') + 1})"


def test_the_stress_and_reports_readers_give_the_real_column(tmp_path: Path) -> None:
    from medvlm_audit.suites.reports import corpus as C
    from medvlm_audit.suites.stress.items import ItemError, _read_records

    p = tmp_path / "s_badjson.jsonl"
    p.write_bytes(GOOD + CUT + b"\n")
    with pytest.raises(ItemError, match=rf":2: not valid JSON \(.* after column {len(CUT)}: the line ends there"):
        _read_records(p)
    r = tmp_path / "ref.jsonl"
    cut = b'{"id": "im9", "text": "b", "group": "F"'
    r.write_bytes(b'{"id": 1, "text": "a", "group": "F"}\n' + cut + b"\n")
    with pytest.raises(C.CorpusError, match=rf"row 2: not valid JSON \(Expecting ',' delimiter after column {len(cut)}: "):
        C.read_corpus(r)
