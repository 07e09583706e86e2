"""The PyTorch front end: whole models to tasks, and tuned kernels back into the model.

`autosched.torch` is the user-facing module; this package holds its parts (each imports torch,
so `import autosched` never loads it): `ops` (torch operators to anchor and epilogue specs),
`dag_builder` (a fused group to a ComputeDAG), `extract` (trace, partition, tasks) and
`runtime` (the compiled module and the torch.compile backend).
"""
