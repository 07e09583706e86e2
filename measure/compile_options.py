"""The options NVRTC and nvcc compile with, chosen so that both emit the same machine code.

Why: a kernel is timed with the cubin of one back end (NVRTC when found) and may be run later by
a process that has only the other; both must run the same code. The two run the same NVVM and
ptxas, but their defaults differ in two ways that change the code:

- Shared-memory pointers: nvcc's front end (cicc) makes them 32 bits wide, NVRTC 64 bits; the
  PTX then addresses shared memory differently and ptxas allocates other registers. NVRTC has no
  option for 32-bit ones; cicc's `--sharedmem32=0` (passed with `-Xcicc`) gives nvcc NVRTC's.
- The register cap: `--maxrregcount` is read by NVVM as well as by ptxas (its register-pressure
  heuristics change the PTX), so both back ends get the same cap, ptxas's own limit of 255.

`-O3` is nvcc's host optimisation level (the device code is optimised fully by default in both);
`-Xptxas -v` / `--ptxas-options=--verbose` make ptxas print the resources that `parse_ptxas`
reads. tests/measure/test_measure_compiler.py checks that both back ends give the same SASS.

`NVRTC_SPEED_OPTIONS` only make NVRTC compile faster; they never change the code (the same
test, and the SASS of sampled search candidates, compared with and without them):

- `no-cache`: NVRTC 12.9+ keeps every program it compiles in the driver's compute cache (a key
  hashed from source and options, the cubin written to disk). The builder has its own cache
  (measure/kernel_cache.py), and each source it compiles carries a unique kernel (`nvrtc.py`),
  so NVRTC's cache is only ever written, never read.
- `pch`: NVRTC 12.8+ precompiles the headers a source starts with (cuda_fp16.h, cuda_bf16.h,
  mma.h: the front end's largest cost for half-precision kernels) into a file of the folder
  named, and later compilations of the same worker with the same leading directives load it
  instead of parsing them again. One folder per worker (`nvrtc.NvrtcCompiler`). Warning 630
  ("the initial directives are not compatible with the precompiled header") only says that a
  source of other headers makes its own.
- `minimal`: NVRTC 12.4+ leaves out of the translation unit what generated kernels never use
  (texture and surface types, the device runtime's cuda* functions, launches from the device,
  the runtime API's types), so its front end has fewer built-in declarations to parse: a few
  per cent of a kernel's compile time, the same SASS for sampled conv2d, fp16 Tensor Core
  matmul (wmma, mma.sync, wgmma) and softmax candidates.

Each group is used only where the worker's library accepts it (older NVRTC does not know
them); `{pch_dir}` stands for the worker's folder.
"""

from __future__ import annotations

MAX_REGISTERS = 255

NVRTC_OPTIONS = ("--ptxas-options=--verbose", f"--maxrregcount={MAX_REGISTERS}")

# group name -> options (str.format fields: pch_dir)
NVRTC_SPEED_OPTIONS: dict[str, tuple[str, ...]] = {
    "no-cache": ("--no-cache",),
    "pch": ("--pch", "--pch-dir={pch_dir}", "--pch-messages=false", "--diag-suppress=630"),
    "minimal": ("--minimal",),
}

NVCC_OPTIONS = (
    "-O3",
    "-Xptxas",
    "-v",
    f"-maxrregcount={MAX_REGISTERS}",
    "-Xcicc",
    "--sharedmem32=0",
)

# A source whose text holds this line uses instructions of an arch-specific target (wgmma:
# sm_90a); `compile_arch` compiles it for that target on the GPUs that have one.
ARCH_SPECIFIC_MARKER = "// autosched: uses arch-specific instructions (sm_90a)"
# arch -> its arch-specific target (features of that chip only, such as wgmma and setmaxnreg)
ARCH_SPECIFIC_TARGETS = {"sm_90": "sm_90a"}


def compile_arch(source: str, arch: str) -> str:
    """The arch to compile `source` for on a GPU of `arch`: its arch-specific target when the
    source is marked with `ARCH_SPECIFIC_MARKER` and the GPU has one; else `arch` (a marked
    source then fails to compile, with ptxas naming the instruction)."""
    if ARCH_SPECIFIC_MARKER in source:
        return ARCH_SPECIFIC_TARGETS.get(arch, arch)
    return arch


def nvcc_arch_options(arch: str) -> tuple[str, ...]:
    """nvcc's options for one target: `-arch=sm_XX`, or the `-gencode` form for an
    arch-specific one (nvcc 13.0's `-arch=sm_90a` shorthand also runs a plain sm_90 pass, which
    rejects wgmma)."""
    if arch.endswith("a"):
        return (f"-gencode=arch=compute_{arch[len('sm_') :]},code={arch}",)
    return (f"-arch={arch}",)
