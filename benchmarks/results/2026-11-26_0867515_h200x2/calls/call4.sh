nvidia-smi -L > $OUT/gpus.txt
taskset -c 0-31 env CUDA_VISIBLE_DEVICES=0,1 timeout 440 python3 benchmarks/run_queue.py .gpu/jobs_e.txt --out /tmp/q4 --deadline 430 --expected 75 -- --trials 256 --commit 0867515 > $OUT/q4.log 2>&1
cd /tmp && tar czf $OUT/call4.tgz q4 2>/dev/null; ls -la $OUT
