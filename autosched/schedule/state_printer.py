"""A readable loop-nest view of a State (like TVM's `print(state)`)."""

from __future__ import annotations

from autosched.schedule.stage import ATTACHED, INLINED, HasStages

ANNOT_TEXT = {
    "none": "for",
    "unroll": "unroll",
    "vectorize": "vectorize",
    "parallel": "parallel",
    "vthread": "vthread",
}


def state_str(state: HasStages) -> str:
    """The stages' loop nests, one line per loop, attached stages inside their loop."""
    lines: list[str] = []
    attached: dict[tuple[int, str], list[int]] = {}
    for i, s in enumerate(state.stages):
        if s.compute_at == ATTACHED and s.attach is not None:
            attached.setdefault(s.attach, []).append(i)

    def emit(i: int, depth: int) -> None:
        s = state.stages[i]
        if s.is_placeholder:
            lines.append("  " * depth + f"Placeholder: {s.name}")
            return
        ind = depth
        for it in s.iters:
            kind = ANNOT_TEXT.get(it.annotation, it.annotation)
            ext = "?" if it.extent is None else it.extent
            lines.append("  " * ind + f"{kind} {it.name} (0,{ext})")
            ind += 1
            for j in attached.get((i, it.name), []):
                emit(j, ind)
        scope = f" [{s.scope}]" if s.scope != "global" else ""
        lines.append("  " * ind + f"{s.name} = ...{scope}")

    for i, s in enumerate(state.stages):
        if s.compute_at == INLINED or s.compute_at == ATTACHED:
            continue
        emit(i, 0)
    return "\n".join(lines)
