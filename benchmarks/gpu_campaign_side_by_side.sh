#!/usr/bin/env bash
# The resident-arms design against the restart-per-rep design, side by side on one GPU machine (issue 24).
#
#   bash benchmarks/gpu_campaign_side_by_side.sh launch   # model dir, two rigs, both campaigns detached
#   bash benchmarks/gpu_campaign_side_by_side.sh status   # progress lines of both
#   bash benchmarks/gpu_campaign_side_by_side.sh collect  # results as one tarball under $OUT
#
# With 4 GPUs the two designs run at the same time on disjoint pairs (new on 0-1, old on 2-3); with 2 GPUs the
# old design follows the new one on the same pair. Both use fixtures/rigs/nvlink-pair-vllm-7b.yaml (7B-shape
# Llama, dummy weights, TP=2, CUDA graphs on): the new design as written but with a fixed number of starts
# (no adaptive starts, so both end in a bounded time), the old one with `residency: restart`, 4 reps ABBA,
# no smoke starts. Needs vLLM at /tmp/site (../shared/vllm) and the project at the working directory.
set -euo pipefail
cd "$(dirname "$0")/.."
W=/tmp/sbs
if [ "${1:-}" = launch ] && [ "$PWD" != /tmp/sbs/proj ]; then
  # run from a private copy: the working tree may be re-synced while the campaigns run for many minutes
  mkdir -p "$W" && rm -rf "$W/proj" && mkdir "$W/proj"
  tar -C "$PWD" --exclude='./.vw*' --exclude='./.git' -cf - . | tar -C "$W/proj" -xf -
  exec bash "$W/proj/benchmarks/gpu_campaign_side_by_side.sh" launch
fi
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1

rigs() {
  local gpus; gpus=$(nvidia-smi -L | wc -l)
  python3 - "$gpus" "$W" <<'EOF'
import sys, yaml
gpus, w = int(sys.argv[1]), sys.argv[2]
base = yaml.safe_load(open("fixtures/rigs/nvlink-pair-vllm-7b.yaml"))
new = yaml.safe_load(yaml.safe_dump(base))
new["rig"] = "sbs-resident"
new["campaign"].update({"max_starts": None, "max_time_s": None})
new["server"]["env"]["VLLM_CACHE_ROOT"] = f"{w}/cache-new"
old = yaml.safe_load(yaml.safe_dump(base))
old["rig"] = "sbs-restart"
old["pairs"] = [[2, 3]] if gpus >= 4 else [[0, 1]]
old["server"]["env"]["VLLM_CACHE_ROOT"] = f"{w}/cache-old"
c = old["campaign"]
for k in ("starts", "windows", "window_s", "max_starts", "max_time_s"):
    c.pop(k, None)
c.update({"residency": "restart", "reps": 4, "schedule": "abba", "smoke": False, "warmup": 4})
yaml.safe_dump(new, open(f"{w}/rig_new.yaml", "w"), sort_keys=False)
yaml.safe_dump(old, open(f"{w}/rig_old.yaml", "w"), sort_keys=False)
print("rigs: new on", new["pairs"], "old on", old["pairs"], f"({gpus} GPUs)")
EOF
}

run_one() {  # $1 = new|old; from $W, as a rig owner's directory (the project's tests/conftest.py switches NVML off)
  cd "$W"
  python3 -m pytest -p pytest_p2p.plugin -p no:cacheprovider -m p2p --pyargs pytest_p2p.checks.test_campaign \
    --p2p-live --p2p-rig "$W/rig_$1.yaml" --p2p-results "$W/res_$1" -rs -q \
    --junitxml "$W/junit_$1.xml" > "$W/log_$1.txt" 2>&1
  echo "exit $?" >> "$W/log_$1.txt"
  date +%s > "$W/done_$1"
}

case "${1:-status}" in
  launch)
    mkdir -p "$W"
    [ -f /tmp/m7b/config.json ] || python3 -m pytest_p2p.serve.tinymodel /tmp/m7b --hidden 4096 --layers 32 \
      --heads 32 --kv-heads 8 > "$W/model.log" 2>&1
    rigs
    date +%s > "$W/started"
    if [ "$(nvidia-smi -L | wc -l)" -ge 4 ]; then
      setsid nohup bash "$0" _run new > /dev/null 2>&1 < /dev/null & disown
      setsid nohup bash "$0" _run old > /dev/null 2>&1 < /dev/null & disown
    else
      setsid nohup bash -c "bash '$0' _run new; bash '$0' _run old" > /dev/null 2>&1 < /dev/null & disown
    fi
    echo "launched at $(date -u +%T)";;
  _run) run_one "$2";;
  status)
    now=$(date +%s); s=$(cat "$W/started" 2>/dev/null || echo "$now")
    echo "elapsed $(( (now - s) / 60 )) min $(( (now - s) % 60 )) s"
    for d in new old; do
      echo "== $d: $( [ -f "$W/done_$d" ] && echo "done after $(( $(cat "$W/done_$d") - s )) s" || echo running)"
      tail -c 600 "$W/log_$d.txt" 2>/dev/null | tr '\r' '\n' | tail -3 || true
    done
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader;;
  collect)
    mkdir -p "${OUT:-$W/out}"
    tar -C "$W" -czf "${OUT:-$W/out}/sbs_results.tgz" --exclude='cache-*' res_new res_old log_new.txt log_old.txt \
      junit_new.xml junit_old.xml rig_new.yaml rig_old.yaml started $(cd "$W" && ls done_* 2>/dev/null) 2>/dev/null || true
    ls -la "${OUT:-$W/out}";;
esac
