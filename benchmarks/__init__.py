"""The scripts behind autosched's published numbers, run from the repository root as
`python -m benchmarks.<script>`: the operator suite (`run`, `run_queue`), whole models
(`model_e2e`), Tensor Cores (`tensor_core`), several GPUs (`multi_gpu`), the cost model's dataset
(`collect_dataset`) and record-against-benchmark agreement (`agreement`). They share one timing
module (`timing`) and one results writer (`report`), which keeps each benchmark's latest run in
`benchmarks/results/<benchmark>/` and generates `docs/PERFORMANCE.md` from them."""
