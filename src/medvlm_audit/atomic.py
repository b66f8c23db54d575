"""Atomic file output: write to temp files beside the targets, then rename, so nothing is ever half-written."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd


def write_files_atomic(out_dir: Path, payloads: Sequence[tuple[str, bytes]]) -> None:
    """Write every payload to a temp file in out_dir, then rename all into place; clean up on any failure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    temps: list[tuple[Path, Path]] = []
    umask = os.umask(0)
    os.umask(umask)
    target = out_dir
    try:
        for name, data in payloads:
            target = out_dir / name
            fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
            temps.append((Path(tmp_name), out_dir / name))
            os.chmod(tmp_name, 0o666 & ~umask)  # mkstemp makes 0600; give the files ordinary permissions
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, final in temps:
            target = final
            os.replace(tmp, final)
    except OSError as e:
        if e.filename is None or str(e.filename).endswith(".tmp"):  # name the output, not a temp file
            raise OSError(e.errno, e.strerror or str(e), str(target)) from e
        raise
    finally:
        for tmp, _ in temps:
            if tmp.exists():
                tmp.unlink()


def csv_bytes(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False, lineterminator="\n").encode("utf-8")


def parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.reset_index(drop=True).to_parquet(buf, index=False)
    return buf.getvalue()
