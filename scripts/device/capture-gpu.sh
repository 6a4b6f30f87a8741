#!/usr/bin/env bash
# Run on a lent GPU machine (the device tool): captures what gpufleet's metrics sampler and
# GPU health probe read from the real tools, into $OUT, and runs both on it.
set -u
out=${OUT:-/tmp/gpu-capture}
mkdir -p "$out"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits
} > "$out/nvidia-smi-metrics.txt" 2>&1
nvidia-smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending,retired_pages.single_bit_ecc.count,retired_pages.double_bit.count --format=csv,noheader > "$out/nvidia-smi-health.csv" 2>&1
nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure --format=csv,noheader > "$out/nvidia-smi-remapped.csv" 2>&1
(command -v dcgmi && dcgmi --version && dcgmi health -c -j) > "$out/dcgmi.txt" 2>&1
python3 - "$out" <<'PY' > "$out/probe.txt" 2>&1
import json, os, re, subprocess, sys
sys.path.insert(0, os.getcwd())
from gpufleet._collection import ensure_importable
ensure_importable()
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import healthside, health, wrapper, metrics
probe = healthside.probe_health()
print("PROBE", json.dumps(probe)[:6000])
print("JUDGED", json.dumps(health.judge_answers({"gpu-0": probe}))[:3000])
text = wrapper.WRAPPER
start = text.index("_gf_key() {")
end = text.index("# The interval without leading zeros")
script = text[start:end] + "\n_gf_sample\n"
sample = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
print("SAMPLE", repr(sample.stdout), repr(sample.stderr[-500:]))
print("PARSED", json.dumps(metrics.parse(sample.stdout))[:3000])
PY
cat "$out"/*.txt "$out"/*.csv | head -80
