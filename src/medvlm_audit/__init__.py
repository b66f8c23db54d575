"""medvlm-audit: does a medical VLM read the image? Grounding, stress, faithfulness and report audits."""

from __future__ import annotations

import os

__version__ = "0.1.0"

__all__ = ["__version__"]

# Arrow's default allocator (mimalloc) keeps what a parquet read allocated: reading a 10,000-case manifest left
# 46 MB resident against 21 MB with the system allocator, memory a run never uses again (issue 23: peak RSS
# should not grow with the run). The system allocator, unless the user chose one; read when pyarrow first
# allocates, so it applies to every process that imports this package before using pyarrow.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# OpenBLAS (numpy's and scipy's BLAS in their wheels) starts one thread per core when numpy is imported, and its
# threads spin after the import and after every BLAS call: on an idle 16-core machine `import numpy` took 2.26
# CPU-s against 0.26 with one thread, the fixed cost of a 12-case `run` 2.72 CPU-s against 0.81, and a
# paper-sized `report` 13.9 CPU-s and 5.2 s wall against 7.3 CPU-s and 4.5 s (BENCHMARKS.md, "Many cores"). The
# harness's matrix products are small, and its resampling kernels run their own threads, so one BLAS thread,
# unless the user chose a number; read when numpy is first imported, so it applies to every process that imports
# this package before numpy (the CLI, its workers and servers), not to one that imported numpy first.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
