#!/bin/bash
# Developers only, on the device machine (`run` with carry [".whl"]; .whl/ from tools/device-wheels.sh): installs the
# carried wheels into /opt/site, then runs the named suites, PAR (2) at a time, none started with less than MIN (150)
# seconds left of BUDGET, and leaves $OUT/batch.log and $OUT/logs.tgz. Suites: g01..g07 (tests/workflows/test_grading.py -k the
# phase, sandboxed, compute-sanitizer on), v01..v06 (tests/judged/test_verdicts.py -k the phase: every fixture through the
# judge and the sandboxed runner, compute-sanitizer on, no nbgrader), ref (every source notebook's kernel tests,
# hidden cases included, through `python -m tritoncourse check`: judge and runner unsandboxed), dist (tests/workflows/test_distributed.py -k gpu), hog (the hostile memory hog, both
# graders), nb (the source notebooks executed top to bottom, NB_PAR (3) at once, PHASES (all) of them: their results in
# $OUT/gpu-results.json, the executed notebooks in the logs), hx (tests/workflows/test_sandbox_hostile.py with HOSTILE's hostile learners, default issue 42's four), cg (the sandbox's own tests and the memfd/tmpfs hogs under `course grade`: its cgroup on this machine), ln (phase 6 LayerNorm re-recorded, on an H200 only),
# soak (tests/workflows/test_soak.py on Triton's interpreter: SOAK (250) phase-1 notebooks from SOAK_OFFSET (0), half by SOAK_SHARDS
# (nproc/2) plain nbgrader runs, half by grade --jobs SOAK_GRADE_JOBS (default SOAK_SHARDS), all at once, each run bounded by the
# time left; leaves $OUT/soak-summary.json; 500 notebooks are three calls of SOAK=170 SOAK_SHARDS=6 SOAK_GRADE_JOBS=8 at
# SOAK_OFFSET=0, 170, 340: about 310 s each on an H200 machine's 16 cores, 2026-11-26). FIXTURES overrides the fixtures graded, SHARDS (3) the
# course copies a phase is split over; TRITONCOURSE_GRADING_STANDARD=0 leaves out the six standard learners.
# g07 also runs tests/workflows/test_hostile_phases.py (phase 7's hostile learners, graded in g07's own run: FIXTURES must
# name `hostile` too, or be unset: the default list names it and phase 7's stray store, wrong_dq_store_unmasked); ut: tests/units -k UNITS_K (attention_backward) on the GPU.
# v07a..v07h: phase 7's fixtures through test_verdicts in V07_SPLIT (4) parts, run side by side (about 65 s a fixture
# under compute-sanitizer on an H200: one suite cannot hold them all); py: the command in
# PY_CMD (a scratch measurement), its output in logs/py.log.
# usage: bash tools/device-queue.sh BUDGET suite...   e.g. PAR=3 bash tools/device-queue.sh 560 g04 g05 g06 dist
set -u
T0=$(date +%s); BUDGET=$1; shift
L=/tmp/logs; mkdir -p $L
el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/batch.log; }
if [ ! -f /opt/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /opt/site .whl/*.whl \
      > $L/pip.log 2>&1 && touch /opt/site/.done || { el "pip failed"; tail -20 $L/pip.log; }
fi
command -v bwrap >/dev/null || dpkg -x .whl/bubblewrap_*.deb /
el "bwrap: $(bwrap --version)"
export PYTHONPATH=/opt/site:$PWD PATH=/opt/site/bin:$PATH JUPYTER_PATH=/opt/site/share/jupyter PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a $L/batch.log
python3 -c "import torch, triton, nbgrader, numpy, distributed; print('torch', torch.__version__, 'triton', triton.__version__, 'nbgrader', nbgrader.__version__, 'numpy', numpy.__version__, 'dask', distributed.__version__, 'python', __import__('sys').version.split()[0])" 2>&1 | tee -a $L/batch.log
export TRITONCOURSE_GRADING_FLAGS="--IsolatedKernelTests.timeout_factor=1.0 --ResilientExecute.timeout=90 --IsolatedKernelTests.workers=2"
export TRITONCOURSE_GRADING_SHARDS=${SHARDS:-3}
export TRITONCOURSE_GRADING_FIXTURES=${FIXTURES:-wrong_unmasked_load_where,wrong_online_not_rescaled,wrong_k_tail_unmasked,wrong_fp16_accumulator,wrong_kernel_unmasked_loads,wrong_reads_fake_timer,wrong_programs_per_sm_true_division,wrong_shared_memory_over_227kb,wrong_unmasked_key_load,wrong_dq_store_unmasked,hostile}
declare -A PH=([g01]=01_vector_add [g02]=02_softmax [g03]=03_matmul_relu [g04]=04_benchmarking [g05]=05_autotuning [g06]=06_fused_attention [g07]=07_attention_backward)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
start() {
  local s=$1 t; t=$(left); [ $t -lt ${MIN:-150} ] && { el "no time for $s"; return; }
  el "start $s with $t s"
  case $s in
    g0*) timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider tests/workflows/test_grading.py \
           $([ $s = g07 ] && echo tests/workflows/test_hostile_phases.py) -k ${PH[$s]} > $L/$s.log 2>&1 ;;
    ut) timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider tests/units -k "${UNITS_K:-attention_backward}" > $L/$s.log 2>&1 ;;
    v07[a-h]) python3 -m pytest --collect-only -q -p no:cacheprovider tests/judged/test_verdicts.py -k 07_attention_backward \
          | grep '::' | awk -v q=$(( $(printf %d "'${s#v07}") - 97 )) -v n=${V07_SPLIT:-4} '(NR - 1) % n == q' > $L/$s.ids
        timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider $(cat $L/$s.ids) > $L/$s.log 2>&1 ;;
    v0*) timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider tests/judged/test_verdicts.py -k ${PH[g${s#v}]} > $L/$s.log 2>&1 ;;
    ref) for p in ${REF_PHASES:-01_vector_add 02_softmax 03_matmul_relu 04_benchmarking 05_autotuning 06_fused_attention 07_attention_backward}; do
           timeout -s INT -k 15 $t python3 -m tritoncourse check source/$p/$p.ipynb; done > $L/$s.log 2>&1 ;;
    cg) { timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider tests/grader/test_sandbox_isolation.py \
            tests/grader/test_sandbox_bounds.py tests/grader/test_sandbox_cgroups.py
          TRITONCOURSE_HOSTILE_FIXTURES=hostile_memfd_hog,hostile_tmpfs_hog timeout -s INT -k 15 $(left) python3 -m pytest -v -rA \
            -p no:cacheprovider tests/workflows/test_sandbox_hostile.py -k "hostile_learner_loses or learners_before or nothing_is_left"; } > $L/$s.log 2>&1 ;;
    dist) timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider -s tests/workflows/test_distributed.py -k gpu > $L/$s.log 2>&1 ;;
    hog) TRITONCOURSE_HOSTILE_FIXTURES=hostile_memory_hog timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider \
      tests/grader/test_sandbox_bounds.py tests/workflows/test_sandbox_hostile.py -k "memory_hog or learners_before or course_tree or forged or nothing_is_left or ends_in_time" > $L/$s.log 2>&1 ;;
    soak) TRITON_INTERPRET=1 TRITONCOURSE_SOAK=${SOAK:-250} TRITONCOURSE_SOAK_OFFSET=${SOAK_OFFSET:-0} \
          TRITONCOURSE_SOAK_SHARDS=${SOAK_SHARDS:-$(( $(nproc) / 2 ))} TRITONCOURSE_SOAK_GRADE_JOBS=${SOAK_GRADE_JOBS:-} \
          OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1} TRITONCOURSE_SOAK_RUN_BOUND=$(( t - 120 )) \
          TRITONCOURSE_SOAK_SUMMARY=$OUT/soak-summary.json TRITONCOURSE_SOAK_LOGS=$L/soak timeout -s INT -k 15 $t \
          python3 -m pytest -v -rA -s -p no:cacheprovider tests/workflows/test_soak.py > $L/$s.log 2>&1 ;;
    nb) timeout -s INT -k 15 $t python3 tools/gpu_check.py --notebooks --parallel ${NB_PAR:-3} --phases "${PHASES:-}" \
          --out $L/nb > $L/$s.log 2>&1; cp results/gpu-results.json $OUT/gpu-results.json ;;
    hx) TRITONCOURSE_HOSTILE_FIXTURES=${HOSTILE:-hostile_socket_links,hostile_prints_hidden_then_crashes,hostile_judge_memory,hostile_decoy_torch} \
          timeout -s INT -k 15 $t python3 -m pytest -v -rA -p no:cacheprovider tests/workflows/test_sandbox_hostile.py > $L/$s.log 2>&1 ;;
    py) timeout -s INT -k 15 $t bash -c "$PY_CMD" > $L/$s.log 2>&1 ;;
    ln) if nvidia-smi -L | grep -q H200; then timeout -s INT 80 python3 tools/gpu_check.py --bench --sections layer_norm --repeats 5 --out /tmp/gc \
          --where "device machine (bare image, wheels carried)" > $L/$s.log 2>&1; cp results/gpu-results.json $OUT/gpu-results.json; else echo "not an H200" > $L/$s.log; fi ;;
  esac
  el "end $s rc=$?: $(grep -E '[0-9]+ (passed|failed|error)' $L/$s.log | tail -1)"
}
for s in "$@"; do
  while [ $(jobs -r | wc -l) -ge ${PAR:-2} ]; do sleep 5; done
  start $s &
  sleep 2
done
while [ -n "$(jobs -r)" ]; do sleep 15; el "running: $(jobs -r | wc -l), load $(cut -d' ' -f1 /proc/loadavg)"; tar -C /tmp -czf $OUT/logs.tgz logs; done
wait
el "done"
tar -C /tmp -czf $OUT/logs.tgz logs; cp $L/batch.log $OUT/
