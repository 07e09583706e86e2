"""What to tune: registered workloads (and the benchmark suite, registered on import), the
SearchTask, and the numpy reference outputs a candidate is checked against."""

from autosched.task import workloads  # noqa: F401  (registers the suite's workloads)
