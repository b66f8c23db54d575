"""Atomic file output: write to temp files beside the targets, then rename, so nothing is ever half-written."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd


def current_umask() -> int:
    """The process umask, read without changing it where the kernel tells (Linux /proc), so threads that create
    files meanwhile are not affected; elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def mkstemp_shared(**kwargs: Any) -> tuple[int, str]:
    """``tempfile.mkstemp`` whose file gets the permissions an ordinary new file would (0666 less the umask,
    e.g. 0644) instead of 0600: what is renamed into place stays readable by colleagues."""
    fd, name = tempfile.mkstemp(**kwargs)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    except BaseException:
        os.close(fd)
        os.unlink(name)
        raise
    return fd, name


def mkdtemp_shared(**kwargs: Any) -> str:
    """``tempfile.mkdtemp`` with an ordinary new folder's permissions (0777 less the umask, e.g. 0755), not 0700."""
    name = tempfile.mkdtemp(**kwargs)
    os.chmod(name, 0o777 & ~current_umask())
    return name


def write_files_atomic(out_dir: Path, payloads: Sequence[tuple[str, bytes]]) -> None:
    """Write every payload to a temp file in out_dir, then rename all into place; clean up on any failure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    temps: list[tuple[Path, Path]] = []
    try:
        for name, data in payloads:
            fd, tmp_name = mkstemp_shared(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
            temps.append((Path(tmp_name), out_dir / name))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, final in temps:
            os.replace(tmp, final)
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
