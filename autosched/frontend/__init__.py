"""The PyTorch front end: whole models to tasks, and tuned kernels back into the model.

`autosched.torch` is the user-facing module; this package holds its parts (each imports torch,
so `import autosched` never loads it): `trace` (torch.export's ATen graph of a model or of a
torch.compile graph), `patterns` (hand-written formulas rewritten to their operator), `graph`
(reading that graph), `ops` and `epilogues` (ATen operators to anchor and epilogue specs),
`attention` (the fused-attention hook), `dag_builder` (a fused group to a ComputeDAG),
`precision` (where float32 tasks allow TF32), `extract` (partition, tasks), `coverage` (what
stays in PyTorch) and `runtime` (the compiled module and the torch.compile backend).
"""
