"""autosched without a GPU: declare a conv2d + bias + relu layer, generate its sketches, sample
a few complete schedules, and run each one's kernel on the CPU interpreter against numpy.

    python examples/cpu_tour.py [--states 4] [--seed 0]

The interpreter runs the same device program that `build` prints as CUDA, thread by thread in
lock step (shared-memory races included), so a schedule that passes here computes the right
answer on the GPU too. The layer is the README's, narrowed to 16 output and 8 input channels so
that interpreting it takes a fraction of a second per schedule.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import autosched
from autosched import te, topi


@autosched.register_workload
def conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    return [data, kernel, bias, topi.nn.relu(conv + bias)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=4, help="schedules to sample and run")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's random seed")
    opts = parser.parse_args()

    task = autosched.SearchTask(func=conv2d_layer, args=(1, 7, 7, 16, 8, 3, 3, 1, 1))
    print(task.compute_dag)

    sketches = autosched.generate_sketches(task)  # schedules with the tile sizes left open
    states = autosched.sample_initial_population(sketches, opts.states, opts.seed)
    print(f"{len(sketches)} sketch(es), {len(states)} sampled schedule(s)\n")

    rng = np.random.default_rng(opts.seed)
    inputs = {
        t.name: rng.uniform(-1, 1, t.shape).astype(t.dtype)
        for t in task.compute_dag.tensors
        if isinstance(t.op, te.PlaceholderOp)
    }
    expected = autosched.evaluate(task.compute_dag, inputs)  # the numpy reference
    for i, state in enumerate(states):
        kernel = autosched.build(task.compute_dag, state)
        t0 = time.perf_counter()
        outputs = kernel.run_cpu(*(inputs[a.name] for a in kernel.inputs))
        seconds = time.perf_counter() - t0
        for spec, got in zip(kernel.outputs, outputs, strict=True):
            np.testing.assert_allclose(got, expected[spec.name], rtol=1e-4, atol=1e-5)
        launch = kernel.launches[0]
        print(
            f"schedule {i}: grid {launch.grid}, block {launch.block}: "
            f"matches numpy (interpreted in {seconds:.2f} s)"
        )

    print("\nThe equivalent TVM-style schedule of schedule 0:")
    print(task.compute_dag.print_python_schedule(states[0]))


if __name__ == "__main__":
    main()
