#!/usr/bin/env bash
# The GPU runs still owed on a 2-GPU machine (issues 30, 24, 27), as one detached queue of chosen steps.
#
#   bash benchmarks/gpu_session_x2.sh stage K        # calls 1..8, each carrying .vwK: vLLM 0.24 (../shared/vllm);
#                                                    # the last also carries .whl (project + deps) and installs them after
#                                                    # vLLM (carried earlier, a machine lost between calls loses them too)
#                                                    # A call carries the tracked tree too (11 MiB on 2026-11-28), and
#                                                    # .vw7 (53 MiB) with it passed the 64 MiB a call may carry: move
#                                                    # two of its wheels to .vw7b (mv .vw7/pycountry-* .vw7/mistral_common-*
#                                                    # .vw7b/) and stage 7b in a call of its own before 8
#   bash benchmarks/gpu_session_x2.sh launch STEP... # the queue, detached (steps below, in the order given)
#   bash benchmarks/gpu_session_x2.sh lane NAME A,B STEP...  # a queue of its own on GPUs A,B (4-GPU machines:
#                                                    # one lane per pair, e.g. lane a 0,1 ... and lane b 2,3 ...)
#   bash benchmarks/gpu_session_x2.sh status         # where it is, and collect (a call every < 30 s keeps the machine)
#   bash benchmarks/gpu_session_x2.sh stop           # the queues and what they started (never pkill -f the script's
#                                                    # name from a call: it matches that call and kills it)
#   bash benchmarks/gpu_session_x2.sh wait [S]       # poll until the queue is done or S seconds (280) passed, then
#                                                    # status: a whole call of polling, so the next call follows at once
#                                                    # (three nights were lost right after a ~9-minute call: keep them short)
#                                                    # issue the next wait at once, and read what came back in a
#                                                    # call beside it: two selfchecks were lost to a gap of > 30 s
#   bash benchmarks/gpu_session_x2.sh collect        # results under $OUT: logs, run.json, history.db and every rep's
#                                                    # metrics as res_*_poll_compact.json (the rep files stay: 101 MiB)
#
# Steps (minutes on 2x H100, estimated from the 4x H100 session of 2026-11-26):
#   topo      the CPUs (lscpu, each CPU's last-level cache and SMT siblings) and nvidia-smi topo -m: topo.txt  ~0
#   faults    benchmarks/gpu_faults.py --vllm --trials 3: six faults x 3, one line each (issue 30)      ~12
#             (FAULTS_ONLY=vllm-oom,engine-kill: those two, ~6)
#   repeat    the probe checks 20 times on GPUs 0-1 (issue 24 goal: 0 failures in 20)                    ~9
#   nccltests our all-reduce against all_reduce_perf, both arms, 4 rounds (issue 24: <= 10 %)            ~3
#   ray       two Ray nodes on one host, the all-reduce probe across them (issue 27; needs .rw1/.rw2)   ~1
#   rayvllm   benchmarks/multinode_vllm_gpu.py: TP=2 vllm serve under Ray across the two nodes, arms
#             socket and p2p_on, per-worker transport proof, nothing left (issue 27 item 4; .rw1/.rw2) ~5
#   windows   a resident 7B-shape campaign, 2 starts x 6 window pairs at c16/c64, then
#             benchmarks/window_noise.py: the window-pair spread of both throughput metrics (issue 24) ~18
#   raypytest benchmarks/multinode_pytest_gpu.py: the plugin itself (pytest -m p2p) on a multi-node rig of two
#             Ray nodes (ray start, one GPU each): crossing probe and vLLM under Ray (issue 27; .rw1/.rw2) ~4
#   cache     benchmarks/compile_cache_gpu.py: three starts of one arm reuse vLLM's compile cache (issue 24) ~4
#   cache2    the same across two processes (a night's first start loads the cache: the key lasts)       ~3
#   heartbeat benchmarks/heartbeat_gpu.py: the evidence and probe phases' progress lines (issue 26)      ~1
#   startfork benchmarks/start_phases_gpu.py: one arm's tiny server started 1 + 3 x 2 times, default,
#             VLLM_WORKER_MULTIPROC_METHOD=fork and max-num-seqs 64 alternated: does fork hold and skip
#             re-importing vLLM in the engine core and the workers (~40 s of a ~100 s start on 2x H200), and
#             what do fewer CUDA graphs save? (issue 24)                                                      ~8
#   selfcheck .ci/gpu-selfcheck: the project's suite (hermetic), the gpu-marked tests, doctor and the main job
#             live, auto-detected and with a gen-config rig (issue 10's check, repeated on this tree)        ~8
#             (SUITE=0: without the hermetic suite, which CI runs: ~7)
#   waitvllm  waits (<= 15 min) until vLLM imports: lets a lane start before the last stage call
#   noiseab   one output length against lengths within a range (CAMPAIGN_RANGE, default 0.5), interleaved on
#             the 7B rig's two servers started once: NOISEAB_ROUNDS (8) rounds at NOISEAB_C (16), windows of
#             NOISEAB_WINDOW_S (6) s (benchmarks/window_noise_ab.py)                                       ~6
#   campaign2 the resident 7B campaign with parallel starts (rig-set KV cache), 3 starts x 3 window pairs of
#             10 s at c16/c64, then window_noise.py and campaign_compact.py (issue 24)                    ~15
#             (CAMPAIGN_RANGE r: server.load.range_ratio r; CAMPAIGN_AHEAD=1: campaign.start_ahead, the next launch's servers started and held ahead;
#             CAMPAIGN_STARTS, CAMPAIGN_WINDOWS, CAMPAIGN_WINDOW_S change the design; CAMPAIGN_SEQS n sets
#             server.args max-num-seqs n, CAMPAIGN_FORK=1 server.env VLLM_WORKER_MULTIPROC_METHOD=fork; CAMPAIGN_CPUS=auto server.cpus auto; CAMPAIGN_AT_ONCE k
#             makes k starts per launch (3 launches at least), CAMPAIGN_KV_GIB the KV cache of each server,
#             default 16); the step twice in one queue: two nights on the pair, the second judged against
#             the first's baseline in history.db (campaign2_night2.txt). CAMPAIGN_RIG=FILE runs that rig file
#             as it is (the prior and the baseline need the same rig file: what it says, and for nights saved
#             before 2026-11-28 its bytes), HISTORY_DB=FILE starts
#             from a carried store: e.g. .night1/ (git-ignored, carried) holds the 2026-11-26 late-night run's
#             rig and history.db, so CAMPAIGN_RIG=.night1/rig_campaign2.yaml HISTORY_DB=.night1/history.db
#             makes tonight its second night (a start prior needs 3 earlier nights: bring history.db back);
#             with CAMPAIGN_RIG, CAMPAIGN_STARTS N is --p2p-reps N (starts are not part of the design key);
#             CAMPAIGN_COMPARE=1 adds the baseline checks and --p2p-compare (the nightly recipe: from the
#             chain's night 4, HISTORY_DB=benchmarks/results/history-h200-7b-committed-8x2x6.5-night3-*.db);
#             CAMPAIGN_WINDOW_AT=16:5,64:8.5 sets campaign.window_s per point in the rig it runs (the rig's
#             length the default; a new design, so its own chain: benchmarks/verdict_prior_committed.py table 4c);
#             CAMPAIGN_WINDOWS_AT=64:3 sets campaign.windows per point likewise (the rig's count the default;
#             with CAMPAIGN_STARTS=7: table 4d's 7 starts x 2 / 3 pairs, ~14.4 min, a chain of its own);
#             CAMPAIGN_PRECISION=2% sets campaign.precision (starts added while an estimate is wider); not part of
#             the design key, but an edit of the rig file as any other: the chain's prior is not lent to it;
#             CAMPAIGN_WARMUP_ORDER=reverse sets campaign.warmup_order in the rig it runs (window_noise.py's
#             "first window vs later" line then says whether the first pair's lower c64 uplift went away)
# Steps run on the lane's pair ($PAIR, default 0,1).
set -uo pipefail
cd "$(dirname "$0")/.."
W=/tmp/g2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1

say() { echo "[$(date -u +%T)] $*" | tee -a "$W/queue.log"; }

windows_rig() {  # the 7B rig of fixtures/rigs on $PAIR; $1: the design (windows: 2 x 6 of 12 s; campaign2: parallel)
  python3 - "$W" "${PAIR:-0,1}" "${1:-windows}" <<'EOF'
import sys, yaml
w, pair, design = sys.argv[1], [int(g) for g in sys.argv[2].split(",")], sys.argv[3]
rig = yaml.safe_load(open(f"{w}/proj/fixtures/rigs/nvlink-pair-vllm-7b.yaml"))
rig["rig"] = "window-noise" if design == "windows" else "nvlink-pair-vllm-7b-parallel"
rig["pairs"] = [pair]
if design == "windows":
    rig["campaign"].update({"residency": "resident", "starts": 2, "windows": 6, "window_s": 12, "max_starts": None,
                            "max_time_s": None})
else:  # both arms' servers start at once; the KV cache is set by the rig, so every start is parallel
    import os  # the design: CAMPAIGN_STARTS x CAMPAIGN_WINDOWS window pairs of CAMPAIGN_WINDOW_S (default 3 x 3 x 10 s)
    rig["campaign"].update({"residency": "resident", "start_mode": "parallel",
                            "starts": int(os.environ.get("CAMPAIGN_STARTS", 3)),
                            "windows": int(os.environ.get("CAMPAIGN_WINDOWS", 3)),
                            "window_s": float(os.environ.get("CAMPAIGN_WINDOW_S", 10)),
                            "starts_at_once": int(os.environ.get("CAMPAIGN_AT_ONCE", 1)),
                            "start_ahead": os.environ.get("CAMPAIGN_AHEAD", "0") == "1",
                            "max_starts": None, "max_time_s": None})
    # 16 GiB for two servers; starts made at once share the pair among more (CAMPAIGN_KV_GIB each)
    rig["server"]["args"]["kv-cache-memory-bytes"] = int(float(os.environ.get("CAMPAIGN_KV_GIB", 16)) * 2**30)
    if os.environ.get("CAMPAIGN_SEQS"):  # max-num-seqs: CUDA graphs captured up to 2x it (vLLM's default: 512)
        rig["server"]["args"]["max-num-seqs"] = int(os.environ["CAMPAIGN_SEQS"])
    if os.environ.get("CAMPAIGN_FORK") == "1":  # engine core and workers forked: no second and third import of vLLM
        rig["server"].setdefault("env", {})["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
    if os.environ.get("CAMPAIGN_CPUS"):  # server.cpus: auto pins each server of a launch to whole cores of its own
        rig["server"]["cpus"] = os.environ["CAMPAIGN_CPUS"]
    if os.environ.get("CAMPAIGN_RANGE"):  # server.load.range_ratio: each request's lengths within L * (1 -+ r)
        rig["server"].setdefault("load", {})["range_ratio"] = float(os.environ["CAMPAIGN_RANGE"])
rig["server"].setdefault("env", {})["VLLM_CACHE_ROOT"] = f"{w}/vllm-cache"
yaml.safe_dump(rig, open(f"{w}/rig_{design}.yaml", "w"), sort_keys=False)
EOF
}

copy_proj() {  # the project for the detached queues (a call's working tree goes away with the call)
  mkdir -p $W/proj && tar --exclude='./.vw*' --exclude='./.rw*' --exclude='./.git' --exclude='./.whl' \
    --exclude='./.nccltests' -cf - . | tar -C $W/proj -xf -
  if [ -d .nccltests ]; then rm -rf $W/nccltests && cp -r .nccltests $W/nccltests; fi
}

site_add() {  # the project's wheel and what vLLM's set lacks (never vLLM's own pins: openai, pydantic, ...)
  for w in $W/whl/*.whl; do
    [ -f "$w" ] || continue
    n=$(basename "$w" | cut -d- -f1 | tr 'A-Z-' 'a-z_')
    if [ "$n" = pytest_p2p ] || ! ls /tmp/site | tr 'A-Z-' 'a-z_' | grep -q "^${n}-.*dist-info"; then
      python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$w" 2>&1 \
        | grep -v WARNING | tail -1
    fi
  done
  PYTHONPATH=/tmp/site python3 -c "import pytest_p2p, vllm; print('pytest_p2p and vllm', vllm.__version__, 'in /tmp/site')"
}

step() {
  local P=$W/proj
  case "$1" in
    topo) { lscpu; for c in /sys/devices/system/cpu/cpu[0-9]*; do
              echo "$(basename $c) l3 $(cat $c/cache/index3/shared_cpu_list 2>/dev/null) siblings $(cat $c/topology/thread_siblings_list 2>/dev/null)"
            done; nvidia-smi topo -m; } > $W/topo.txt 2>&1;;
    faults) (cd $P && OUT=$W/faults GPU_FAULTS_PAIR=${PAIR:-0,1} timeout 1500 python3 benchmarks/gpu_faults.py --vllm \
               --trials 3 ${FAULTS_ONLY:+--only $FAULTS_ONLY} > $W/faults.txt 2>&1);;
    repeat) local r=repeat_$(date +%s)  # a lane may repeat this step (REPEAT_MAX_S caps each)
            (cd $W && timeout 1200 python3 $P/benchmarks/probe_uplift_repeat.py --runs 20 --pair ${PAIR:-0,1} \
               --max-s ${REPEAT_MAX_S:-1000} --out $W/$r > $W/$r.txt 2>&1; cat $W/$r.txt >> $W/repeat.txt);;
    nccltests) (cd $P && timeout 900 python3 benchmarks/probe_vs_nccl_tests.py --nccl-tests-src $W/nccltests \
               --rounds 4 --out $W/pvn > $W/pvn.txt 2>&1);;
    noiseab)  # fixed against ranged lengths, interleaved on the 7B rig's two resident servers (window_noise_ab.py)
      [ -f /tmp/m7b/config.json ] || python3 -m pytest_p2p.serve.tinymodel /tmp/m7b --hidden 4096 --layers 32 \
        --heads 32 --kv-heads 8 > $W/model.log 2>&1
      CAMPAIGN_RANGE= windows_rig campaign2 && cp $W/rig_campaign2.yaml $W/rig_noiseab.yaml
      (cd $P && timeout 900 python3 benchmarks/window_noise_ab.py --rig $W/rig_noiseab.yaml --out $W/noiseab \
         --concurrency ${NOISEAB_C:-16} --windows ${NOISEAB_ROUNDS:-8} --window-s ${NOISEAB_WINDOW_S:-6} \
         --ratio ${CAMPAIGN_RANGE:-0.5} > $W/noiseab.txt 2>&1);;
    ray) (cd $P && MULTINODE_GPUS=${PAIR:-0,1} timeout 300 python3 benchmarks/multinode_gpu.py --out $W/multinode > $W/multinode.txt 2>&1);;
    rayvllm) (cd $P && MULTINODE_GPUS=${PAIR:-0,1} timeout 420 python3 benchmarks/multinode_vllm_gpu.py \
               --out $W/multinode_vllm > $W/multinode_vllm.txt 2>&1);;
    windows)
      [ -f /tmp/m7b/config.json ] || python3 -m pytest_p2p.serve.tinymodel /tmp/m7b --hidden 4096 --layers 32 \
        --heads 32 --kv-heads 8 > $W/model.log 2>&1
      windows_rig windows
      (cd $W && timeout 1800 python3 -m pytest -m p2p --pyargs pytest_p2p.checks.test_campaign --p2p-live \
         --p2p-rig $W/rig_windows.yaml --p2p-results $W/res_windows -rs -q -p no:cacheprovider > $W/windows.txt 2>&1)
      python3 $P/benchmarks/window_noise.py $W/res_windows/*/ >> $W/windows.txt 2>&1;;
    waitvllm) for _ in $(seq 180); do python3 -c "import vllm" 2>/dev/null && break; sleep 5; done;;
    campaign2)
      [ -f /tmp/m7b/config.json ] || python3 -m pytest_p2p.serve.tinymodel /tmp/m7b --hidden 4096 --layers 32 \
        --heads 32 --kv-heads 8 > $W/model.log 2>&1
      if [ -n "${CAMPAIGN_RIG:-}" ]; then cp "$P/$CAMPAIGN_RIG" $W/rig_campaign2.yaml; else windows_rig campaign2; fi
      if [ -n "${CAMPAIGN_WARMUP_ORDER:-}" ]; then  # campaign.warmup_order (a new rig: its own chain)
        python3 -c "import sys, yaml; p = sys.argv[1]; r = yaml.safe_load(open(p)); r['campaign']['warmup_order'] = sys.argv[2]; yaml.safe_dump(r, open(p, 'w'), sort_keys=False)" \
          $W/rig_campaign2.yaml "$CAMPAIGN_WARMUP_ORDER"
      fi
      if [ -n "${CAMPAIGN_WINDOW_AT:-}" ]; then  # campaign.window_s per point, e.g. "16:5,64:8.5" (a new design)
        python3 -c "import sys, yaml; p = sys.argv[1]; r = yaml.safe_load(open(p)); c = r['campaign']; t = {'default': c.get('window_s', 15)}; t.update((int(k), float(v)) for k, v in (x.split(':') for x in sys.argv[2].split(','))); c['window_s'] = t; yaml.safe_dump(r, open(p, 'w'), sort_keys=False)" \
          $W/rig_campaign2.yaml "$CAMPAIGN_WINDOW_AT"
      fi
      if [ -n "${CAMPAIGN_WINDOWS_AT:-}" ]; then  # campaign.windows per point, e.g. "64:3" (a new design)
        python3 -c "import sys, yaml; p = sys.argv[1]; r = yaml.safe_load(open(p)); c = r['campaign']; t = {'default': c.get('windows', 4)}; t.update((int(k), int(v)) for k, v in (x.split(':') for x in sys.argv[2].split(','))); c['windows'] = t; yaml.safe_dump(r, open(p, 'w'), sort_keys=False)" \
          $W/rig_campaign2.yaml "$CAMPAIGN_WINDOWS_AT"
      fi
      if [ -n "${CAMPAIGN_PRECISION:-}" ]; then  # campaign.precision, e.g. "2%" (starts added up to max_starts)
        python3 -c "import sys, yaml; p = sys.argv[1]; r = yaml.safe_load(open(p)); r['campaign']['precision'] = sys.argv[2]; yaml.safe_dump(r, open(p, 'w'), sort_keys=False)" \
          $W/rig_campaign2.yaml "$CAMPAIGN_PRECISION"
      fi
      # an earlier night's store (carried): tonight is judged against it and borrows its start spread
      [ -n "${HISTORY_DB:-}" ] && [ ! -f $W/history.db ] && cp "$P/$HISTORY_DB" $W/history.db
      # a second campaign2 in one queue is the next night on the same pair (same history.db: the start prior)
      local log=$W/campaign2.txt; [ -f $log ] && log=$W/campaign2_night$(( $(ls $W/campaign2*.txt | wc -l) + 1 )).txt
      # with a carried rig, CAMPAIGN_STARTS is --p2p-reps: fewer starts of the same design, the file unchanged
      local starts=(); [ -n "${CAMPAIGN_RIG:-}" ] && [ -n "${CAMPAIGN_STARTS:-}" ] && starts=(--p2p-reps "$CAMPAIGN_STARTS")
      # CAMPAIGN_COMPARE=1: the nightly recipe (docs/nightly-ci.md), tonight judged against the store's accepted
      # baseline before it is saved: the baseline checks and --p2p-compare
      local compare=(); [ "${CAMPAIGN_COMPARE:-0}" = 1 ] && compare=(pytest_p2p.checks.test_baseline --p2p-compare)
      (cd $W && timeout 1500 python3 -m pytest -m p2p --pyargs pytest_p2p.checks.test_campaign "${compare[@]}" \
         --p2p-live --p2p-rig $W/rig_campaign2.yaml --p2p-results $W/res_campaign2 --p2p-db $W/history.db \
         --p2p-save-baseline "${starts[@]}" -rs -q -p no:cacheprovider > $log 2>&1)
      python3 $P/benchmarks/window_noise.py $W/res_campaign2/*/ >> $log 2>&1
      python3 $P/benchmarks/campaign_compact.py $W/res_campaign2/*/ --out $W/campaign2_compact.json >> $log 2>&1
      python3 $P/benchmarks/campaign_time.py $W/res_campaign2/*/ --json $W/campaign2_time.json >> $log 2>&1;;
    raypytest) (cd $P && MULTINODE_GPUS=${PAIR:-0,1} timeout 450 python3 benchmarks/multinode_pytest_gpu.py \
               --out $W/multinode_pytest > $W/multinode_pytest.txt 2>&1);;
    cache) (cd $P && timeout 420 python3 benchmarks/compile_cache_gpu.py --starts 3 --pair ${PAIR:-0,1} --out $W/cache \
               > $W/cache.txt 2>&1);;
    cache2) (cd $P && for n in 1 2; do timeout 300 python3 benchmarks/compile_cache_gpu.py --starts 1 \
               --pair ${PAIR:-0,1} --cache-root $W/cache2_vllm --model-dir $W/cache2_tiny --out $W/cache2_p$n \
               $([ $n = 2 ] && echo --expect-cached); done > $W/cache2.txt 2>&1);;
    selfcheck) (cd $P && OUT=$W/selfcheck JOBS=${JOBS:-12} SUITE=${SUITE:-1} timeout 1200 bash .ci/gpu-selfcheck > $W/selfcheck.txt 2>&1);;
    heartbeat) (cd $P && timeout 300 python3 benchmarks/heartbeat_gpu.py > $W/heartbeat.txt 2>&1);;
    startfork) (cd $P && timeout 900 python3 benchmarks/start_phases_gpu.py --rounds ${STARTFORK_ROUNDS:-2} \
               --variants ${STARTFORK_VARIANTS:-default,fork,seqs64} ${STARTFORK_MODEL:+--model-dir $STARTFORK_MODEL} \
               --pair ${PAIR:-0,1} --out $W/startfork > $W/startfork.txt 2>&1);;
    *) say "unknown step $1";;
  esac
}

case "${1:-status}" in
  stage)
    mkdir -p /tmp/vwstage $W && cp .vw"$2"/* /tmp/vwstage/
    if [ -d .whl ] && [ ! -f $W/whl.done ]; then  # kept: vLLM's install.sh below replaces /tmp/site
      mkdir -p $W/whl && cp .whl/*.whl $W/whl/ && touch $W/whl.done
    fi
    if [ "$2" = 8 ]; then bash .vw8/install.sh 2>&1 | tail -1; site_add
      # a stage lost on the way (a machine given back between calls takes /tmp/vwstage with it) fails here, not
      # in a queue that then runs for minutes without vLLM (twentieth session: ~400 s of device time)
      python3 -c "import vllm" 2> /dev/null || { echo "stage 8: vLLM does not import: $(ls /tmp/vwstage 2> /dev/null \
        | wc -l) files staged; stage 1..8 again, back to back"; exit 1; }
    fi
    if [ -d .rw1 ] || [ -d .rw2 ]; then mkdir -p /tmp/rwstage && cp .rw*/* /tmp/rwstage/ 2>/dev/null
      [ -f /tmp/rwstage/ray_wheels.sh ] && ls /tmp/rwstage/*.part-ab > /dev/null 2>&1 && bash /tmp/rwstage/ray_wheels.sh install 2>&1 | tail -1
    fi;;
  launch)
    shift
    if [ "$*" != topo ] && [ "${NO_VLLM:-0}" != 1 ] && ! python3 -c "import vllm" 2> /dev/null; then
      echo "launch: vLLM does not import here (stage 1..8 first; NO_VLLM=1 launches anyway)"; exit 1
    fi
    copy_proj
    echo "$*" > $W/steps
    setsid nohup bash $W/proj/benchmarks/gpu_session_x2.sh _queue > $W/queue.out 2>&1 < /dev/null & disown
    echo "queue launched: $*";;
  lane)  # lane NAME A,B STEP...: a queue of its own on one pair (the copy of the project is shared)
    name=$2 pair=$3; shift 3
    [ -f $W/proj/pyproject.toml ] || copy_proj  # the lanes share one copy
    echo "$*" > $W/steps_$name
    PAIR=$pair setsid nohup bash $W/proj/benchmarks/gpu_session_x2.sh _queue $name > $W/queue_$name.out 2>&1 \
      < /dev/null & disown
    echo "lane $name on GPUs $pair launched: $*";;
  _queue)
    for s in $(cat $W/steps${2:+_$2}); do say "${2:+[$2] }step $s starts"; step "$s"; say "${2:+[$2] }step $s done"; done
    say "${2:+[$2] }queue done";;
  stop)  # the queues and what they started (each queue is a session of its own: setsid)
    # not "pkill -f gpu_session_x2.sh" in the call: it matches the call's own command line and kills it first
    # (twentieth session: stage 1 of a restaging killed that way, and the night's install failed)
    for pid in $(pgrep -f 'gpu_session_x2[.]sh _queue'); do kill -TERM -- "-$pid" 2> /dev/null; done
    sleep 2; pgrep -fa 'gpu_session_x2[.]sh _queue' || echo "no queue running";;
  wait)  # wait SECONDS: poll until the queue is done or SECONDS have passed, then status (and collect) once
    # one call that never leaves the machine idle: a machine idle ~30 s is given back with /tmp, and the ninth
    # session's night (2026-11-27) was lost at 9:41 while its poll's logs were read between two calls
    # a fresh machine has no queue (the last one was taken back with its /tmp: 2026-11-28, sixteenth session, two
    # polls of 280 s each spent on an empty machine): say so at once instead of polling nothing
    if [ ! -f $W/queue.log ]; then echo "no queue here: a fresh machine (the one that ran it was given back)"; exit 3; fi
    end=$((SECONDS + ${2:-280}))
    while [ $SECONDS -lt $end ] && ! grep -qs "queue done" $W/queue.log; do sleep 10; done
    bash "$0" status;;
  status)
    # which threads are busy, and whose (benchmarks/thread_cpu.py): a resident campaign's idle arm may spin
    [ -f $W/proj/benchmarks/thread_cpu.py ] && python3 $W/proj/benchmarks/thread_cpu.py >> $W/threads.log 2>&1
    tail -n 6 $W/queue.log 2>/dev/null
    for f in noiseab.txt faults.txt repeat.txt pvn.txt multinode.txt multinode_vllm.txt multinode_pytest.txt cache.txt cache2.txt windows.txt \
             campaign2.txt campaign2_night2.txt campaign2_night3.txt heartbeat.txt startfork.txt selfcheck.txt; do
      [ -f "$W/$f" ] && echo "-- $f: $(tail -c 300 $W/$f | tr '\r' '\n' | grep -v '^$' | tail -1)"
    done
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
    # every poll brings the results home: a machine released between calls takes /tmp with it (2026-11-26
    # night: a 7B campaign lost at its third start when the driver paused for more than 30 s)
    [ -n "${OUT:-}" ] && bash "$0" collect > /dev/null 2>&1 && echo "collected into \$OUT";;
  collect)
    mkdir -p "$OUT"
    # a campaign's rep files hold every request (101 MiB for a 3-start night, 2026-11-27: over the 16 MiB a
    # returned file may have), so every poll keeps their metrics and meta instead, in a compact of its own
    for d in res_windows res_campaign2; do ls -d $W/$d/*/ > /dev/null 2>&1 || continue
      python3 $W/proj/benchmarks/campaign_compact.py $W/$d/*/ --out $W/${d}_poll_compact.json > /dev/null 2>&1
    done
    tar -C $W -czf "$OUT/x2_logs.tgz" --exclude='proj' --exclude='nccltests' --exclude='vllm-cache' \
      --exclude='res_*/*/scenarios/*/run_*.json' --exclude='multinode_vllm/tiny-model' --exclude='multinode_pytest/tiny-model' \
      queue.log noiseab.txt noiseab rig_noiseab.yaml faults.txt faults multinode_pytest.txt multinode_pytest cache.txt cache cache2.txt cache2_p1 cache2_p2 \
      repeat.txt repeat_* pvn.txt multinode.txt multinode multinode_vllm.txt multinode_vllm windows.txt \
      rig_windows.yaml res_windows heartbeat.txt campaign2.txt campaign2_night*.txt rig_campaign2.yaml campaign2_compact.json \
      campaign2_time.json res_campaign2 res_windows_poll_compact.json res_campaign2_poll_compact.json history.db \
      selfcheck.txt selfcheck queue_*.out threads.log \
      startfork.txt startfork topo.txt 2>/dev/null
    ls -la "$OUT";;
esac
