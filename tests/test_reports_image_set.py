"""The reports suite's image-set manifest (images.jsonl): read through the one JSONL reader, so a bad line is
named as FILE:LINE: why, like every other JSONL input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvlm_audit.errors import ProbeSetError
from medvlm_audit.suites.reports.images import load_image_set


def _manifest(folder: Path, n: int = 4) -> Path:
    rows = []
    for i in range(n):
        (folder / f"im{i}.png").write_bytes(b"not read here")
        rows.append(json.dumps({"id": f"c{i}", "image": f"im{i}.png", "group": "FM"[i % 2]}))
    f = folder / "images.jsonl"
    f.write_text("\n".join(rows) + "\n")
    return f


def test_a_good_manifest_loads_and_its_hash_is_the_files(tmp_path):
    import hashlib

    f = _manifest(tmp_path)
    s = load_image_set(tmp_path)
    assert list(s.rows["case_id"]) == ["c0", "c1", "c2", "c3"] and set(s.rows["sex"]) == {"F", "M"}
    assert s.content_hash == hashlib.sha256(f.read_bytes()).hexdigest()


@pytest.mark.parametrize("bad, why", [(b"{oops", "not valid JSON"), (b'"c9"', "expected a JSON object with id, "
                                      "image and group, got str"), (b'{"id": "\xff"}', "not UTF-8"),
                                      (b'{"id": "c1", "image": "im1.png", "group": "M"}', "id 'c1' repeats"),
                                      (b'{"id": "c9", "group": "M"}', "missing field 'image'")])
def test_a_bad_line_names_the_file_and_the_line(tmp_path, bad, why):
    f = _manifest(tmp_path)
    rows = f.read_bytes().splitlines()
    rows.insert(2, b"")  # a blank line is skipped but still counted
    rows.insert(3, bad)
    f.write_bytes(b"\n".join(rows) + b"\n")
    with pytest.raises(ProbeSetError, match=rf"images.jsonl:4: {why}"):
        load_image_set(f)
