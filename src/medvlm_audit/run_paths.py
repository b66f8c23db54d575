"""Paths as an item set's identity records them: relative to the run folder where they lie under it.

A suite that builds its items into the run folder (the phantom sets of the embedded defaults, the TAIX-Ray images
written under ``<run_dir>/taix_images``) hashes its items with their image paths; with absolute paths that hash
would change when the folder is copied or moved, and the copy could not be resumed. :func:`portable_path` gives
the path the hash takes: ``run:`` + the path relative to the run folder for a file under it, the absolute path
for anything else (a probe set outside the run stays where it is when the run folder moves).

>>> portable_path("/data/runs/r1/phantom_vqa/images/0001.png", "/data/runs/r1")
'run:phantom_vqa/images/0001.png'
>>> portable_path("/data/runs/r2/phantom_vqa/images/0001.png", "/data/runs/r2/")
'run:phantom_vqa/images/0001.png'
>>> portable_path("/data/mimic/p10/s1.jpg", "/data/runs/r1")
'/data/mimic/p10/s1.jpg'
>>> portable_path("/data/mimic/p10/s1.jpg", None)
'/data/mimic/p10/s1.jpg'
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

#: the prefix of a path recorded relative to the run folder
RUN_PREFIX = "run:"


def portable_path(path: str | Path, run_dir: str | Path | None) -> str:
    """``run:<relative path>`` for a file under ``run_dir``, else the absolute path (relative paths are taken
    from the working directory, as the file is opened). ``run_dir`` None: the absolute path."""
    p = os.path.abspath(os.fspath(path))
    if run_dir is not None:
        root = os.path.abspath(os.fspath(run_dir))
        rel = os.path.relpath(p, root) if os.path.splitdrive(p)[0] == os.path.splitdrive(root)[0] else os.pardir
        if rel != os.curdir and rel.split(os.sep)[0] != os.pardir:
            return RUN_PREFIX + PurePosixPath(*Path(rel).parts).as_posix()
    return p
