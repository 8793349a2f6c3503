#!/usr/bin/env bash
# One 4-GPU session for the runs that need no vLLM (issues 28, 24 probes, 30, 27), as one detached queue.
#
#   bash benchmarks/gpu_session_x4.sh launch    # first call (carry .whl .nccltests): install, copy, queue
#   bash benchmarks/gpu_session_x4.sh status    # later calls: where the queue is (keeps the machine warm)
#   bash benchmarks/gpu_session_x4.sh raystage 1|2  # calls carrying .rw1, then .rw2: Ray for the multinode step
#   bash benchmarks/gpu_session_x4.sh rayvllm   # alone (< 7 min): vLLM TP=2 under Ray on GPUs 2-3 (needs vLLM, Ray)
#   bash benchmarks/gpu_session_x4.sh collect   # results as a few files under $OUT
#
# The queue (each step bounded by `timeout`, its log under /tmp/gs):
#   1. doctor, gen-config, snapshot (issue 28 item 1)
#   2. the main job live on 4 pairs, sequential then -n 4 --dist loadgroup, a booking sampler beside (item 2)
#   3. faults: an xdist worker SIGKILLed mid-run; a second pytest run while the first holds the leases (item 4)
#   4. the probe checks 10x on GPUs 0-1 and 10x on 2-3 at once (issue 24 goal: 0 failures in 20), the
#      project's suite (hermetic) beside them on the CPUs
#   5. our all-reduce against all_reduce_perf on 0-1 (issue 24), GPU faults then Ray's two nodes on 2-3
#      (issues 30 and 27: the probe, then vLLM TP=2 under Ray when vLLM is there), then the tests marked gpu
set -uo pipefail
cd "$(dirname "$0")/.."
W=/tmp/gs
NO_MC="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site

say() { echo "[$(date -u +%T) +$(( $(date +%s) - $(cat $W/t0) ))s] $*" | tee -a "$W/queue.log"; }

rig28() {  # $1 = file, $2 = pairs (YAML)
  cat > "$1" <<EOF
rig: x4-pairs
gpus: all
pairs: $2
env: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"}
expect: {peer_access: true}
arms: {p2p_on: p2p_on, p2p_off: p2p_off}
probe:
  sizes: [8KiB, 128KiB, 64MiB]
  nccl_tests: false
  thresholds:
    per_arm:
      p2p_on: {busbw_min_gbs: {64MiB: 100}, latency_max_us: {8KiB: 40}}
      p2p_off: {busbw_min_gbs: {64MiB: 5}, latency_max_us: {8KiB: 80}}
  uplift: {faster: p2p_on, slower: p2p_off, min: 5%}
campaign: {kind: probe, arms: [p2p_on, p2p_off], sizes: [8KiB, 64MiB], reps: 3, schedule: interleaved,
           cooldown_s: 1, min_uplift: {default: 5%}}
EOF
}

main_job() {  # $1 = name, then pytest args; the rig owner's command, from a directory of its own
  local name=$1; shift
  mkdir -p "$W/$name" && cd "$W/$name"
  timeout 900 python3 -m pytest -m p2p --pyargs pytest_p2p --p2p-live -rs -p no:cacheprovider \
    --p2p-results "$W/$name/results" --junitxml "$W/$name/junit.xml" "$@" > "$W/$name/log.txt" 2>&1
  echo "exit $?" >> "$W/$name/log.txt"
  cd - > /dev/null
}

rayvllm() {  # issue 27 item 4: vllm serve TP=2 under Ray across two Ray nodes (GPUs 2-3), if Ray and vLLM are here
  if python3 -c 'import ray, vllm' 2>/dev/null; then
    (cd $W/proj && MULTINODE_GPUS=2,3 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
       timeout 420 python3 benchmarks/multinode_vllm_gpu.py --out $W/multinode_vllm > $W/multinode_vllm.txt 2>&1)
  else echo "MULTINODE_VLLM FAIL: ray or vllm not importable (stage them first)" > $W/multinode_vllm.txt; fi
}

queue() {
  local P=$W/proj
  say "queue starts"
  # 1. what NVML says about every pair
  (cd $W && python3 -m pytest_p2p doctor > doctor.txt 2>&1; python3 -m pytest_p2p gen-config --out rig_gen.yaml \
     > genconfig.txt 2>&1; python3 -m pytest_p2p snapshot --out x4.snapshot.json > snapshot.txt 2>&1; \
     nvidia-smi topo -m > topo.txt 2>&1)
  say "1 done: doctor/gen-config/snapshot"
  # nccl-tests builds on the CPUs meanwhile (step 5 needs it)
  (cd $P && timeout 600 python3 benchmarks/probe_vs_nccl_tests.py --nccl-tests-src $W/nccltests --build-only \
     --out $W/pvn > $W/pvn_build.log 2>&1) &
  # 2. the main job on 4 pairs: sequential, then 4 workers
  rig28 $W/rig28.yaml "[[0, 1], [2, 3], [0, 2], [1, 3]]"
  python3 $P/benchmarks/gpu_booking.py --out $W/booking_main.json > $W/booking_main.txt 2>&1 &
  local mon=$!
  local t=$(date +%s); main_job n1 --p2p-rig $W/rig28.yaml; say "2a n1 done in $(( $(date +%s) - t )) s"
  t=$(date +%s); main_job n4 --p2p-rig $W/rig28.yaml -n 4 --dist loadgroup; say "2b n4 done in $(( $(date +%s) - t )) s"
  kill $mon; wait $mon
  # 3. faults: a worker SIGKILLed; a second run while the first holds the leases
  rig28 $W/rig_f.yaml "[[0, 1], [2, 3]]"
  python3 $P/benchmarks/gpu_booking.py --out $W/booking_faults.json > $W/booking_faults.txt 2>&1 &
  mon=$!
  main_job kill --p2p-rig $W/rig_f.yaml -n 2 --dist loadgroup & local runner=$!
  sleep 40
  local main_pid; main_pid=$(pgrep -f "^python3 -m pytest .*p2p-results $W/kill/results" | head -1)
  local victim; victim=$(pgrep -P "$main_pid" | head -1)
  say "3a killing xdist worker $victim (of pytest $main_pid): $(tr '\0' ' ' < /proc/$victim/cmdline 2>/dev/null | cut -c1-120)"
  kill -9 "$victim"; wait $runner
  say "3a done; GPU processes after: $(nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader | wc -l)"
  main_job second_a --p2p-rig $W/rig_f.yaml -n 2 --dist loadgroup --p2p-save-baseline --p2p-db $W/f.db & local ra=$!
  sleep 15
  main_job second_b --p2p-rig $W/rig_f.yaml -n 2 --dist loadgroup --p2p-save-baseline --p2p-db $W/f.db
  wait $ra
  kill $mon; wait $mon
  (cd $W && python3 -m pytest_p2p baseline --db $W/f.db list > baseline_list.txt 2>&1)
  say "3b done; GPU processes after: $(nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader | wc -l)"
  # 4. the probe checks 20 times (two pairs at once), the suite beside them
  (cd $W && timeout 900 python3 $P/benchmarks/probe_uplift_repeat.py --runs 10 --pair 0,1 --max-s 420 \
     --out $W/rep01 > $W/rep01.txt 2>&1) & local r1=$!
  (cd $W && timeout 900 python3 $P/benchmarks/probe_uplift_repeat.py --runs 10 --pair 2,3 --max-s 420 \
     --out $W/rep23 > $W/rep23.txt 2>&1) & local r2=$!
  (cd $P && timeout 600 python3 -m pytest -n 16 -q -p no:cacheprovider --ignore=tests/test_gpu_probe_workers.py \
     > $W/suite.txt 2>&1; echo "exit $?" >> $W/suite.txt) &
  wait $r1 $r2
  say "4 done: probe repeats"
  # 5. against nccl-tests on 0-1; faults then Ray on 2-3
  (cd $P && timeout 600 python3 benchmarks/probe_vs_nccl_tests.py --nccl-tests-bin $W/pvn/nccl-tests/build \
     --rounds 4 --out $W/pvn > $W/pvn.txt 2>&1) & local pv=$!
  (cd $P && GPU_FAULTS_PAIR=2,3 OUT=$W/faults timeout 420 python3 benchmarks/gpu_faults.py > $W/faults.txt 2>&1;
   if python3 -c 'import ray' 2>/dev/null; then MULTINODE_GPUS=2,3 timeout 300 python3 benchmarks/multinode_gpu.py \
     --out $W/multinode > $W/multinode.txt 2>&1; else echo "ray not installed" > $W/multinode.txt; fi
   rayvllm) & local fl=$!
  wait $pv $fl
  say "5 done: nccl-tests, faults, multinode"
  (cd $P && P2P_TEST_REAL_GPU=1 timeout 600 python3 -m pytest -q -p no:cacheprovider -m gpu -rs \
     tests/test_gpu_probe_workers.py tests/test_gate_hermetic.py > $W/gputests.txt 2>&1; echo "exit $?" >> $W/gputests.txt)
  wait
  say "queue done"
}

case "${1:-status}" in
  launch)
    rm -rf $W && mkdir -p $W/proj && date +%s > $W/t0
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > $W/pip.txt 2>&1 \
      || { cat $W/pip.txt; exit 1; }
    tar --exclude='./.vw*' --exclude='./.rw*' --exclude='./.git' --exclude='./.whl' --exclude='./.nccltests' -cf - . \
      | tar -C $W/proj -xf -
    cp -r .nccltests $W/nccltests
    nvidia-smi -L; python3 -c 'import torch, pytest_p2p, xdist, yaml, pynvml, openai; print("torch", torch.__version__, torch.cuda.device_count(), "GPUs")'
    setsid nohup bash "$W/proj/benchmarks/gpu_session_x4.sh" _queue > $W/queue.out 2>&1 < /dev/null & disown
    echo "queue launched";;
  _queue) queue;;
  rayvllm) mkdir -p $W/proj && [ -f $W/t0 ] || date +%s > $W/t0
    tar --exclude='./.vw*' --exclude='./.rw*' --exclude='./.git' --exclude='./.whl' --exclude='./.nccltests' -cf - . \
      | tar -C $W/proj -xf -
    rayvllm; tail -n 3 $W/multinode_vllm.txt;;
  endgame)  # a short device budget: after step 3, steps 4-5 in less time (runs detached, from the private copy)
    cp "$0" $W/proj/benchmarks/gpu_session_x4.sh
    setsid nohup bash $W/proj/benchmarks/gpu_session_x4.sh _endgame > $W/endgame.out 2>&1 < /dev/null & disown
    echo "endgame launched";;
  _endgame)
    P=$W/proj
    until grep -q '^exit' $W/second_a/log.txt 2>/dev/null && grep -q '^exit' $W/second_b/log.txt 2>/dev/null; do sleep 2; done
    pkill -f "gpu_session_x4.sh _queue"; sleep 1; pkill -f probe_uplift_repeat; pkill -f "pytest -n 16"; sleep 3
    (cd $W && python3 -m pytest_p2p baseline --db $W/f.db list > baseline_list.txt 2>&1)
    say "endgame: 3b done; GPU processes after: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
    (cd $P && timeout 400 python3 -m pytest -n 16 -q -p no:cacheprovider --ignore=tests/test_gpu_probe_workers.py \
       > $W/suite.txt 2>&1; echo "exit $?" >> $W/suite.txt) &
    (cd $W && timeout 330 python3 $P/benchmarks/probe_uplift_repeat.py --runs 10 --pair 0,1 --max-s 230 \
       --out $W/rep01 > $W/rep01.txt 2>&1) & r1=$!
    (cd $W && timeout 330 python3 $P/benchmarks/probe_uplift_repeat.py --runs 10 --pair 2,3 --max-s 230 \
       --out $W/rep23 > $W/rep23.txt 2>&1) & r2=$!
    wait $r1 $r2
    say "endgame: repeats done"
    (cd $P && timeout 200 python3 benchmarks/probe_vs_nccl_tests.py --nccl-tests-bin $W/pvn/nccl-tests/build \
       --rounds 3 --out $W/pvn > $W/pvn.txt 2>&1) &
    (cd $P && GPU_FAULTS_PAIR=2,3 OUT=$W/faults timeout 200 python3 benchmarks/gpu_faults.py --trials 2 > $W/faults.txt 2>&1;
     MULTINODE_GPUS=2,3 timeout 120 python3 benchmarks/multinode_gpu.py --out $W/multinode > $W/multinode.txt 2>&1) &
    wait
    say "endgame done";;
  raystage)  # $2 = 1 or 2: a call carries one .rwK (both at once exceed a call's 64 MiB); the second installs
    mkdir -p /tmp/rwstage && cp .rw"$2"/* /tmp/rwstage/
    [ -d .whl2 ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl
    [ "$2" = 2 ] && bash /tmp/rwstage/ray_wheels.sh install 2>&1 | tail -2
    bash "$0" status;;
  status)
    tail -n 12 $W/queue.log 2>/dev/null
    for f in n1/log.txt n4/log.txt kill/log.txt second_a/log.txt second_b/log.txt rep01.txt rep23.txt pvn.txt \
             faults.txt multinode.txt multinode_vllm.txt suite.txt gputests.txt; do
      [ -f "$W/$f" ] && echo "-- $f: $(tail -c 300 $W/$f | tr '\r' '\n' | grep -v '^$' | tail -1)"
    done
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader;;
  collect)
    mkdir -p "$OUT"
    cp $W/queue.log "$OUT/" 2>/dev/null
    tar -C $W -czf "$OUT/x4_logs.tgz" --exclude='nccltests' --exclude='proj' --exclude='*/results/*/scenarios/*/run_*.json' \
      --exclude='multinode_vllm/tiny-model' \
      queue.log doctor.txt genconfig.txt rig_gen.yaml snapshot.txt topo.txt rig28.yaml rig_f.yaml booking_main.json \
      booking_main.txt booking_faults.json booking_faults.txt baseline_list.txt n1 n4 kill second_a second_b rep01.txt \
      rep23.txt rep01/runs.json rep23/runs.json pvn.txt pvn_build.log faults.txt faults multinode.txt multinode suite.txt \
      gputests.txt multinode_vllm.txt multinode_vllm 2>/dev/null
    cp $W/x4.snapshot.json "$OUT/" 2>/dev/null
    ls -la "$OUT";;
esac
