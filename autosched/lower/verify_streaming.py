"""The verifier's rules for the streaming cache hints (`Kernel.stream_reads`,
`Kernel.stream_writes`): the printer applies a hint only to global buffers a kernel reads and
never writes (`__ldcs`), or writes and never reads (`__stcs`), so a kernel marked with one must
have such a buffer, or the hint means nothing."""

from __future__ import annotations

from autosched.lower import ir


def streaming_problems(k: ir.Kernel, params: list[ir.Buffer], loaded: set[int]) -> list[str]:
    """What is wrong with kernel `k`'s streaming hints (empty: nothing); `loaded` holds the ids
    of the global buffers it loads."""
    stored = {id(s.buffer) for s in ir.iter_stmts(k.body) if isinstance(s, ir.Store)}
    written = stored | {id(s.buffer) for s in ir.iter_stmts(k.body) if isinstance(s, ir.AllReduce)}
    written |= {
        id(s.written())
        for s in ir.iter_stmts(k.body)
        if isinstance(s, ir.WarpStmt) and s.writes_memory()
    }
    problems = []
    if k.stream_reads and not any(id(b) in loaded and id(b) not in written for b in params):
        problems.append(
            f"kernel {k.name}: stream_reads, but it loads no global buffer that it does not write"
        )
    if k.stream_writes and not any(id(b) in stored and id(b) not in loaded for b in params):
        problems.append(
            f"kernel {k.name}: stream_writes, but it stores no global buffer that it does not load"
        )
    return problems
