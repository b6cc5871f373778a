#!/usr/bin/env bash
# The device check behind docs/devices-measured.md: calibrate the device JAX sees, then measure the
# LLaMA 3 8B decode point and a few README examples against the stock and the calibrated presets.
#   benchmarks/device_check.sh OUTDIR [BASE]        (BASE: the preset compared with, default h100)
# MODEL, SEQ, DIMS, QUICK=1 shrink it (a CPU rehearsal: MODEL=a tiny config file, QUICK=1).
set -u
OUT=${1:?give an output folder}; BASE=${2:-h100}
MODEL=${MODEL:-llama3-8b}; SEQ=${SEQ:-1024}; DIMS=${DIMS:-I=8192,J=8192,K=8192}; PREFILL=${PREFILL:-2048}
SC="python3 -m symcost.cli"
Q=""; [ "${QUICK:-0}" = 1 ] && Q="--quick"
mkdir -p "$OUT"
LOG="$OUT/measure.txt"
{ nvidia-smi -L 2>/dev/null; python3 -c "import jax; print('jax', jax.__version__, jax.devices())"; } > "$LOG" 2>&1
CAL="$OUT/calibrated.toml"
timeout 240 $SC calibrate $Q --base "$BASE" --model "$MODEL" --dtypes bf16 --runs 10 --no-progress --out "$CAL" \
  > "$OUT/calibrate.txt" 2>&1 || echo "calibrate exit $?" >> "$OUT/calibrate.txt"
[ -f "$CAL" ] || CAL="$BASE"
run() { echo "\$ symcost $*" >> "$LOG"; timeout 120 $SC "$@" >> "$LOG" 2>&1 || echo "(exit $?)" >> "$LOG"; }
timeout 150 $SC measure "$MODEL" --decode --batch 1 --seq "$SEQ" --hw "$BASE" --no-steps --runs 20 --json \
  > "$OUT/decode-stock.json" 2>&1
run measure "$MODEL" --decode --batch 1 --seq "$SEQ" --layers 2 --hw "$CAL" --runs 20
run measure "$MODEL" --prefill --seq "$PREFILL" --layers 4 --hw "$CAL" --runs 10
run measure "A[I, J] * B[J, K] -> C[I, K]" --dims "$DIMS" --hw "$CAL" --runs 10
run measure "A[I, J] * B[J, K] -> C[I, K]" --dims "$DIMS" --hw "$BASE" --runs 10
run measure "In[B, D] *_D W[D, F] -> Out[B, F]" --dims B=1,D=4096,F=14336 --hw "$CAL" --runs 20
run measure "In[B, D] *_D W[D, F] -> Out[B, F]" --dims B=1,D=4096,F=14336 --hw "$BASE" --runs 20
