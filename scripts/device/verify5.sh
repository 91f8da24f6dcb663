#!/usr/bin/env bash
# Issue 16's last targets on nvidia-h200, in two device calls of < 10 minutes each:
#   PART=first: the store and default-mode tests on CUDA, P2 (the real first call after the
#               first call's own cost was cut), where that call goes (profile_p2), P1.
#   PART=p7:    P7 on all four tutorial kernels (matmul, softmax, layer norm, attention forward), P1.
#   PART=probe: graph replays against eager launches per config (probe_eager.py), P2 again.
#   PART=final: test_first_call_write.py, P1 twice, P2 (one call of ~5 minutes).
#   PART=profile: profile_tutorial_first.py (layer norm and attention's first calls, ~30 s).
#   PART=final3: GPU graph tests, tail_anatomy.py, P7 (2 trials), P2, P1 (~7 minutes).
#   PART=final4: GPU graph tests, host_steps.py, P7 (3 trials), P2, P1 (~6 minutes).
#   PART=final5: the same with tail_anatomy.py, hot_call.py and the spare-time tests (~6 minutes);
#               since 2026-12-02 06:30 UTC P7 measures its warm oracle again after the trials and
#               P1 times its statements call by call too (~7 minutes).
#   PART=p1:    hot_call.py, P1 and P2 (~3 minutes).
#   PART=final6: the face a plain function (2026-12-02 15:00 UTC): GPU graph tests and the tune flow's,
#               hot_call.py (warm and cold), P7 (3 trials), P2, P1 (~7 minutes); since 2026-12-02 17:10
#               UTC P1 also times every call right after the same other code (a torch op); TAIL=1 adds
#               tail_anatomy.py (both ends of layer norm's first call).
#   PART=gaps:  pool_probe.py (graph pools across measurements), gap_anatomy.py (device idle time
#               charged to the host's steps).
#   PART=load:  probe_load.py (softmax 8192 x 8192, layer norm 8192 x 4096: samples back to back
#               against synchronised ones, with the SM clock and power; ~3 minutes).
#   PART=place: probe_place.py (layer norm and softmax configs timed the oracle's way in eight
#               placements of their tensors: private pools, the input moved, and pools shared by
#               all configs as the tuner's are; ~20 s). PLACE_CASES / LOAD_CASES name the kernels
#               of PART=place / PART=load (softmax, layer_norm, matmul: matmul 2048^3 configs 0-2).
#   PART=tplace: probe_tuner_place.py (matmul 128 x 4096 x 4096: the default's measured order and pick
#               in fresh processes, each with its memory placed elsewhere, beside the oracle; ~2 minutes).
#   PART=anatomy: layer norm 8192 x 4096's first call with two placements and with one: both ends
#               (tail_anatomy.py), the host's steps (host_steps.py), the device's idle stretches
#               (gap_anatomy.py), P7 on layer norm alone under each setting (~7 minutes).
#   PART=final7: after the hit path's callers (2026-12-03 17:30 UTC): the GPU tests of graph mode, the
#               tune flow and the callers, P7 (stock, default, contextual; 3 trials), P2, P1 (~7 minutes).
#   PART=ledger: where the device idles in a first call, phase by phase (idle_ledger.py), host_steps.py
#               with finer steps, and the GPU tests of graph mode, the guard and the callers (~4 minutes).
#   PART=abk:   the warm-up loop's k from the fastest probe completed so far, against the tree before it
#               (.device/old), layer norm in two config orders (idle_ledger.py), GPU graph tests (~5 minutes).
#   PART=host:  layer norm's first calls in several processes, free and bound to each NUMA node, with each
#               process's CPU and host speed (is a slow host a process's?) (~4 minutes).
#   PART=p1ab:  P1 of the face over a plain dict (b52656c) taking turns with the tree before it (~3 minutes).
#   PART=abd:   this tree against another (.device/old/triton_dist, e.g. git archive main triton_dist):
#               the GPU tests of graph mode and the callers, host_steps.py on STEPS (optional), then
#               idle_ledger.py (LEDGER_KERNELS, default matmul and layer norm) taking turns, with and
#               without every host call slowed (DELAYS, HOST_DELAY_US), until BUDGET_S has passed; the
#               ledgers come back in ledgers.tgz (session 28: the detections read at the next turn, ~9 min).
#   OUT=/some/dir PART=first bash scripts/device/verify5.sh
# At most 8 files land in $OUT (what the device tool brings back; fit_out packs a PART that wrote more).
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  nproc; uptime; df -T /tmp | tail -1
} >"$OUT/env.txt" 2>&1
# P7 (stock, default, contextual; 3 trials), P2 on the examples, P1: the end of PART=final4 and final5
p7_p2_p1() {
  timeout "${T_P7:-380}" python3 benchmarks/p7_tutorials.py --trials "${P7_TRIALS:-3}" --rep-ms 3 --out "$OUT" \
    --methods stock default contextual >"$OUT/p7.log" 2>&1
  tail -14 "$OUT/p7.log"
  timeout "${T_P2:-100}" python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-2}" --out "$OUT" >"$OUT/p2.log" 2>&1
  grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
  grep -E "warm oracle again" "$OUT/p7.log" | cut -c3-100
  timeout "${T_P1:-300}" python3 benchmarks/p1_hot_path.py --rounds 300 --number 20000 --out "${P1_OUT:-$OUT/p1}" >"$OUT/p1.log" 2>&1
  grep -E "over the host|overhead" "$OUT/p1.log"
}
case "${PART:-first}" in
  first)
    timeout 120 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/unit/test_default_mode.py \
      tests/unit/test_tune_flow.py tests/unit/test_disk_cache.py tests/unit/test_first_call_write.py tests/unit/test_settings.py tests/gpu/test_cuda_graphs.py \
      >"$OUT/pytest.txt" 2>&1
    tail -3 "$OUT/pytest.txt"
    timeout 200 python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-3}" --out "$OUT" >"$OUT/p2.log" 2>&1
    grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
    timeout 40 python3 scripts/device/profile_p2.py >"$OUT/profile_p2.log" 2>&1
    grep -E "first call|measured" "$OUT/profile_p2.log"
    timeout 120 python3 benchmarks/p1_hot_path.py --rounds 100 --number 20000 --out "$OUT" >"$OUT/p1.log" 2>&1
    grep -E "over the host|overhead" "$OUT/p1.log"
    ;;
  p7)
    timeout "${T_P7:-430}" python3 benchmarks/p7_tutorials.py --trials "${P7_TRIALS:-3}" --rep-ms 3 --out "$OUT" \
      ${P7_ARGS:-} >"$OUT/p7.log" 2>&1
    tail -12 "$OUT/p7.log"
    if [ -z "${SKIP_P1:-}" ]; then
      timeout 110 python3 benchmarks/p1_hot_path.py --rounds 100 --number 20000 --out "$OUT" >"$OUT/p1.log" 2>&1
      grep -E "over the host|overhead" "$OUT/p1.log"
    fi
    ;;
  probe)
    timeout 150 python3 scripts/device/probe_eager.py >"$OUT/probe_eager.log" 2>&1
    tail -60 "$OUT/probe_eager.log"
    timeout 200 python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-3}" --out "$OUT" >"$OUT/p2.log" 2>&1
    grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
    ;;
  final)  # the background fsync's tests on CUDA, P1 twice (rounds of 500 calls), P2 once
    timeout 60 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/unit/test_first_call_write.py \
      >"$OUT/pytest.txt" 2>&1
    tail -2 "$OUT/pytest.txt"
    for run in 1 2; do
      timeout 60 python3 benchmarks/p1_hot_path.py --rounds 300 --number 20000 --out "$OUT/p1-$run" >"$OUT/p1-$run.log" 2>&1
      grep -E "over the host|overhead" "$OUT/p1-$run.log"
    done
    timeout "${T_P2:-170}" python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-3}" --out "$OUT" >"$OUT/p2.log" 2>&1
    grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
    ;;
  profile)  # where a tutorial kernel's first call goes (the P2 gap on kernels of 30-60 us)
    timeout 150 python3 scripts/device/profile_tutorial_first.py >"$OUT/prof.log" 2>&1
    grep -E "^\S|trial|profiled|phases|allocator|device:|gaps|idle|measured [0-9]" "$OUT/prof.log" | head -80
    ;;
  final2)  # after the recompose schedule: P7 (stock, default, contextual; 2 trials), P2 on the examples, P1
    timeout "${T_P7:-330}" python3 benchmarks/p7_tutorials.py --trials "${P7_TRIALS:-2}" --rep-ms 3 --out "$OUT" \
      --methods stock default contextual >"$OUT/p7.log" 2>&1
    tail -14 "$OUT/p7.log"
    grep -c "first call / ideal" "$OUT/p7.log"
    timeout "${T_P2:-130}" python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-2}" --out "$OUT" >"$OUT/p2.log" 2>&1
    grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
    timeout 60 python3 benchmarks/p1_hot_path.py --rounds 300 --number 20000 --out "$OUT/p1" >"$OUT/p1.log" 2>&1
    grep -E "over the host|overhead" "$OUT/p1.log"
    ;;
  final3)  # after the reports during the reads and the kept source hash: GPU graph tests, the first call's
           # two ends (tail_anatomy), P7 (stock, default, contextual; 2 trials), P2 on the examples, P1
    timeout 120 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py >"$OUT/pytest.txt" 2>&1
    tail -3 "$OUT/pytest.txt"
    timeout 60 python3 scripts/device/tail_anatomy.py layer_norm >"$OUT/tail.log" 2>&1
    grep -E "wall|decide|_write|host$|results|report" "$OUT/tail.log" | head -24
    timeout "${T_P7:-300}" python3 benchmarks/p7_tutorials.py --trials "${P7_TRIALS:-2}" --rep-ms 3 --out "$OUT" \
      --methods stock default contextual >"$OUT/p7.log" 2>&1
    tail -14 "$OUT/p7.log"
    timeout "${T_P2:-120}" python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-2}" --out "$OUT" >"$OUT/p2.log" 2>&1
    grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
    timeout 60 python3 benchmarks/p1_hot_path.py --rounds 300 --number 20000 --out "$OUT/p1" >"$OUT/p1.log" 2>&1
    grep -E "over the host|overhead" "$OUT/p1.log"
    ;;
  final4)  # after the first runs were pipelined with the captures: GPU graph tests, the first call's
           # two ends (tail_anatomy), P7 (stock, default, contextual; 3 trials), P2 on the examples, P1
    timeout 150 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py >"$OUT/pytest.txt" 2>&1
    tail -3 "$OUT/pytest.txt"
    timeout 60 python3 scripts/device/host_steps.py layer_norm >"$OUT/steps.log" 2>&1
    head -12 "$OUT/steps.log"
    p7_p2_p1
    ;;
  final5)  # after the spare-time work (the log, the entry's head and place while the host waits for the
           # device): GPU graph tests, both ends of the first call (tail_anatomy), P7 (3 trials), P2, P1
    timeout 150 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py tests/unit/test_spare_time.py >"$OUT/pytest.txt" 2>&1
    tail -3 "$OUT/pytest.txt"
    { timeout 60 python3 scripts/device/tail_anatomy.py layer_norm; timeout 60 python3 scripts/device/host_steps.py layer_norm
      python3 scripts/device/hot_call.py; } >"$OUT/steps.log" 2>&1
    grep -E "wall median|hot_call|python|over host" "$OUT/steps.log" | head -12
    p7_p2_p1
    ;;
  final6)  # after the tuner's face became a plain function: GPU tests, hot_call.py, P7 (3 trials), P2, P1
           # (at most 8 files come back: the tests' output goes into steps.log, P1's json into $OUT)
    timeout 150 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py tests/unit/test_spare_time.py \
      tests/unit/test_tune_flow.py tests/unit/test_cuda_warm_up.py >"$OUT/steps.log" 2>&1
    tail -3 "$OUT/steps.log"
    { timeout 90 python3 scripts/device/hot_call.py --cold-calls "${COLD_CALLS:-2000}"
      [ -n "${TAIL:-}" ] && timeout 60 python3 scripts/device/tail_anatomy.py layer_norm; } >>"$OUT/steps.log" 2>&1
    grep -A40 "^python 3" "$OUT/steps.log"
    P1_OUT="$OUT" p7_p2_p1
    ;;
  final7)  # after the hit path's callers: GPU tests, P7 (3 trials), P2, P1
    timeout 150 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py tests/unit/test_graph_placements.py \
      tests/unit/test_tune_flow.py tests/unit/test_hit_callers.py tests/unit/test_cuda_warm_up.py >"$OUT/steps.log" 2>&1
    tail -3 "$OUT/steps.log"
    P1_OUT="$OUT" p7_p2_p1
    ;;
  p1)  # after the tuner became a functools.partial of its hot-path closure: hot_call.py, P1, P2
    python3 scripts/device/hot_call.py >"$OUT/steps.log" 2>&1
    cat "$OUT/steps.log"
    timeout "${T_P1:-300}" python3 benchmarks/p1_hot_path.py --rounds 300 --number 20000 --out "$OUT/p1" >"$OUT/p1.log" 2>&1
    grep -E "over the host|overhead" "$OUT/p1.log"
    timeout "${T_P2:-100}" python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-2}" --out "$OUT" >"$OUT/p2.log" 2>&1
    grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
    ;;
  recompose)  # the recompose schedule and the kept graph pool on CUDA: GPU tests, pools, P2 profile, gaps
    timeout 120 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py >"$OUT/pytest.txt" 2>&1
    tail -15 "$OUT/pytest.txt"
    timeout 150 python3 scripts/device/profile_tutorial_first.py >"$OUT/prof.log" 2>&1
    grep -E "^\S|trial|phases|allocator|measured [0-9]" "$OUT/prof.log" | head -40
    timeout 100 python3 scripts/device/gap_anatomy.py layer_norm >"$OUT/gaps.log" 2>&1
    head -22 "$OUT/gaps.log"
    ;;
  gaps)  # pool strategies (pool_probe.py), then what the host does while the device idles (gap_anatomy.py)
    timeout 60 python3 scripts/device/pool_probe.py >"$OUT/pool.log" 2>&1
    cat "$OUT/pool.log"
    timeout 150 python3 scripts/device/gap_anatomy.py ${GAP_CASES:-layer_norm attention} >"$OUT/gaps.log" 2>&1
    cat "$OUT/gaps.log" | head -120
    ;;
  load)  # the default's per-config offset from the oracle under back-to-back vs synchronised samples
    timeout 240 python3 scripts/device/probe_load.py ${LOAD_CASES:-softmax layer_norm} >"$OUT/load.log" 2>&1
    cat "$OUT/load.log"
    ;;
  place)  # how much where the tensors lie moves each config's time (the oracle's graphs, new pools)
    timeout 120 python3 scripts/device/probe_place.py ${PLACE_CASES:-} >"$OUT/place.log" 2>&1
    cat "$OUT/place.log"
    ;;
  tplace)  # does the default's order on matmul 128 x 4096 x 4096 follow its process's placement? (~2 minutes)
    timeout 200 python3 scripts/device/probe_tuner_place.py --procs "${TPLACE_PROCS:-6}" >"$OUT/tplace.log" 2>&1
    cat "$OUT/tplace.log"
    ;;
  anatomy)  # where layer norm's first call goes beyond its runs, with two placements and with one
    { for pl in 2 1; do echo "== TRITON_DIST_GRAPH_PLACEMENTS=$pl"
        TRITON_DIST_GRAPH_PLACEMENTS=$pl timeout 60 python3 scripts/device/tail_anatomy.py layer_norm
        TRITON_DIST_GRAPH_PLACEMENTS=$pl timeout 60 python3 scripts/device/host_steps.py layer_norm; done
    } >"$OUT/steps.log" 2>&1
    grep -E "^==|wall|ideal" "$OUT/steps.log" | head -20
    timeout 120 python3 scripts/device/gap_anatomy.py layer_norm >"$OUT/gaps.log" 2>&1
    head -40 "$OUT/gaps.log"
    for pl in 2 1; do
      TRITON_DIST_GRAPH_PLACEMENTS=$pl timeout 110 python3 benchmarks/p7_tutorials.py --kernels layer_norm --trials 3 \
        --rep-ms 3 --methods default --out "/tmp/p7-$pl" >"$OUT/p7-$pl.log" 2>&1
      echo "== P7 layer norm, placements $pl"; grep -E "trial|kernel" "$OUT/p7-$pl.log" | cut -c1-220
    done
    ;;
  ledger)  # where the device idles in a first call, phase by phase (idle_ledger.py), the host's steps
           # (host_steps.py, finer since 2026-12-03 22:00 UTC), and the GPU tests of graph mode, the guard
           # and the callers (~4 minutes)
    { timeout 90 python3 scripts/device/idle_ledger.py layer_norm softmax
      timeout 60 python3 scripts/device/host_steps.py layer_norm; } >"$OUT/steps.log" 2>&1
    cat "$OUT/steps.log" | head -80
    timeout 200 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py tests/unit/test_graph_placements.py \
      tests/unit/test_tune_flow.py tests/unit/test_hit_callers.py tests/unit/test_cuda_warm_up.py \
      tests/unit/test_users_code.py tests/unit/test_restore_kernel.py tests/unit/test_device_measure.py \
      tests/unit/test_cuda_compose.py >"$OUT/pytest.txt" 2>&1
    tail -5 "$OUT/pytest.txt"
    ;;
  abk)  # the warm-up loop's k from the fastest probe completed so far (2026-12-04): the previous tree
        # (.device/old/triton_dist, from git archive HEAD~) alternating with this one, layer norm's first
        # call in the tutorial's order and with its slowest config first (idle_ledger.py), then the GPU
        # tests of graph mode (~5 minutes)
    for rep in $(seq "${REPS:-2}"); do
      for tree in old new; do
        pp=$PYTHONPATH
        [ "$tree" = old ] && pp=$repo/.device/old:$PYTHONPATH
        PYTHONPATH=$pp TRIALS=${TRIALS:-5} ORDERS=${ORDERS:-given,slow-first} timeout 150 python3 scripts/device/idle_ledger.py \
          ${LEDGER_KERNELS:-layer_norm} >"$OUT/ledger_${tree}_$rep.log" 2>&1
        echo "== $tree $rep"; cat "$OUT/ledger_${tree}_$rep.log" | grep -v "^  phase"
      done
    done
    timeout 150 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py tests/unit/test_graph_placements.py \
      tests/unit/test_tune_flow.py tests/unit/test_cuda_compose.py >"$OUT/pytest.txt" 2>&1
    tail -5 "$OUT/pytest.txt"
    ;;
  abd)
    timeout 150 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/gpu/test_cuda_graphs.py \
      tests/unit/test_graph_recompose.py tests/unit/test_graph_measure.py tests/unit/test_graph_placements.py \
      tests/unit/test_tune_flow.py tests/unit/test_cuda_compose.py tests/unit/test_hit_callers.py \
      >"$OUT/pytest.txt" 2>&1
    tail -5 "$OUT/pytest.txt"
    [ -n "${STEPS:-}" ] && timeout 150 python3 scripts/device/host_steps.py $STEPS 2>&1 | grep -v "^ *[0-9.]* µs in *0 calls"
    end=$((SECONDS + ${BUDGET_S:-400}))
    rep=0
    while [ "$SECONDS" -lt "$end" ]; do
      rep=$((rep + 1))
      for delay in ${DELAYS:-200 0}; do
        [ "$SECONDS" -lt "$end" ] || break
        for tree in old new; do
          pp=$PYTHONPATH
          [ "$tree" = old ] && pp=$repo/.device/old:$PYTHONPATH
          HOST_DELAY_US=$delay PYTHONPATH=$pp TRIALS=${TRIALS:-4} ORDERS=given timeout 150 python3 \
            scripts/device/idle_ledger.py ${LEDGER_KERNELS:-matmul layer_norm} >"/tmp/ledger_${tree}_${delay}_$rep.log" 2>&1
          echo "== $tree delay $delay rep $rep"
          grep -E "first call|warm-up loop|a 100k-step" "/tmp/ledger_${tree}_${delay}_$rep.log" | cut -c1-170
        done
      done
    done
    tar -czf "$OUT/ledgers.tgz" -C /tmp $(cd /tmp && ls ledger_*.log)
    ;;
  pre)  # layer norm's first call alone and after the stock tuner's tuning of the same shape, as in
        # P7's trials (2026-12-04: 1.040-1.047 over its own measured ideal in P7, 1.025 alone in the ledger)
    for rep in 1 2; do
      for pre in "" stock stock,contextual; do
        PRE=$pre TRIALS=${TRIALS:-5} timeout 150 python3 scripts/device/idle_ledger.py layer_norm \
          >"$OUT/ledger_${pre:-alone}_$rep.log" 2>&1
        echo "== ${pre:-alone} $rep"; grep -v "^  phase" "$OUT/ledger_${pre:-alone}_$rep.log"
      done
    done
    ;;
  steps)  # host time per step of layer norm's first call, the previous tree (.device/old) alternating with
          # this one (host_steps.py): host work that a slow host's warm-up loop waits on, without the waits
    for rep in $(seq "${REPS:-2}"); do
      for tree in old new; do
        pp=$PYTHONPATH
        [ "$tree" = old ] && pp=$repo/.device/old:$PYTHONPATH
        PYTHONPATH=$pp timeout 120 python3 scripts/device/host_steps.py ${LEDGER_KERNELS:-layer_norm} \
          >"$OUT/steps_${tree}_$rep.log" 2>&1
        echo "== $tree $rep"; head -40 "$OUT/steps_${tree}_$rep.log"
      done
    done
    ;;
  host)  # is a slow host a process's and not a lease's? (2026-12-04) the CPUs' topology, layer norm's first
         # calls (idle_ledger.py, with the CPU, NUMA node and a Python loop's time of its process) in
         # RUNS processes as they start, then in processes bound to each NUMA node's CPUs (~4 minutes)
    { lscpu; for n in /sys/devices/system/node/node*; do echo "$n: $(cat $n/cpulist)"; done
      cat /sys/fs/cgroup/cpu.max 2>/dev/null; } >"$OUT/topology.txt" 2>&1
    grep -E "^(Model name|Socket|Core|Thread|NUMA|CPU\(s\))" "$OUT/topology.txt"; grep node "$OUT/topology.txt"
    ledger() {  # $1: label, the rest: a command prefix
      local label=$1; shift
      TRIALS=${TRIALS:-3} timeout 100 "$@" python3 scripts/device/idle_ledger.py layer_norm >"$OUT/ledger_$label.log" 2>&1
      echo "== $label"; grep -E "first call|host: cpu|rounds queued" "$OUT/ledger_$label.log" | cut -c1-150
    }
    for i in $(seq "${RUNS:-4}"); do ledger "free_$i"; done
    for n in /sys/devices/system/node/node*; do
      for i in 1 2; do ledger "$(basename $n)_$i" taskset -c "$(cat $n/cpulist)"; done
    done
    ;;
  p1ab)  # the face's callers in a plain dict (b52656c) against the tree before it: P1 taking turns, the
         # tree before in .device/old (git archive 2230978~2 triton_dist | tar -x -C .device/old;
         # carry .device/old), REPS alternations of --rounds ${P1_ROUNDS:-80} (~45 s each); compare
         # "autotuner" with "lookup_caller" after other code, and the headline over the host
    for rep in $(seq "${REPS:-2}"); do
      for tree in old new; do
        pp=$PYTHONPATH
        [ "$tree" = old ] && pp=$repo/.device/old:$PYTHONPATH
        PYTHONPATH=$pp timeout 120 python3 benchmarks/p1_hot_path.py --rounds "${P1_ROUNDS:-80}" --number 20000 \
          --out "$OUT/p1_${tree}_$rep" >"$OUT/p1_${tree}_$rep.log" 2>&1
        echo "== $tree $rep"; grep -E "over the host function" "$OUT/p1_${tree}_$rep.log"
        grep -A14 "typical call (median over rounds), after other code" "$OUT/p1_${tree}_$rep.log" \
          | grep -E "^\| (host|autotuner|lookup_caller) \|"
      done
    done
    ;;
  *) echo "PART must be one of: first p7 probe final profile final2 final3 final4 final5 final6 final7 p1 recompose gaps load place tplace anatomy ledger abk abd pre steps host p1ab" >&2; exit 2 ;;
esac
fit_out "verify5-${PART:-first}"  # PART=final3/4/5, host, p1ab write more than 8 files
