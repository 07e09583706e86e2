nvidia-smi -L > $OUT/gpus.txt
taskset -c 0-31 env CUDA_VISIBLE_DEVICES=0,1 timeout 530 python3 benchmarks/run_queue.py .gpu/jobs_c.txt --out /tmp/q2 --deadline 520 --expected 75 -- --trials 256 --commit 0867515 > $OUT/q2.log 2>&1
cd /tmp && tar czf $OUT/call2.tgz q2 2>/dev/null; ls -la $OUT
