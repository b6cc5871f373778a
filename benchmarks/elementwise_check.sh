#!/usr/bin/env bash
# The device check behind docs/devices-measured.md's "a layer with elementwise work": `measure` of Megatron's
# sequence-parallel GPT layer (examples/megatron_sp_layer.sc) at one GPU's share of the 22B layer at TP 8
# (Korthikanti et al. 2022, Table 4: 8 of the 64 heads, 3,072 of the 24,576 hidden units), and of the
# LLaMA 3 8B decode layer (examples/llama3_8b_decode_layer.sc), against the preset of the GPU found.
#   OUT=folder benchmarks/elementwise_check.sh
set -u
OUT=${OUT:?give an output folder in OUT}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H200*) HW=h200;; *) HW=h100;; esac
echo "$GPU -> $HW" > "$OUT/info.txt"
python3 -c "import jax; print(jax.__version__, jax.devices())" >> "$OUT/info.txt" 2>&1
SC="python3 -m symcost.cli"
LAYER="examples/megatron_sp_layer.sc --mesh Y=1 --dims B=4,T=2048,S=2048,D=6144,K=8,G=1,H=96,F=3072"
timeout 200 $SC measure $LAYER --hw $HW --runs 20 > "$OUT/sp_layer.txt" 2>&1; echo "exit $?" >> "$OUT/sp_layer.txt"
timeout 200 $SC measure $LAYER --hw $HW --runs 20 --json > "$OUT/sp_layer.json" 2> "$OUT/sp_layer.err"
timeout 120 $SC measure examples/llama3_8b_decode_layer.sc --dims B=1,T=1,S=1024,D=4096,K=8,G=4,H=128,F=14336 \
  --hw $HW --runs 20 > "$OUT/decode_layer.txt" 2>&1; echo "exit $?" >> "$OUT/decode_layer.txt"
# a model's whole layer stack (its elementwise work included), as one call and step by step
timeout 200 $SC measure llama3-8b --decode --batch 1 --seq 1024 --hw $HW --no-steps --runs 20 \
  > "$OUT/decode_stack.txt" 2>&1; echo "exit $?" >> "$OUT/decode_stack.txt"
timeout 200 $SC measure llama3-8b --prefill --seq 2048 --layers 4 --hw $HW --no-steps --runs 10 \
  > "$OUT/prefill_stack.txt" 2>&1; echo "exit $?" >> "$OUT/prefill_stack.txt"
timeout 200 $SC measure llama3-8b --train --batch 1 --seq 2048 --layers 1 --hw $HW --no-steps --runs 10 \
  > "$OUT/train_layer.txt" 2>&1; echo "exit $?" >> "$OUT/train_layer.txt"
# the same layer in Megatron's [s, b, h] order (the scores [b, np, sq, sk]), and every run again predicted at
# the preset's achieved figures (--efficiency) rather than its peaks
timeout 200 $SC measure examples/megatron_sp_layer_sbh.sc ${LAYER#examples/megatron_sp_layer.sc} --hw $HW --runs 20 \
  > "$OUT/sp_layer_sbh.txt" 2>&1; echo "exit $?" >> "$OUT/sp_layer_sbh.txt"
for f in megatron_sp_layer megatron_sp_layer_sbh; do
  timeout 200 $SC measure examples/$f.sc ${LAYER#examples/megatron_sp_layer.sc} --hw $HW --runs 20 --no-steps \
    --efficiency > "$OUT/${f}_achieved.txt" 2>&1; echo "exit $?" >> "$OUT/${f}_achieved.txt"
done
for mode in "--decode --batch 1 --seq 1024" "--prefill --seq 2048 --layers 4" "--train --batch 1 --seq 2048 --layers 1"; do
  name=$(echo $mode | cut -d' ' -f1 | tr -d -)
  timeout 200 $SC measure llama3-8b $mode --hw $HW --no-steps --runs 10 --efficiency > "$OUT/${name}_achieved.txt" 2>&1
  echo "exit $?" >> "$OUT/${name}_achieved.txt"
done
