"""One translation unit per entry function of a CUDA source, for compiling them apart.

Why: a search's program is often two kernels, an expensive one (the tiled reduction) and a cheap
one (an epilogue: the rfactor's final sum, a bias, a ReLU), and many candidates differ only in
the cheap one's tiling. Compiled as one source, every such candidate pays again for the
expensive kernel (most of its compile time); compiled apart, each entry function is its own
entry of the builder's kernel cache, and the expensive one is compiled once. NVVM and ptxas
compile each entry function on its own, so its machine code is the same either way.

The split is textual and only for sources shaped as the CUDA printer writes them: shared text
first (headers, helper functions and macros), then the entry functions, each starting a line
with `ENTRY_PREFIX`. A source of any other shape is not split (the builder compiles it whole).
"""

from __future__ import annotations

ENTRY_PREFIX = 'extern "C" __global__'


def split_entries(source: str) -> list[str]:
    """The shared text followed by one entry function, for each entry function of `source`, in
    order; [] when `source` has fewer than two entry functions starting a line."""
    lines = source.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith(ENTRY_PREFIX)]
    if len(starts) < 2:
        return []
    shared = lines[: starts[0]]
    ends = starts[1:] + [len(lines)]
    return ["\n".join(shared + lines[a:b]) for a, b in zip(starts, ends, strict=True)]
