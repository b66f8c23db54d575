"""`python -m medvlm_audit` runs the CLI."""

import gc

gc.disable()  # no collection while the CLI's modules are imported: medvlm_audit.cli.main resumes it

from medvlm_audit.cli import main  # noqa: E402

main(gc_paused=True)
