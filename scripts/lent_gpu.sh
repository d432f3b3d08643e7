#!/bin/bash
# The lent GPU's one command (README, "On a lent GPU"): the GPU tests, the group step's time, then the
# fused campaign of data/campaign-gpu.toml in the group size that finishes the most runs in the time left (or,
# where none does, the layer benchmarks first and then pairs, whose checkpoints come back), packed into
# $OUT. Run from the repository root there, with the data in .gpu-data (ptb and ptb_char) and, to
# resume, a previous lease's pack in .gpu-data/pack:
#     LEASE_S=570 bash scripts/lent_gpu.sh          # the run tool's timeout_s: 600
export RECDROP_DATA=${RECDROP_DATA:-.gpu-data} PYTHONPATH=. PYTHONUNBUFFERED=1
for d in ptb ptb_char; do  # the tests and the campaign read both; a lease spent without them is lost
  [ -d "$RECDROP_DATA/$d" ] || { echo "error: $RECDROP_DATA/$d is missing: copy it there and carry it (README)"; exit 1; }
done
END=$(( $(date +%s) + ${LEASE_S:-570} ))
left() { echo $(( END - $(date +%s) )); }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-' | sed 's/-80gb-hbm3//')
echo "$GPU, commit $(git log --oneline -1)"; git status --short | head -3
mkdir -p "$OUT/bench"
if [ -d "$RECDROP_DATA/pack" ]; then python3 -m recdrop.campaign --unpack "$RECDROP_DATA/pack"; fi
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_graphs.py -k on_cuda 2>&1 \
    | tee "$OUT/bench/graphs-test.log" | tail -3
if [ "${PIPESTATUS[0]}" -ne 0 ]; then echo "the CUDA graphs' test failed: graphs off"; export RECDROP_CUDA_GRAPHS=0; fi
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_fused_training.py -k "each_member and cuda" 2>&1 \
    | tee "$OUT/bench/fused-test.log" | tail -3
timeout 150 python3 benchmarks/bench_groups.py --device cuda --models word --sizes 1 2 4 8 26 --out "$OUT/bench/groups-$GPU.csv"
CAMP=$(( $(left) - 45 ))
CAP=$(python3 - "$CAMP" "$OUT/bench/groups-$GPU.csv" <<'PY'
import csv, sys
budget, steps = float(sys.argv[1]), 829 * 100  # a Table 2 paper run: 100 epochs of 829 steps
try:
    step = {int(r["runs"]): float(r["group_s"]) for r in csv.DictReader(open(sys.argv[2]))}
except OSError:
    step = {}
finished = {r: int(budget // (1.15 * s * steps)) * r for r, s in step.items()}  # 15% for evaluation
print(max(finished, key=lambda r: (finished[r], r)) if any(finished.values()) else 0)  # the most runs finished
PY
)
if [ "$CAP" = "0" ]; then  # no group finishes: the layers first, then pairs that checkpoint
  for p in "" --packed; do timeout 100 python3 benchmarks/bench_layers.py --device cuda --schemes semeniuta gal moon \
      $p --out "$OUT/bench/$GPU${p#-}.csv"; done
  CAMP=$(( $(left) - 45 )); CAP=2
fi
echo "campaign: ${CAMP} s, groups of up to ${CAP}"
(cd "$OUT/bench" && tar cf ../bench.tar ./*) && rm -r "$OUT/bench"  # the CSVs and the tests' whole logs
if [ "$CAMP" -gt 60 ]; then
  timeout $(( CAMP + 40 )) python3 -m recdrop.campaign --file data/campaign-gpu.toml --for "${CAMP}s" --device cuda \
      --fuse "$CAP" --no-progress --pack "$OUT" 2>&1 | grep -v "^not_started"
fi
echo "left: $(left) s"; ls -l "$OUT"
