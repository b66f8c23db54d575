#!/bin/bash
# Issue 23's before/after figures in one invocation: the tree at REF (default e0f3143) against this checkout.
#
#   [PY=.venv/bin/python] benchmarks/before_after.sh [REF] [scale|runner|compare|fixed|faith|all]
#
# scale:   benchmarks/bench_scale.py (peak RSS and CPU per trial, 1k and 10k cases) from both trees
# runner:  benchmarks/bench_runner.py --cases 600 --rounds 2 --source-size 224 from both trees, twice
# compare: each embedded default (grounding, stress, faithfulness) from both trees, then compare_outputs.py
# fixed:   `medvlm-audit run` of a 12- and a 600-case grounding config against the fake server (/usr/bin/time)
# faith:   benchmarks/bench_faithfulness.py (this checkout's script) from both trees, alternately, twice
#
# SETS="--set n_cases=200" passes options to the grounding default of `compare` (its full run takes minutes at load);
# SUITES="grounding stress" limits which embedded defaults `compare` runs.
# Bytecode is written and used on both sides (PYTHONDONTWRITEBYTECODE unset): an environment that forbids it
# compiles ~50 of the package's modules on every invocation, ~0.09 CPU-s that is not the package's fixed cost.
set -u
unset PYTHONDONTWRITEBYTECODE
SETS=${SETS:-}
REF=${1:-e0f3143}
WHAT=${2:-all}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$HERE/.venv/bin/python}  # or PY=/path/to/venv/bin/python
[ -x "$PY" ] || PY=$(command -v python3)
OLD=$(mktemp -d /tmp/before_after.XXXX)
git -C "$HERE" archive "$REF" src tests benchmarks | tar -x -C "$OLD"
cp "$HERE/benchmarks/bench_scale.py" "$HERE/benchmarks/bench_faithfulness.py" "$OLD/benchmarks/"  # the benchmarks
# themselves may be newer than REF
echo "before = $REF (in $OLD), after = $HERE; $(uptime)"

if [ "$WHAT" = scale ] || [ "$WHAT" = all ]; then
  for side in before after; do
    src=$([ $side = before ] && echo "$OLD" || echo "$HERE")
    echo "== scale, $side"; PYTHONPATH=$src/src timeout 900 "$PY" "$src/benchmarks/bench_scale.py" | grep -v "RSS over"
  done
fi
if [ "$WHAT" = runner ] || [ "$WHAT" = all ]; then
  for i in 1 2; do for side in before after; do
    src=$([ $side = before ] && echo "$OLD" || echo "$HERE")
    echo "== runner, $side"; PYTHONPATH=$src/src timeout 900 "$PY" "$src/benchmarks/bench_runner.py" --cases 600 \
      --rounds 2 --source-size 224 2>&1 | grep -E "ratio|\(a\)|\(b\)|\(e\)|\(d\)"
  done; done
fi
if [ "$WHAT" = faith ] || [ "$WHAT" = all ]; then
  for i in 1 2; do for side in before after; do
    src=$([ $side = before ] && echo "$OLD" || echo "$HERE")
    echo "== faithfulness request path, $side"; PYTHONPATH=$src/src timeout 900 "$PY" \
      "$src/benchmarks/bench_faithfulness.py" 2>&1 | grep -E "load|median|like for like|round 0: (answer|judge)"
  done; done
fi
if [ "$WHAT" = compare ] || [ "$WHAT" = all ]; then
  for suite in ${SUITES:-grounding stress faithfulness}; do
    for side in before after; do
      src=$([ $side = before ] && echo "$OLD" || echo "$HERE")
      (cd /tmp && PYTHONPATH=$src/src /usr/bin/time -f "$suite $side: %e s wall, %U+%S s CPU, %M KB" timeout 900 \
        "$PY" -m medvlm_audit demo --suite $suite --out "$OLD/$suite-$side" --no-progress $([ $suite = grounding ] && echo $SETS) > "$OLD/$suite-$side.log" 2>&1;
       tail -1 "$OLD/$suite-$side.log")
    done
    b="$OLD/$suite-before"; a="$OLD/$suite-after"
    [ -d "$b/run" ] && b="$b/run" && a="$a/run"
    PYTHONPATH=$HERE/src "$PY" "$HERE/benchmarks/compare_outputs.py" "$b" "$a" | tail -3
  done
fi
if [ "$WHAT" = fixed ] || [ "$WHAT" = all ]; then
  PYTHONPATH=$HERE/src "$PY" - "$OLD" <<'PYX'
import sys; from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[1]) / "tests"))
from conftest import make_tiny_probeset
for n in (12, 600):
    make_tiny_probeset(Path(sys.argv[1]) / f"fixed/d{n}", n=n)
PYX
  PYTHONPATH=$HERE/src "$PY" -m medvlm_audit.testing.fake_openai --port 0 --delay-ms 20 > "$OLD/url.txt" &
  SRV=$!; sleep 3; URL=$(head -1 "$OLD/url.txt")
  for rep in 0 1 2 3; do for side in before after; do  # rep 0 writes each side's bytecode; not printed
    src=$([ $side = before ] && echo "$OLD" || echo "$HERE")
    for n in 12 600; do
      [ $rep = 0 ] && [ $n = 600 ] && continue
      printf 'suite: grounding\nprobe_sets: [%s]\nrun_dir: %s\nconditions: [original, swap, target_mask, irrelevant_mask, no_image]\nmodels: [{name: vlm, backend: openai, model: fake-vlm, base_urls: [%s], max_concurrency: 32}]\n' \
        "$OLD/fixed/d$n/probeset" "$OLD/fixed/run-$side-$n-$rep" "$URL" > "$OLD/fixed/c-$side-$n-$rep.yaml"
      (cd /tmp && PYTHONPATH=$src/src /usr/bin/time -f "fixed cost, $side, $n cases: %e s wall, %U+%S s CPU, %M KB" \
        "$PY" -m medvlm_audit run "$OLD/fixed/c-$side-$n-$rep.yaml" --no-progress --no-report 2>&1 | tail -1 \
        | grep -v "^$([ $rep = 0 ] && echo fixed || echo @@)")
    done
  done; done
  kill $SRV
fi
echo "$(uptime)"
