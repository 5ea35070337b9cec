#!/usr/bin/env bash
# One prepared check of the CUDA path (issue 9), for a lent GPU machine with no network, ≤ 5 minutes:
#   1. the CUDA cases of the overlap and engine tests (device-parametrized; they skip on CPU),
#   2. `bench overlap --device cuda` with a torch.profiler trace (open it in https://ui.perfetto.dev),
#   3. `bench overlap` on two pinned CPU cores of that quiet machine (the laptop setting, no neighbours).
# Usage (from the repo root): OUT=/some/dir bash scripts/gpu_check.sh    (python3 must hold torch)
set -u
OUT=${OUT:-/tmp/radixlab-gpu-check}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
status=0
{
  date -u; nvidia-smi -L 2>&1 | head -2
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
  nproc
} 2>&1 | tee "$OUT/env.txt"

echo "== 1. CUDA tests"
timeout 150 $PY -m pytest -q -p no:cacheprovider -k "cuda" \
  tests/test_overlap.py tests/test_engine.py tests/test_engine_proofs.py tests/test_engine_overlap.py 2>&1 \
  | tee "$OUT/tests_cuda.txt" | tail -15 || status=1

echo "== 2. bench overlap --device cuda (+ torch.profiler trace)"
timeout 90 $PY -m radixlab bench overlap --device cuda --repeats 3 --trace "$OUT/overlap_trace.json" \
  --json "$OUT/bench_cuda.json" --plot "$OUT/curve_cuda.png" 2>&1 | tee "$OUT/bench_cuda.txt" || status=1
gzip -f "$OUT/overlap_trace.json" 2>/dev/null

echo "== 3. bench overlap on 2 pinned CPU cores"
PIN=""; command -v taskset >/dev/null && [ "$(nproc)" -ge 4 ] && PIN="taskset -c 2,3"
timeout 150 $PIN $PY -m radixlab bench overlap --repeats 3 --json "$OUT/bench_cpu2.json" \
  --plot "$OUT/curve_cpu2.png" 2>&1 | tee "$OUT/bench_cpu2.txt" || status=1
exit $status
