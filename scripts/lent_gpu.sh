#!/bin/bash
# The lent GPU's one command (README, "On a lent GPU"): the GPU tests, the group step's time (unless this
# GPU's is stored), then the fused campaign of data/campaign-gpu.toml in the group size that finishes the
# most runs in the time left (where none finishes: this GPU's layer benchmarks if they are not stored
# and there is time, then pairs, whose checkpoints come back), packed into $OUT with bench.tar (the
# benchmarks as data/benchmarks/ lays them out, and the tests' logs). Run from the repository root
# there, with .gpu-data/data.tgz (ptb and ptb_char) and, to resume, a previous lease's pack in .gpu-data/pack:
#     LEASE_S=585 bash scripts/lent_gpu.sh          # the run tool's timeout_s: 600
export RECDROP_DATA=${RECDROP_DATA:-.gpu-data} PYTHONPATH=. PYTHONUNBUFFERED=1
END=$(( $(date +%s) + ${LEASE_S:-585} ))
left() { echo $(( END - $(date +%s) )); }
[ -f "$RECDROP_DATA/data.tgz" ] && tar xzf "$RECDROP_DATA/data.tgz" -C "$RECDROP_DATA"
for d in ptb ptb_char; do  # the tests and the campaign read both; a lease spent without them is lost
  [ -d "$RECDROP_DATA/$d" ] || { echo "error: $RECDROP_DATA/$d is missing: put it in data.tgz and carry it (README)"; exit 1; }
done
GPU=gpu-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-' | sed 's/-80gb-hbm3//')
echo "$GPU, commit $(git log --oneline -1)"; git status --short | head -3
B="$OUT/bench"; mkdir -p "$B/groups" "$B/logs"
if [ -d "$RECDROP_DATA/pack" ]; then python3 -m recdrop.campaign --unpack "$RECDROP_DATA/pack"; fi
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_graphs.py -k on_cuda > "$B/logs/graphs-test.log" 2>&1
if [ $? -ne 0 ]; then echo "the CUDA graphs' test failed: graphs off"; export RECDROP_CUDA_GRAPHS=0; fi
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_fused_training.py -k "each_member and cuda" > "$B/logs/fused-test.log" 2>&1
tail -qn1 "$B"/logs/*.log
GROUPS_CSV=data/benchmarks/groups/$GPU.csv
if [ ! -f "$GROUPS_CSV" ] || [ "${RECDROP_CUDA_GRAPHS:-1}" = 0 ]; then
  GROUPS_CSV=$B/groups/$GPU.csv
  timeout 150 python3 benchmarks/bench_groups.py --device cuda --models word --sizes 1 2 4 8 26 --out "$GROUPS_CSV"
fi
size() {  # the group size that finishes the most Table 2 paper runs (100 epochs of 829 steps) in $1 seconds
  python3 - "$1" "$GROUPS_CSV" <<'PY'
import csv, sys
budget, steps = float(sys.argv[1]), 829 * 100
try:
    step = {int(r["runs"]): float(r["group_s"]) for r in csv.DictReader(open(sys.argv[2]))}
except OSError:
    step = {}
finished = {r: int(budget // (1.1 * s * steps)) * r for r, s in step.items()}  # 10% for the evaluations
print(max(finished, key=lambda r: (finished[r], r)) if any(finished.values()) else 0)
PY
}
CAP=$(size $(( $(left) - 45 )))
if [ "$CAP" = 0 ] && ! grep -qs ungraphed_ms "data/benchmarks/$GPU.csv" && [ "$(left)" -gt 300 ]; then  # the layers
  for p in "" --packed; do timeout 100 python3 benchmarks/bench_layers.py --device cuda --schemes semeniuta gal moon \
      $p --out "$B/$GPU${p#-}.csv"; done
fi
[ "$CAP" = 0 ] && CAP=2
CAMP=$(( $(left) - 45 ))
echo "campaign: ${CAMP} s, groups of up to ${CAP}"
(cd "$B" && tar cf ../bench.tar .) && rm -r "$B"
if [ "$CAMP" -gt 60 ]; then
  timeout $(( CAMP + 40 )) python3 -m recdrop.campaign --file data/campaign-gpu.toml --for "${CAMP}s" --device cuda \
      --fuse "$CAP" --no-progress --pack "$OUT" 2>&1 | grep -v "^not_started"
fi
echo "left: $(left) s"; ls -l "$OUT"
