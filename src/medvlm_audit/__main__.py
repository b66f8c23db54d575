"""`python -m medvlm_audit` runs the CLI."""

from medvlm_audit.cli import main

main()
