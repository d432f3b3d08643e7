#!/bin/bash
# A lent GPU's lease (README, "On a lent GPU"), in phases, so that its training can span two commands
# of at most 10 minutes: a process started with setsid runs on between commands while the machine is
# warm. Run from the repository root there, with .gpu-data/data.tgz (ptb and ptb_char) and, to resume,
# a previous lease's pack in .gpu-data/pack:
#     bash scripts/lent_gpu.sh setup              # carry [".gpu-data"]: data, pack, GPU tests, group step
#     bash scripts/lent_gpu.sh train S [WAIT]     # the fused campaign for S seconds, detached; wait WAIT s
#     bash scripts/lent_gpu.sh finish [WAIT]      # wait for it to end, then its pack and log into $OUT
#     bash scripts/lent_gpu.sh layers             # this GPU's layer benchmarks, if minutes remain
#     LEASE_S=585 bash scripts/lent_gpu.sh        # all in one command of LEASE_S seconds, as before
# S is the device time left (the run tool's budget_left_s after setup) less a margin for the commands'
# transfers. The phases share /tmp/lease there; each phase's files come back in its own $OUT:
# setup's bench.tar (the benchmarks as data/benchmarks/ lays them out, and the tests' whole logs),
# finish's pack (records and as many checkpoints as fit) and campaign.log.
set -u
export RECDROP_DATA=${RECDROP_DATA:-.gpu-data} PYTHONPATH=. PYTHONUNBUFFERED=1
LEASE=/tmp/lease
mkdir -p "$LEASE"
gpu_name() { echo -n gpu-; nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-' | sed 's/-80gb-hbm3//'; }

setup() {
  [ -f "$RECDROP_DATA/data.tgz" ] && tar xzf "$RECDROP_DATA/data.tgz" -C "$RECDROP_DATA"
  for d in ptb ptb_char; do  # the tests and the campaign read both; a lease spent without them is lost
    [ -d "$RECDROP_DATA/$d" ] || { echo "error: $RECDROP_DATA/$d is missing: put it in data.tgz and carry it (README)"; exit 1; }
  done
  local gpu; gpu=$(gpu_name)
  echo "$gpu, commit $(git log --oneline -1)"; git status --short | head -3
  local b="$LEASE/bench"; rm -rf "$b"; mkdir -p "$b/groups" "$b/logs"
  if [ -d "$RECDROP_DATA/pack" ]; then python3 -m recdrop.campaign --unpack "$RECDROP_DATA/pack"; fi
  : > "$LEASE/env"
  timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_graphs.py -k on_cuda > "$b/logs/graphs-test.log" 2>&1
  if [ $? -ne 0 ]; then echo "the CUDA graphs' test failed: graphs off"; echo "export RECDROP_CUDA_GRAPHS=0" > "$LEASE/env"; fi
  . "$LEASE/env"
  timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_fused_training.py -k "each_member and cuda" > "$b/logs/fused-test.log" 2>&1
  tail -qn1 "$b"/logs/*.log
  if [ -f "data/benchmarks/groups/$gpu.csv" ] && [ "${RECDROP_CUDA_GRAPHS:-1}" != 0 ]; then
    cp "data/benchmarks/groups/$gpu.csv" "$LEASE/groups.csv"
  else  # the group sizes' step times, which choose the size (a stored file is of a step with graphs)
    timeout 120 python3 benchmarks/bench_groups.py --device cuda --models word --sizes 1 2 4 8 --out "$b/groups/$gpu.csv"
    cp "$b/groups/$gpu.csv" "$LEASE/groups.csv" 2>/dev/null
  fi
  pack_bench
}

pack_bench() { (cd "$LEASE/bench" && tar cf "$OUT/bench.tar" .) && echo "bench.tar: $(tar tf "$OUT/bench.tar" | grep -c '\.\(csv\|log\)$') files"; }

size() {  # the group size that finishes the most Table 2 paper runs (100 epochs of 829 steps) in $1 seconds
  python3 - "$1" "$LEASE/groups.csv" <<'PY'
import csv, sys
import numpy as np
budget, steps = float(sys.argv[1]), 829 * 100
try:
    measured = {int(r["runs"]): float(r["group_s"]) for r in csv.DictReader(open(sys.argv[2]))}
except OSError:
    measured = {}
if not measured:
    print(0); sys.exit()
sizes = sorted(measured)  # between measured sizes a step's time is interpolated: it grows about linearly
step = {r: float(np.interp(r, sizes, [measured[s] for s in sizes])) for r in range(1, max(sizes) + 1)}
finished = {r: int(budget // (1.1 * s * steps)) * r for r, s in step.items()}  # 10% for the evaluations
print(max(finished, key=lambda r: (finished[r], r)) if any(finished.values()) else 0)
PY
}

train() {  # $1: the campaign's seconds; $2: how long this command waits for it
  [ -f "$LEASE/env" ] && . "$LEASE/env"
  local cap; cap=$(size $(( $1 - 30 )))  # 30 s for the campaign's start: imports, data, CUDA
  [ "$cap" = 0 ] && cap=2  # none finishes: pairs, whose two checkpoints (22 MB each) come back
  echo "campaign: $1 s, groups of up to $cap"
  rm -rf "$LEASE/pack"; mkdir -p "$LEASE/pack"
  setsid nohup python3 -m recdrop.campaign --file data/campaign-gpu.toml --for "$1s" --device cuda \
      --fuse "$cap" --no-progress --pack "$LEASE/pack" > "$LEASE/campaign.log" 2>&1 < /dev/null &
  echo $! > "$LEASE/pid"
  wait_campaign "${2:-560}"
}

wait_campaign() {  # until the campaign ends or $1 seconds pass, with its checkpoints once a minute
  local pid until next=0; pid=$(cat "$LEASE/pid"); until=$(( $(date +%s) + $1 ))
  while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do
    if [ "$(date +%s)" -ge "$next" ]; then
      local newest; newest=$(ls -t ~/.cache/recdrop/checkpoints/*/*.pt 2>/dev/null | head -1)
      echo "$(date +%T): $(ls ~/.cache/recdrop/checkpoints/*/*.pt 2>/dev/null | wc -l) checkpoints${newest:+, the newest $(basename "$newest") written $(date -r "$newest" +%T)}"
      next=$(( $(date +%s) + 60 ))
    fi
    sleep 5
  done
  if kill -0 "$pid" 2>/dev/null; then echo "the campaign runs on (pid $pid)"; else echo "the campaign ended"; fi
}

finish() {
  wait_campaign "${1:-540}"
  cp "$LEASE/campaign.log" "$OUT/" 2>/dev/null; grep -v "^not_started" "$LEASE/campaign.log" | tail -25
  cp "$LEASE"/pack/* "$OUT/" 2>/dev/null; ls -l "$OUT"
}

layers() {
  local gpu; gpu=$(gpu_name); mkdir -p "$LEASE/bench"
  for p in "" --packed; do timeout 100 python3 benchmarks/bench_layers.py --device cuda --schemes semeniuta gal moon \
      $p --out "$LEASE/bench/$gpu${p#-}.csv"; done
  pack_bench
}

case "${1:-all}" in
  setup) setup ;;
  train) train "${2:?train needs the campaign length in seconds}" "${3:-560}" ;;
  finish) finish "${2:-540}" ;;
  layers) layers ;;
  all)
    END=$(( $(date +%s) + ${LEASE_S:-585} ))
    setup
    CAMP=$(( END - $(date +%s) - 45 ))
    if [ "$(size $(( CAMP - 30 )))" = 0 ] && ! grep -qs ungraphed_ms "data/benchmarks/$(gpu_name).csv" && [ "$CAMP" -gt 300 ]; then
      layers; CAMP=$(( END - $(date +%s) - 45 ))
    fi
    if [ "$CAMP" -gt 60 ]; then train "$CAMP" $(( CAMP + 30 )); finish 30; fi
    echo "left: $(( END - $(date +%s) )) s" ;;
  *) echo "usage: $0 [setup | train SECONDS [WAIT] | finish [WAIT] | layers | all]"; exit 2 ;;
esac
