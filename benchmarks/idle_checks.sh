#!/bin/bash
# Issue 23's figures that need an idle machine (the 2-core development machine is shared and never idle), in one
# go, each against its baseline in the same invocation; written for a bare machine with python3 and this tree:
#
#   [PY=python3] [BEFORE=OLD/src] [OUT=folder] benchmarks/idle_checks.sh [quick|full] [runner fixed report reader faith]
#
# runner: bench_runner.py, 667 cases (2,001 distinct image inputs), 224 px sources (and 512 px in `full`)
# fixed:  bench_fixed_cost.py, this tree against BEFORE
# report: bench_report_cli.py, the paper-sized run (9 models x 2,575 cases, B = 10,000), against BEFORE
# reader: bench_reader_server.py, 50 readers, against BEFORE
# faith:  bench_faithfulness.py from this tree and from BEFORE (`full` only)
# BEFORE is a baseline's src/ folder (e.g. `git archive 9fe6eec src | tar -x -C OLD`); without it, no baseline
# beside the bare loops. Each section's output goes to $OUT/<section>.txt too.
set -u
MODE=${1:-quick}; shift || true
WHAT=${*:-runner fixed report reader faith}
PY=${PY:-python3}
OUT=${OUT:-/tmp/idle_checks}; mkdir -p "$OUT"
BEFORE=${BEFORE:-}; [ -n "$BEFORE" ] && BEFORE=$(cd "$BEFORE" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd); cd "$HERE"
export PYTHONPATH=$HERE/src PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
R=2; [ "$MODE" = full ] && R=3
say() { echo "== $* ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
say "start: $(nproc) CPUs, $($PY -c 'import sys, numpy, pandas, pyarrow, aiohttp, PIL; print(sys.version.split()[0], "numpy", numpy.__version__, "pandas", pandas.__version__, "pyarrow", pyarrow.__version__, "aiohttp", aiohttp.__version__, "pillow", PIL.__version__)')"
for w in $WHAT; do case $w in
runner)
  say runner 224
  timeout 300 $PY benchmarks/bench_runner.py --cases 667 --margin-cases 250 --rounds $R --source-size 224 2>&1 | tee "$OUT/runner.txt"
  if [ "$MODE" = full ]; then say runner 512
    timeout 300 $PY benchmarks/bench_runner.py --cases 667 --rounds 2 --source-size 512 2>&1 | tee -a "$OUT/runner.txt"; fi ;;
fixed)
  say fixed cost
  timeout 300 $PY benchmarks/bench_fixed_cost.py ${BEFORE:+--before "$BEFORE"} --cases 12 600 --repeats $R 2>&1 \
    | tee "$OUT/fixed.txt" ;;
report)
  say paper-sized report
  timeout 400 $PY benchmarks/bench_report_cli.py --run /tmp/paper-sized ${BEFORE:+--before "$BEFORE"} --repeats $R \
    $([ "$MODE" = full ] && echo --stages) 2>&1 | tee "$OUT/report.txt" ;;
reader)
  say reader server
  timeout 300 $PY benchmarks/bench_reader_server.py --readers 50 --seconds $([ "$MODE" = full ] && echo 15 || echo 8) \
    --lock-s $([ "$MODE" = full ] && echo 10 || echo 0) ${BEFORE:+--before-src "$BEFORE"} 2>&1 | tee "$OUT/reader.txt" ;;
faith)
  [ "$MODE" = full ] || continue
  for side in after before; do
    [ $side = before ] && [ -z "$BEFORE" ] && continue
    say "faithfulness request path, $side"
    PYTHONPATH=$([ $side = before ] && echo "$BEFORE" || echo "$HERE/src") timeout 300 $PY \
      benchmarks/bench_faithfulness.py --rounds 2 2>&1 | tee -a "$OUT/faith.txt"
  done ;;
esac; done
say end
