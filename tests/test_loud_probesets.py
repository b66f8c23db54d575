"""Built probe sets: readable by colleagues under the umask (13.6); case ids present (14.8); images inside the
image root unless allowed (14.11); a decompression bomb fails like any unreadable image (14.9)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medvlm_audit.suites.grounding.datasets.folder import build_folder
from medvlm_audit.suites.grounding.phantom_probeset import build_phantom


def _images(folder: Path, n: int = 6) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (64, 64), dtype=np.uint8)).save(folder / f"im{i}.png")
        names.append(f"im{i}.png")
    return names


def _csv(path: Path, rows: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(root: Path) -> tuple[set[str], set[str]]:
    files = {oct(stat.S_IMODE(p.stat().st_mode)) for p in root.rglob("*") if p.is_file()}
    dirs = {oct(stat.S_IMODE(p.stat().st_mode)) for p in [root, *root.rglob("*")] if p.is_dir()}
    return files, dirs


def test_built_probe_sets_honour_the_umask(tmp_path: Path, umask022) -> None:
    names = _images(tmp_path / "imgs")
    csv = _csv(tmp_path / "cases.csv", [{"image": n, "finding": "nodule", "label": i % 2} for i, n in enumerate(names)])
    build_folder(tmp_path / "imgs", csv, tmp_path / "out" / "folder", verbose=False, workers=1)
    build_phantom(tmp_path / "out" / "phantom", n_cases=60, n_train=60, seed=1)
    files, dirs = _modes(tmp_path / "out")
    assert files == {"0o644"} and dirs == {"0o755"}, (files, dirs)
    assert any((tmp_path / "out" / "phantom").rglob("*.png"))


def test_build_folder_says_a_box_is_inverted_not_under_1_px(tmp_path: Path) -> None:
    import pandas as pd

    names = _images(tmp_path / "imgs")
    rows = [{"image": n, "finding": "nodule", "label": 1, "x0": 10, "y0": 10, "x1": 40, "y1": 40} for n in names]
    rows[2].update(x1=5)  # x1 < x0
    rows[3].update(y0=50, y1=20)  # y1 < y0
    rows[4].update(x1=10.5)  # truly under 1 px
    build_folder(tmp_path / "imgs", _csv(tmp_path / "cases.csv", rows), tmp_path / "out", verbose=False, workers=1)
    why = pd.read_csv(tmp_path / "out" / "exclusions.csv").set_index("record_id")["reason"].to_dict()
    tail = " (x0, y0 is the top left corner, x1, y1 the bottom right)"
    assert why == {"im2.png": "box (10.0, 10.0, 5.0, 40.0) is inverted: x1 < x0" + tail,
                   "im3.png": "box (10.0, 50.0, 40.0, 20.0) is inverted: y1 < y0" + tail,
                   "im4.png": "box (10.0, 10.0, 10.5, 40.0) is under 1 px"}


@pytest.mark.parametrize("blank", ["", "   "])
def test_build_folder_rejects_an_empty_case_id_naming_the_row(tmp_path: Path, blank: str) -> None:
    from medvlm_audit.errors import AuditError

    names = _images(tmp_path / "imgs", 4)
    rows = [{"case_id": f"c{i}", "image": n, "finding": "nodule", "label": i % 2} for i, n in enumerate(names)]
    rows[2]["case_id"] = blank
    csv = _csv(tmp_path / "cases.csv", rows)
    with pytest.raises(AuditError, match=r"row 4 has an empty case_id"):
        build_folder(tmp_path / "imgs", csv, tmp_path / "out", verbose=False, workers=1)
    assert not (tmp_path / "out" / "manifest.parquet").exists()


def _png_bomb(path: Path, side: int = 14_000) -> None:
    """A valid 1-bit PNG of side x side pixels (above PIL's bomb limit) that is only ~30 kB on disk."""
    import struct
    import zlib

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    z = zlib.compressobj(9)
    row = b"\x00" * (1 + (side + 7) // 8)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0))
                     + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def test_decompression_bomb_fails_like_an_unreadable_image(tmp_path: Path) -> None:
    import yaml
    from typer.testing import CliRunner

    from medvlm_audit.cli import app
    from medvlm_audit.errors import ImageError
    from medvlm_audit.images import load_image
    from medvlm_audit.testing.fake_openai import ThreadedFakeServer

    names = _images(tmp_path / "imgs", 4)
    _png_bomb(tmp_path / "imgs" / names[1])
    with pytest.raises(ImageError, match="decompression bomb"):
        load_image(tmp_path / "imgs" / names[1])
    rows = [{"case_id": f"c{i}", "image": n, "finding": "nodule", "label": i % 2} for i, n in enumerate(names)]
    build_folder(tmp_path / "imgs", _csv(tmp_path / "cases.csv", rows), tmp_path / "ps", verbose=False,
                 check_images=False)
    with ThreadedFakeServer() as srv:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump({
            "suite": "grounding", "probe_sets": [str(tmp_path / "ps")], "run_dir": str(tmp_path / "run"), "conditions": ["original"],
            "models": [{"name": "vlm", "backend": "openai", "model": "m", "base_urls": [srv.base_url]}]}))
        res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress"])
        asked = srv.stats.paths.get("/v1/chat/completions", 0)
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (text, res.exception)
    assert "case 'c1'" in text and names[1] in text and "decompression bomb" in text, text
    assert asked == 0  # refused before any model call


def _outside_layout(tmp_path: Path) -> tuple[list[dict], Path]:
    """4 images inside imgs/, and rows reaching a file outside it by '..', by an absolute path and by a symlink."""
    names = _images(tmp_path / "imgs", 4)
    _images(tmp_path / "elsewhere", 1)
    secret = tmp_path / "elsewhere" / "im0.png"
    (tmp_path / "imgs" / "link.png").symlink_to(secret)
    rows = [{"image": n, "finding": "nodule", "label": i % 2} for i, n in enumerate(names)]
    rows += [{"image": "../elsewhere/im0.png", "finding": "nodule", "label": 1},
             {"image": str(secret), "finding": "nodule", "label": 0},
             {"image": "link.png", "finding": "nodule", "label": 1}]
    return rows, secret


@pytest.mark.parametrize("which, how", [(4, "climbs out with '..'"), (5, "an absolute path"),
                                        (6, "a symlink out of the root")])
def test_images_outside_the_root_are_refused_naming_the_row(tmp_path: Path, which: int, how: str) -> None:
    from medvlm_audit.errors import AuditError

    rows, _ = _outside_layout(tmp_path)
    csv = _csv(tmp_path / "cases.csv", rows[:4] + [rows[which]])
    with pytest.raises(AuditError, match=rf"row 6: image .*\({how}\).*outside the image root.*--allow-outside-root"):
        build_folder(tmp_path / "imgs", csv, tmp_path / "out", verbose=False, workers=1)


def test_allow_outside_root_is_explicit_said_in_the_summary_and_checked_at_run_time(tmp_path: Path) -> None:
    from medvlm_audit.errors import ProbeSetError
    from medvlm_audit.suites.grounding.probeset import ProbeSet

    rows, secret = _outside_layout(tmp_path)
    res = build_folder(tmp_path / "imgs", _csv(tmp_path / "cases.csv", rows), tmp_path / "out", verbose=False,
                       workers=1, allow_outside_root=True)
    assert "outside the image root (allowed by allow_outside_root): 3" in res.summary()
    ps = ProbeSet.load(tmp_path / "out")
    assert ps.resolve("../elsewhere/im0.png") == tmp_path / "imgs" / "../elsewhere/im0.png"
    # the same manifest without the permission (e.g. a hand-edited probe set) is refused when planning a run
    ps.provenance["parameters"]["allow_outside_root"] = False
    with pytest.raises(ProbeSetError, match="a symlink out of the root"):
        ps.resolve("link.png")
    assert ps.resolve("im1.png") == tmp_path / "imgs" / "im1.png"


def test_outside_root_follows_symlinked_folders_and_files_as_resolve_does(tmp_path: Path) -> None:
    """The per-folder shortcut (each folder resolved once, one lstat per file) judges every path as a full
    ``resolve()`` does: a folder symlinked out of the root, a file symlinked out, a symlink that stays inside,
    a missing file, nested folders."""
    from medvlm_audit.suites.grounding.probeset import outside_root

    root = tmp_path / "imgs"
    _images(root / "sub" / "deep", 2)
    _images(tmp_path / "elsewhere", 2)
    (root / "out_dir").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (root / "sub" / "in_link.png").symlink_to(root / "sub" / "deep" / "im0.png")
    (root / "sub" / "out_link.png").symlink_to(tmp_path / "elsewhere" / "im1.png")
    (root / "alias").symlink_to(root / "sub", target_is_directory=True)
    paths = ["sub/deep/im0.png", "sub/in_link.png", "sub/out_link.png", "out_dir/im0.png", "out_dir/missing.png",
             "sub/missing.png", "alias/deep/im1.png", "alias/out_link.png", "./sub/deep/im1.png"]
    got = {p: outside_root(p, root) for p in paths}
    for p, why in got.items():  # the oracle: resolve() of the whole path against the real root
        real = (root.resolve() / p).resolve()
        inside = real == root.resolve() or root.resolve() in real.parents
        assert (why is None) == inside, (p, why)
    assert got["sub/deep/im0.png"] is None and got["alias/deep/im1.png"] is None
    assert "a symlink out of the root" in got["out_dir/im0.png"] and "a symlink out" in got["alias/out_link.png"]


@pytest.mark.parametrize("bad", ["column", "label", "case_id"])
def test_a_build_that_fails_validation_creates_no_output_folder(tmp_path: Path, bad: str) -> None:
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    names = _images(tmp_path / "imgs", 4)
    rows = [{"case_id": f"c{i}", "image": n, "finding": "nodule", "label": i % 2} for i, n in enumerate(names)]
    if bad == "column":
        rows = [{("lbl" if k == "label" else k): v for k, v in r.items()} for r in rows]
    elif bad == "label":
        rows[1]["label"] = "maybe"
    else:
        rows[3]["case_id"] = ""
    csv = _csv(tmp_path / "cases.csv", rows)
    out = tmp_path / "nested" / "o_bad"
    res = CliRunner().invoke(app, ["build", "folder", "--images", str(tmp_path / "imgs"), "--csv", str(csv),
                                   "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "folder CSV" in res.output
    assert not out.exists() and not out.parent.exists()
