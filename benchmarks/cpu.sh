#!/bin/bash
# The CPU benchmarks of the Performance page, on this machine, from a clean commit, into data/benchmarks/
# under this CPU's kind (cpu-amd-epyc-..., cpu-intel-xeon-...):
#     bash benchmarks/cpu.sh          # or: make bench-cpu
# - matmul/cpu-KIND-1thread-routed.csv, matmul/cpu-KIND-2threads-routed.csv: the big products, MKL and oneDNN;
# - cpu-KIND-2threads-routed.csv: an LSTM and a GRU at hidden 256, 35 steps, batch 32;
# - cpu-KIND-2threads-tagger-routed.csv, cpu-KIND-2threads-tagger-packed-routed.csv: the tagger's BiLSTM;
# - cpu-KIND-1thread-char-lm-routed.csv: the reduced char LM's LSTM (512 over 256, 100 steps, batch 16) on
#   one thread, as the campaign trains it;
# - the same four with -input-grad: the input needs its gradient too, as over an embedding.
# Timings need an idle machine: a campaign running here (python -m recdrop.campaign) is paused meanwhile
# (SIGSTOP, its wall clock goes on) and resumed at the end, however this script ends.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
KIND=$($PY -c "
import re
from recdrop.store import hardware
name = re.sub(r'\(r\)|\(tm\)|processor|cpu @.*|\(\d+ threads?\)', '', hardware('cpu').lower())
print(re.sub(r'[^a-z0-9]+', '-', name).strip('-'))")
OUT=data/benchmarks
campaign=$(pgrep -f "recdrop.campaign|multiprocessing.spawn" || true)
if [ -n "$campaign" ]; then
  trap 'kill -CONT $campaign 2>/dev/null || true' EXIT
  kill -STOP $campaign
  echo "# paused the campaign's processes: $campaign" | tr '\n' ' '; echo
fi
for threads in 1 2; do
  suffix=$([ "$threads" = 1 ] && echo 1thread || echo 2threads)
  $PY benchmarks/bench_matmul.py --threads "$threads" --repeats 9 --out "$OUT/matmul/cpu-$KIND-$suffix-routed.csv"
done
layers=(--threads 2 --kinds LSTM GRU --hidden 256 --seq 35 --batch 32 --repeats 9)
tagger=(--threads 2 --kinds LSTM --hidden 100 --input 150 --seq 30 --batch 10 --bidirectional --repeats 15)
char_lm=(--threads 1 --kinds LSTM --hidden 512 --input 256 --seq 100 --batch 16 --repeats 5)
for grad in "" --input-grad; do
  name=${grad:+-input-grad}
  $PY benchmarks/bench_layers.py "${layers[@]}" $grad --out "$OUT/cpu-$KIND-2threads$name-routed.csv"
  $PY benchmarks/bench_layers.py "${tagger[@]}" $grad --out "$OUT/cpu-$KIND-2threads-tagger$name-routed.csv"
  $PY benchmarks/bench_layers.py "${tagger[@]}" $grad --packed --out "$OUT/cpu-$KIND-2threads-tagger-packed$name-routed.csv"
  $PY benchmarks/bench_layers.py "${char_lm[@]}" $grad --out "$OUT/cpu-$KIND-1thread-char-lm$name-routed.csv"
done
echo "# written under $OUT as cpu-$KIND-*: commit them"
