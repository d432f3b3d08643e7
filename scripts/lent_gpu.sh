#!/bin/bash
# A lent GPU's lease (CONTRIBUTING.md, "On a lent GPU"), in phases, so that its training can span two commands
# of at most 10 minutes: a process started with setsid runs on between commands while the machine is
# warm. Run from the repository root there, every command carrying .gpu-data: data.tgz (ptb and ptb_char),
# head.bundle (main) and, to resume, a previous lease's pack in .gpu-data/pack:
#     bash scripts/lent_gpu.sh setup              # carry [".gpu-data"]: data, pack, GPU tests, group steps, profiles
#     bash scripts/lent_gpu.sh train S [WAIT]     # the fused campaign, detached, packed within S seconds
#     bash scripts/lent_gpu.sh finish             # wait for it (not past its end), then its pack into $OUT
#     bash scripts/lent_gpu.sh layers             # this GPU's layer benchmarks, if minutes remain
#     bash scripts/lent_gpu.sh profile            # what bounds each model's 26-run step (setup runs it too)
#     bash scripts/lent_gpu.sh check              # bf16 against float32 on a Table 3 cell at reduced, if minutes remain
#     LEASE_S=585 bash scripts/lent_gpu.sh        # all in one command of LEASE_S seconds
# S counts from train's start to the written pack: the device time left after setup (the run tool's
# budget_left_s) less the commands' transfers and the gaps between them. Whatever the lease makes
# lives outside the repository's folder, which each command copies anew: the store in
# /tmp/lease/runs (a copy of data/runs), the checkpoints in ~/.cache/recdrop. Files come back in each
# phase's own $OUT: setup's bench.tar (the benchmarks as data/benchmarks/ lays them out, and the tests'
# whole logs); the pack (records and as many checkpoints as fit) and campaign.log from train, where
# the campaign has ended by then, and from finish.
set -u
LEASE=/tmp/lease
# What the commands carry (.gpu-data: data.tgz, head.bundle, a pack to resume) arrives in the repository's
# folder, which each command replaces; the data is unpacked outside it, so that a campaign running on
# between commands keeps reading it whatever the next command carries.
CARRIED=.gpu-data
export RECDROP_DATA=${RECDROP_DATA:-$LEASE/data} PYTHONPATH=. PYTHONUNBUFFERED=1
# A dry run of the whole lease here: LEASE_DEVICE=cpu, LEASE_PRECISION=float32, LEASE_SIZES="1 2" and
# LEASE_REDUCED_SIZES="1 2" (the group sizes setup times), a stand-in nvidia-smi on PATH, and
# LEASE_CAMPAIGN a copy of data/campaign-gpu.toml whose entries allow the cpu (theirs name cuda only)
DEVICE=${LEASE_DEVICE:-cuda} CAMPAIGN=${LEASE_CAMPAIGN:-data/campaign-gpu.toml}
# TF32 products on the GPU (the word LM's 26 decoders take 9.4 ms a step in float32, 1.8 in TF32); an entry of
# the campaign may name its own (the char LM: bf16); every record says which. LEASE_PRECISION=float32 for
# float32 throughout (and for a rehearsal on the CPU, where LEASE_BF16=float32 stands in for bf16 too).
PRECISION=${LEASE_PRECISION:-tf32}
BF16=${LEASE_BF16:-bf16}
CACHE=${RECDROP_CACHE:-$HOME/.cache/recdrop}
export RECDROP_RUNS=$LEASE/runs
START_S=30  # from the campaign's launch to its clock: imports, the store, CUDA
STOP_S=40   # from its clock's end to the written pack: the last step, checkpoints, a pack of 60 MiB
mkdir -p "$LEASE"
gpu_name() { echo -n gpu-; nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-' | sed 's/-80gb-hbm3//'; }
now() { date +%s; }

in_place() {  # every phase: the data unpacked and the checkout at the commit that home has
  # A command's copy of the repository may hold an older .git than the working tree it carries (seen on the
  # lease of 2026-11-26: HEAD the session's first commit, the tree a later one), and the records would name
  # that commit "-dirty" and be refused at home; the bundle of main puts HEAD where the tree is.
  if [ -f "$CARRIED/head.bundle" ]; then
    git fetch -q "$CARRIED/head.bundle" main && git reset -q FETCH_HEAD || echo "warning: the bundle did not apply"
  fi
  mkdir -p "$RECDROP_DATA"
  for d in ptb ptb_char; do
    [ -d "$RECDROP_DATA/$d" ] || { [ -f "$CARRIED/data.tgz" ] && tar xzf "$CARRIED/data.tgz" -C "$RECDROP_DATA"; }
  done
}

setup() {
  for d in ptb ptb_char; do  # the tests and the campaign read both; a lease spent without them is lost
    [ -d "$RECDROP_DATA/$d" ] || { echo "error: $RECDROP_DATA/$d is missing: put it in $CARRIED/data.tgz and carry it (CONTRIBUTING.md)"; exit 1; }
  done
  local gpu; gpu=$(gpu_name)
  echo "$gpu, commit $(git log --oneline -1)"; git status --short | head -3
  rm -rf "$RECDROP_RUNS" && cp -r data/runs "$RECDROP_RUNS"
  local b="$LEASE/bench"; rm -rf "$b"; mkdir -p "$b/groups" "$b/logs"
  [ -z "$(git status --porcelain --untracked-files=no)" ] || echo "warning: the code is not a clean commit: home will refuse its records"
  if [ -d "$CARRIED/pack" ]; then python3 -m recdrop.campaign --unpack "$CARRIED/pack" || echo "warning: the pack did not unpack whole"; fi
  : > "$LEASE/env"
  timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_graphs.py -k on_cuda > "$b/logs/graphs-test.log" 2>&1
  if [ $? -ne 0 ]; then echo "the CUDA graphs' test failed: graphs off"; echo "export RECDROP_CUDA_GRAPHS=0" > "$LEASE/env"; fi
  . "$LEASE/env"
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_fused_training.py tests/test_stacked.py -k "(each_member and cuda) or on_cuda" > "$b/logs/fused-test.log" 2>&1
  # the whole training step as one CUDA graph (issue 46) against the eager step; on failure the step runs eagerly
  timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_step_graph.py -k on_cuda > "$b/logs/step-graph-test.log" 2>&1
  if [ $? -ne 0 ]; then echo "the step graph's test failed: steps eager"; echo "export RECDROP_STEP_GRAPH=0" >> "$LEASE/env"; fi
  . "$LEASE/env"
  # each log's summary under its name (on 2026-11-27 an unnamed "1 failed" was the fused test's, for the char LM)
  for f in "$b"/logs/*.log; do echo "$(basename "$f" .log): $(tail -n1 "$f")"; done
  grep -hE "^(FAILED|ERROR)" "$b"/logs/*.log
  # the kernels of a group's stacked runs and of bf16 products, on this GPU (on failure no kernels: RECDROP_TRITON=0)
  timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/triton_cases.py -k "group or autocast or adam" > "$b/logs/triton-test.log" 2>&1
  if [ $? -ne 0 ]; then echo "the Triton kernels' test failed: kernels off"; echo "export RECDROP_TRITON=0" >> "$LEASE/env"; fi
  # a bf16 group against its runs alone; on failure the campaign's bf16 entries train in TF32
  timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_fused_training.py -k "agrees_with_its_run_alone and bf16 and cuda and char" \
      > "$b/logs/bf16-test.log" 2>&1
  if [ $? -ne 0 ]; then echo "the bf16 group's test failed: its entries train in $PRECISION"; echo "export BF16=$PRECISION" >> "$LEASE/env"; fi
  . "$LEASE/env"
  # each log's summary under its name (on 2026-11-27 an unnamed "1 failed" was the fused test's, for the char LM)
  for f in "$b"/logs/*.log; do echo "$(basename "$f" .log): $(tail -n1 "$f")"; done
  grep -hE "^(FAILED|ERROR)" "$b"/logs/*.log
  # the groups' steps at both precisions, which size the campaign's groups (train), the group alone timed
  for p in "$PRECISION" "$BF16"; do
    timeout 150 python3 benchmarks/bench_groups.py --device "$DEVICE" --models char word --sizes ${LEASE_SIZES:-1 4 8 13 26} \
        --group-only --repeats 2 --warmup-s 0.5 --min-s 0.2 --precision "$p" --out "$b/groups/$gpu-$p-lease.csv"
  done
  # Table 3's reduced seeds train in float32, as the CPU's records of them: their groups' steps at that scale
  timeout 120 python3 benchmarks/bench_groups.py --device "$DEVICE" --models char --scale reduced \
      --sizes ${LEASE_REDUCED_SIZES:-1 13} --group-only --repeats 2 --warmup-s 0.5 --min-s 0.2 --precision float32 \
      --out "$b/groups/$gpu-float32-reduced-lease.csv"
  cat "$b"/groups/*-lease.csv | awk 'NR == 1 || !/^model,/' > "$LEASE/groups.csv"
  pack_bench  # what is measured so far comes back even where the command's limit stops the profiles
  profile_step "${LEASE_PROFILE_RUNS:-26}"
  pack_bench
  echo "setup done"
}

profile_step() {  # what bounds each model's group step of $1 runs at its training precision: kernels and operators
  local gpu; gpu=$(gpu_name); mkdir -p "$LEASE/bench/profiles"
  timeout 90 python3 benchmarks/profile_group.py --device "$DEVICE" --model word --runs "$1" --steps 5 --precision "$PRECISION" \
      --out "$LEASE/bench/profiles/$gpu-word-$1-$PRECISION.csv"
  timeout 90 python3 benchmarks/profile_group.py --device "$DEVICE" --model char --runs "$1" --steps 5 --precision "$BF16" \
      --out "$LEASE/bench/profiles/$gpu-char-$1-$BF16.csv"
}

pack_bench() { (cd "$LEASE/bench" && tar cf "$OUT/bench.tar" .) && echo "bench.tar: $(tar tf "$OUT/bench.tar" | grep -c '\.\(csv\|log\)$') files"; }

running() { [ -f "$LEASE/pid" ] && [ ! -f "$LEASE/rc" ] && kill -0 "$(cat "$LEASE/pid")" 2>/dev/null; }

train() {  # $1: seconds from now to the written pack; $2: how long this command waits for it
  [ -f "$LEASE/env" ] && [ -d "$RECDROP_RUNS" ] && [ -d "$RECDROP_DATA/ptb" ] || {
    echo "error: setup has not run on this machine (a fresh one, after the warm one went back?): run setup first"; exit 1; }
  if running; then echo "error: a campaign runs already (pid $(cat "$LEASE/pid")): wait for it with finish"; exit 1; fi
  local budget=$(( $1 - START_S - STOP_S ))
  echo "campaign: ${budget} s of training; its pack due by $(date -d @$(( $(now) + $1 )) +%T)"
  echo $(( $(now) + $1 )) > "$LEASE/end"
  rm -rf "$LEASE/pack" "$LEASE/rc"; mkdir -p "$LEASE/pack"
  # the bf16 entries at this lease's bf16 (setup falls back to the lease's precision where its test failed)
  sed "s/^precision = \"bf16\"/precision = \"$BF16\"/" "$CAMPAIGN" > "$LEASE/campaign.toml"
  # each experiment's groups as large as finish in the time left, by setup's step times; none starts that
  # would not finish (a char LM's checkpoint, 64 MB, cannot come back)
  setsid nohup bash -c "python3 -m recdrop.campaign --file '$LEASE/campaign.toml' --for ${budget}s --device '$DEVICE' \
      --fuse fit --whole-runs --group-times '$LEASE/groups.csv' --precision '$PRECISION' --no-progress --pack $LEASE/pack \
      > $LEASE/campaign.log 2>&1; echo \$? > $LEASE/rc" < /dev/null > /dev/null 2>&1 &
  echo $! > "$LEASE/pid"
  wait_campaign $(( $(now) + ${2:-560} ))
  running || collect
}

wait_campaign() {  # until the campaign ends or the time $1, with its checkpoints once a minute
  local next=0 newest
  while running && [ "$(now)" -lt "$1" ]; do
    if [ "$(now)" -ge "$next" ]; then
      newest=$(ls -t "$CACHE"/checkpoints/*/*/*.pt 2>/dev/null | head -1)
      echo "$(date +%T): $(ls "$CACHE"/checkpoints/*/*/*.pt 2>/dev/null | wc -l) checkpoints${newest:+, the newest $(basename "$newest") written $(date -r "$newest" +%T)}"
      next=$(( $(now) + 60 ))
    fi
    sleep 2
  done
  if running; then echo "the campaign runs on (pid $(cat "$LEASE/pid"))"; else echo "the campaign ended (exit $(cat "$LEASE/rc" 2>/dev/null))"; fi
}

collect() {  # the pack and the log into this command's $OUT
  grep -v "^not_started" "$LEASE/campaign.log" | tail -25; cp "$LEASE/campaign.log" "$OUT/"
  cp "$LEASE"/pack/* "$OUT/" 2>/dev/null || echo "error: no pack was written: see campaign.log"
  ls -l "$OUT"
}

finish() {  # waits until the campaign ends, but not past its pack's due time and 20 s more
  [ -f "$LEASE/end" ] || { echo "error: no campaign was started on this machine"; exit 1; }
  wait_campaign $(( $(cat "$LEASE/end") + 20 ))
  if running; then echo "error: the campaign is not done at its due time: what is packed so far comes back"; fi
  collect
}

profile() {  # what bounds each model's 26-run step (LEASE_PROFILE_RUNS), if setup's timed out
  profile_step "${LEASE_PROFILE_RUNS:-26}"
  pack_bench
}

check() {  # bf16 against float32 on one Table 3 cell at reduced scale, if minutes remain (about 3 on an H200)
  local gpu; gpu=$(gpu_name); mkdir -p "$LEASE/bench/precision"
  timeout 400 python3 benchmarks/precision_check.py --device "$DEVICE" --scale reduced \
      --out "$LEASE/bench/precision/$gpu-reduced.csv"
  pack_bench
}

layers() {
  local gpu; gpu=$(gpu_name); mkdir -p "$LEASE/bench"
  for p in "" --packed; do timeout 100 python3 benchmarks/bench_layers.py --device "$DEVICE" --schemes semeniuta gal moon \
      $p --out "$LEASE/bench/$gpu${p#-}.csv"; done
  # a mixed-precision user's layer: both under bf16 autocast
  timeout 100 python3 benchmarks/bench_layers.py --device "$DEVICE" --autocast bf16 --out "$LEASE/bench/$gpu-autocast-bf16.csv"
  # a layer over an embedding or another layer: the input's gradient too (cuDNN computes it either way)
  timeout 100 python3 benchmarks/bench_layers.py --device "$DEVICE" --input-grad --out "$LEASE/bench/$gpu-input-grad.csv"
  pack_bench
}

in_place
# each phase after setup keeps what setup switched off (the graphs, the step graph); setup, and all, write it anew
case "${1:-all}" in setup|all) ;; *) [ ! -f "$LEASE/env" ] || . "$LEASE/env" ;; esac
case "${1:-all}" in
  setup) setup ;;
  train) train "${2:?train needs the seconds from now to the written pack}" "${3:-560}" ;;
  finish) finish ;;
  layers) layers ;;
  profile) profile ;;
  check) check ;;
  all)
    END=$(( $(now) + ${LEASE_S:-585} ))
    setup
    LEFT=$(( END - $(now) - 15 ))  # 15 s to copy the pack into $OUT
    if [ "$LEFT" -gt 120 ]; then train "$LEFT" "$LEFT"; running && finish; fi
    echo "left: $(( END - $(now) )) s" ;;
  *) echo "usage: $0 [setup | train SECONDS [WAIT] | finish | layers | profile | check | all]"; exit 2 ;;
esac
