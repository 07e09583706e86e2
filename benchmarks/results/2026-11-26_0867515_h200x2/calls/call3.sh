nvidia-smi -L > $OUT/gpus.txt
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_timing.py -s > $OUT/gpu_timing_1.log 2>&1
timeout 120 python3 benchmarks/run_queue.py .gpu/jobs_d.txt --out /tmp/q3 --deadline 110 --expected 50 -- --trials 256 --commit 0867515 > $OUT/q3.log 2>&1
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_timing.py -s > $OUT/gpu_timing_2.log 2>&1
cd /tmp && tar czf $OUT/call3.tgz q3 2>/dev/null; ls -la $OUT
