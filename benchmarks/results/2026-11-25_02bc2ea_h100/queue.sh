#!/bin/bash
# usage: queue.sh JOBS DEADLINE_S ; JOBS lines: "setting seed workload"; two workers, one per GPU, each on half the cores.
JOBS=$1; DEADLINE=$2; mkdir -p /tmp/s; cp $JOBS /tmp/s/pending
declare -A SK=([f64]="--sketch min_threads_per_sm=64" [def]="")
worker() {
  g=$1; cores=$2
  while true; do
    left=$((DEADLINE - SECONDS)); [ $left -lt 75 ] && break
    job=$(flock /tmp/s/lock sh -c 'head -1 /tmp/s/pending; sed -i 1d /tmp/s/pending')
    [ -z "$job" ] && break
    set -- $job; s=$1; seed=$2; w=$3; out=/tmp/s/$s/seed$seed
    t=$((left - 10)); [ $t -gt 200 ] && t=200
    echo "gpu$g start $job at $SECONDS" >> /tmp/s/queue.log
    CUDA_VISIBLE_DEVICES=$g OMP_NUM_THREADS=16 timeout $t taskset -c $cores python3 benchmarks/run.py --workloads $w --trials 256 --seeds $seed ${SK[$s]} --n-jobs 16 --commit 02bc2ea --out $out/$w > /tmp/s/$s.seed$seed.$w.log 2>&1
    echo "gpu$g done $job rc=$? at $SECONDS" >> /tmp/s/queue.log
  done
}
worker 0 0-15 & worker 1 16-31 & wait
