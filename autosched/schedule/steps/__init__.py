"""Transform steps: small frozen dataclasses that register themselves by record tag.

Importing this package imports every step module, so `STEP_REGISTRY` knows every tag before any
State exists (loop_state imports its steps from here). The modules, by idea:

- base: the Step class, the registry, `check`, `replace` and the Python-name helpers;
- loop: split, follow split, follow fused split, fuse, reorder;
- compute_location: compute_at, compute_root, compute_inline;
- cache: cache_read, cache_write, rfactor, implicit_gemm (the steps that add a stage);
- annotation: annotations, pragmas, storage_align, double_buffer, pipeline_stages,
  tensor_core_instruction, fragment_double_buffer, operand_copy;
- replay: replaying steps and printing a state as a Python schedule.
"""

from autosched.schedule.steps.annotation import (
    AnnotationStep,
    DoubleBufferStep,
    FragmentDoubleBufferStep,
    NarrowTileStep,
    OperandCopyStep,
    PipelineStagesStep,
    PragmaStep,
    StorageAlignStep,
    TensorCoreInstructionStep,
    WarpSpecializeStep,
)
from autosched.schedule.steps.base import STEP_REGISTRY, Step, replace
from autosched.schedule.steps.cache import (
    CacheReadStep,
    CacheWriteStep,
    ImplicitGemmStep,
    RfactorStep,
)
from autosched.schedule.steps.compute_location import (
    ComputeAtStep,
    ComputeInlineStep,
    ComputeRootStep,
)
from autosched.schedule.steps.loop import (
    FollowFusedSplitStep,
    FollowSplitStep,
    FuseStep,
    ReorderStep,
    SplitStep,
)
from autosched.schedule.steps.replay import print_python_schedule, replay, replay_step

__all__ = [
    "STEP_REGISTRY",
    "AnnotationStep",
    "CacheReadStep",
    "CacheWriteStep",
    "ComputeAtStep",
    "ComputeInlineStep",
    "ComputeRootStep",
    "DoubleBufferStep",
    "FragmentDoubleBufferStep",
    "FollowFusedSplitStep",
    "FollowSplitStep",
    "FuseStep",
    "ImplicitGemmStep",
    "OperandCopyStep",
    "NarrowTileStep",
    "WarpSpecializeStep",
    "PipelineStagesStep",
    "PragmaStep",
    "ReorderStep",
    "RfactorStep",
    "SplitStep",
    "Step",
    "StorageAlignStep",
    "TensorCoreInstructionStep",
    "print_python_schedule",
    "replace",
    "replay",
    "replay_step",
]
