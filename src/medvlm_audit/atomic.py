"""Atomic file output: write to temp files beside the targets, then rename, so nothing is ever half-written."""

from __future__ import annotations

import errno
import glob
import io
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
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


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write one file atomically: a temp file beside ``path`` (honouring the umask), renamed into place, so a
    crash never leaves a half-written file; the temp file is removed on any error. Text is written as UTF-8.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> write_bytes_atomic(p, "hello").read_text()
    'hello'
    """
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = mkstemp_shared(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and (e.filename is None or e.filename == tmp):  # name the file, not the temp
            raise OSError(e.errno, e.strerror or str(e), str(path)) from e
        raise
    return path


def write_files_atomic(out_dir: Path, payloads: Sequence[tuple[str, bytes]], mode: int | None = None) -> None:
    """Write every payload to a temp file in out_dir, then rename all into place; clean up on any failure.
    ``mode``: the files' permissions from their creation (e.g. 0o600 for secrets), else an ordinary file's."""
    out_dir.mkdir(parents=True, exist_ok=True)
    temps: list[tuple[Path, Path]] = []
    umask = os.umask(0)
    os.umask(umask)
    target = out_dir
    try:
        for name, data in payloads:
            target = out_dir / name
            fd, tmp_name = mkstemp_shared(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
            temps.append((Path(tmp_name), out_dir / name))
            if mode is not None:
                os.fchmod(fd, mode)
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


# ---- whole folders --------------------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(-100, os.fsencode(a), -100, os.fsencode(b), _RENAME_EXCHANGE) == 0:  # -100: AT_FDCWD
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()


def clean_stale_temps(out_dir: Path) -> None:
    """Remove what killed writes left: sibling ``.NAME.PID-xxxx.tmp`` / ``.old`` folders of ``out_dir`` whose
    writer is gone, and ``.FILE.xxxx.tmp`` files inside it. If a kill fell between the two renames of a swap
    (systems without an atomic exchange), the complete old folder is put back first."""
    parent = out_dir.parent
    if not parent.is_dir():
        return
    stale: list[Path] = []
    for p in parent.glob(f".{glob.escape(out_dir.name)}.*"):
        m = re.fullmatch(rf"\.{re.escape(out_dir.name)}\.(\d+)-[^.]+\.(tmp|old)", p.name)
        if m and not _pid_alive(int(m.group(1))):
            stale.append(p)
    olds = sorted((p for p in stale if p.name.endswith(".old")), key=lambda p: p.stat().st_mtime)
    if olds and not out_dir.exists():
        os.rename(olds[-1], out_dir)
        stale.remove(olds[-1])
    for p in stale:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
    if out_dir.is_dir():
        for p in out_dir.glob(".*.tmp"):
            if p.is_file() and re.fullmatch(r"\..+\.[^.]+\.tmp", p.name):
                p.unlink(missing_ok=True)


def _carry(src: Path, dst: Path) -> None:
    """Put an entry of the old folder into the new one without copying data (hard links)."""
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    else:
        os.link(src, dst)


def write_folder_atomic(out_dir: str | os.PathLike[str], payloads: Sequence[tuple[str, bytes]]) -> Path:
    """Write a whole folder (a report) at once: every payload into a fresh sibling temp folder, then swap it in
    whole, so a reader or a kill sees the old folder or the new one, never a mix of their files; files of the
    old folder that this write does not produce are kept (hard-linked over, no data copied).
    Stale temp files and folders of killed writes are removed first. Where the parent folder cannot take a
    sibling (read-only parent, mount point), falls back to :func:`write_files_atomic` inside the folder."""
    out = Path(out_dir)
    if out.is_symlink():
        out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(out)
    names = [n for n, _ in payloads]
    if any("/" in n or n in ("", ".", "..") for n in names) or len(set(names)) != len(names):
        raise ValueError(f"bad or repeated file names in a folder write: {names}")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}-", suffix=".tmp", dir=out.parent))
    except OSError as e:
        if out.is_dir() and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            write_files_atomic(out, payloads)
            return out
        raise OSError(e.errno, e.strerror, str(out)) from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o777 & ~umask)
        if out.is_dir():
            for entry in out.iterdir():
                if entry.name not in names:
                    _carry(entry, tmp / entry.name)
        write_files_atomic(tmp, payloads)
        dir_fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        if not out.exists():
            os.rename(tmp, out)
        elif _exchange(tmp, out):
            shutil.rmtree(tmp, ignore_errors=True)  # now the old folder
        else:
            old = tmp.with_name(tmp.name[: -len(".tmp")] + ".old")
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.filename is None or str(tmp) in str(e.filename):
            raise OSError(e.errno, e.strerror, str(out)) from e
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
