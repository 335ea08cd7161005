#!/usr/bin/env bash
# Every GPU check of the project in one run, for a session lent a GPU through the workplace's device tool (about 15
# minutes of device time, start-up included; each step has its own time limit, so one that overruns leaves the rest).
#
#   bash benchmarks/device_checks.sh prepare   # here, before: copies ../shared's files the checks read into .gpu/
#                                             # (../shared does not travel) and fetches the wheels the GPU machine
#                                             # lacks into .whl/ (its transformers is older than 5.24; no trl, datasets;
#                                             # peft for the LoRA sides of bench-scale-vlm-gpu)
#   bash benchmarks/device_checks.sh run       # there (carry .gpu and .whl): writes each check's markdown to $OUT
#
# Then copy each section from $OUT into docs/BENCHMARKS.md (the file names say which). Both folders are git-ignored
# through .git/info/exclude (prepare adds them).
set -u
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
  grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
  grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
  mkdir -p .gpu .whl
  cp ../shared/data/coco/val2014_captions.json ../shared/data/coco/human_agreement_5k.json .gpu/
  for p in transformers==5.24.0 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 peft==0.21.2; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl "$p"
  done
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: bash benchmarks/device_checks.sh prepare|run"; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
log=$OUT/all.log; t0=$(date +%s)
step() {  # step SECONDS NAME COMMAND...: one check, its output in the log, its status and the time so far
  local limit=$1 name=$2; shift 2
  timeout "$limit" "$@" >> "$log" 2>&1; echo "$name rc=$? at $(( $(date +%s) - t0 )) s" | tee -a "$log"
}
# first what no GPU has measured yet, then the checks measured on an H200 on 2026-11-28 (measured again if time is left)
step 40 draw-compile python3 benchmarks/draw_compile_check.py
step 170 bench-hf python3 benchmarks/bench_hf.py --parts gpu --gpu-configs base:50 --gpu-scored-configs base:50 \
  --repeats 3 --steps 2 --budget 20 --coco .gpu/human_agreement_5k.json --out "$OUT/bench_hf.md"
step 150 bench-trl python3 benchmarks/bench_trl.py --steps 20 --threads 4 --out /tmp/bench_trl --doc "$OUT/bench_trl.md"
# the GPU section of make bench-scale-vlm: GRPO at Qwen2.5-VL-3B's published shape (random bf16 weights, LoRA r 16,
# 8 pictures x 8 samples, 64 new tokens), rlcap (image tokens online) beside TRL's GRPOTrainer; the 3B folder is
# built on the GPU into /tmp/bench_svg (about 7 GB) by the first step and read by the second. Estimates, not
# measured: building and saving it about 1 min; each side about 1-1.5 min (start, load, 5 steps of about 5 s, and
# rlcap's end-of-run checkpoint, about 15 GB at this size, removed after it); about 4 min, then 3 min.
# The second step trains adapters on the tower too and needs rlcap's model.train_vision: without that key it stops
# at once, in one line, and the first step's rows stay in bench_scale_vlm_gpu.md.
step 300 bench-scale-vlm-gpu python3 benchmarks/bench_scale_vlm_gpu.py --towers frozen --out /tmp/bench_svg \
  --doc "$OUT/bench_scale_vlm_gpu.md"
step 210 bench-scale-vlm-gpu-tower python3 benchmarks/bench_scale_vlm_gpu.py --towers lora --out /tmp/bench_svg \
  --doc "$OUT/bench_scale_vlm_gpu.md"
step 150 bench-scale python3 benchmarks/bench_scale.py --images 2000 --parts gpu --gpu-steps 20 --out /tmp/bench_scale \
  --doc "$OUT/bench_scale.md"
step 130 gpu-check python3 benchmarks/gpu_check.py --out "$OUT/gpu_check.md"
step 60 pytest-cuda python3 -m pytest -m cuda -q -p no:randomly -p no:cacheprovider tests/test_gpu_check.py
for arch in fc updown transformer; do
  step 110 "bench-gpu-$arch" python3 benchmarks/bench_gpu.py --archs "$arch" --captions .gpu/val2014_captions.json \
    --out "$OUT/bench_gpu_$arch.md"
done
