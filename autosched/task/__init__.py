"""What to tune: registered workloads (and the benchmark suite, registered on import), the
SearchTask, and the numpy reference outputs a candidate is checked against."""

from autosched.task import attention_workloads, workloads  # noqa: F401  (register workloads)
