set -x
nvidia-smi -L > $OUT/gpus.txt
( CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 250 python3 -m pytest -q -m gpu tests/test_gpu_timing.py -s > $OUT/gpu_timing.log 2>&1
  CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 300 python3 benchmarks/run_queue.py .gpu/jobs_b.txt --out /tmp/q0 --deadline 290 --expected 85 -- --trials 256 --commit 0867515 > $OUT/q0.log 2>&1 ) &
( taskset -c 16-31 env CUDA_VISIBLE_DEVICES=1 timeout 510 python3 benchmarks/run_queue.py .gpu/jobs_a.txt --out /tmp/q1 --deadline 500 --expected 110 -- --trials 256 --commit 0867515 > $OUT/q1.log 2>&1 ) &
wait
cd /tmp && tar czf $OUT/call1.tgz q0 q1 2>/dev/null; ls -la $OUT
