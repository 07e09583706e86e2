"""The worker's two ways of timing runs of a launch sequence on the GPU, each a
`timing_plan.RepeatTimer`: replays of a captured CUDA graph (`GraphTimer`, the GPU's time of
the kernels) and back-to-back launches between events (`BackToBackTimer`, the fallback where
the driver refuses graphs, bounded below by the host's launch rate).

`run(stream, k)` enqueues the k-th run of the sequence (the worker's buffer-set rotation;
`run.sets` runs in a row read every set once).
"""

from __future__ import annotations

from measure.cuda_graph import Graph, GraphDriver, stream_handle
from measure.lead_in import LeadIn

# Kernel launches per captured graph, at most: a longer repeat replays the graph several times.
# Capturing and instantiating cost host time per launch, and the gap between consecutive replays
# on the GPU is small beside a replay of this many launches, so a larger graph would only cost
# time.
MAX_GRAPH_LAUNCHES = 1024


class GraphTimer:
    """Times runs by replaying a captured graph of at most MAX_GRAPH_LAUNCHES launches;
    captures again only when the graph's size changes.

    Repeats follow one untimed replay of their graph, so that the GPU is busy while the host
    enqueues them and every repeat follows the work it times. A probe (calibration only) leads
    in with `lead_in` instead (measure.lead_in: `flush_bytes` of scratch written, for a rotating
    timing, then a spin), a fraction of a replay's cost; without one it leads in as the repeats
    do, and then counts as a repeat."""

    batches_repeats = True

    def __init__(
        self,
        drv,
        graphs: GraphDriver,
        stream,
        run,
        launches_per_run: int,
        lead_in: LeadIn | None = None,
        flush_bytes: int = 0,
    ):
        self.drv, self.graphs, self.stream = drv, graphs, stream
        self.handle = stream_handle(stream)
        self.run = run
        self.lead_in = lead_in if lead_in is not None and lead_in.function is not None else None
        self.probe_counts = self.lead_in is None
        self.flush_bytes = flush_bytes
        # a graph holds every buffer set's run at least, however many launches that takes
        self.most_runs = max(run.sets, MAX_GRAPH_LAUNCHES // max(1, launches_per_run))
        self.graph: Graph | None = None
        self.graph_runs = 0
        self.captures = 0  # graphs captured and instantiated (each costs host time)

    def probe(self, number: int) -> tuple[int, float]:
        """(runs, at least `number`; their milliseconds), after a spin lead-in."""
        if self.lead_in is None:
            number, (ms,) = self.repeats(number, 1)
            return number, ms
        graph, replays, runs = self._replays_of(number)
        try:
            self.lead_in.launch(self.stream, self.flush_bytes)
        except self.drv.Error:  # no memory for the flush's scratch: lead in by a replay
            graph.launch(self.handle)
        return runs * replays, self._timed(graph, replays, 1)[0]

    def repeats(self, number: int, count: int) -> tuple[int, list[float]]:
        """(runs per repeat, at least `number`; milliseconds of `count` consecutive repeats)."""
        graph, replays, runs = self._replays_of(number)
        graph.launch(self.handle)  # the untimed lead-in replay
        return runs * replays, self._timed(graph, replays, count)

    def _replays_of(self, number: int) -> tuple[Graph, int, int]:
        """(graph, replays per repeat, runs per replay) for repeats of `number` runs at least:
        the runs spread as evenly as possible over the fewest replays."""
        replays = -(-number // self.most_runs)
        runs = -(-number // replays)
        return self._graph(runs), replays, runs

    def _timed(self, graph: Graph, replays: int, count: int) -> list[float]:
        """Milliseconds of `count` consecutive repeats of `replays` replays, between events."""
        events = [self.drv.Event() for _ in range(count + 1)]
        events[0].record(self.stream)
        for event in events[1:]:
            for _ in range(replays):
                graph.launch(self.handle)
            event.record(self.stream)
        events[-1].synchronize()
        return [b.time_since(a) for a, b in zip(events, events[1:], strict=False)]

    def _graph(self, runs: int) -> Graph:
        if self.graph is None or runs != self.graph_runs:
            self.close()
            stream, run = self.stream, self.run
            self.graph = self.graphs.capture(
                self.handle, lambda: [run(stream, k) for k in range(runs)]
            )
            self.graph_runs = runs
            self.captures += 1
        return self.graph

    def close(self) -> None:
        """Release the graph."""
        if self.graph is not None:
            self.graph.close()
            self.graph = None


class BackToBackTimer:
    """CUDA events around `number` back-to-back launches of the sequence (on the legacy
    stream) per repeat. With no lead-in, a probe is timed as a repeat is, and counts as one."""

    probe_counts = True
    batches_repeats = False

    def __init__(self, drv, run) -> None:
        self.run = run
        self.start, self.end = drv.Event(), drv.Event()

    def probe(self, number: int) -> tuple[int, float]:
        """(number, milliseconds of `number` runs)."""
        return number, self._timed(number)

    def repeats(self, number: int, count: int) -> tuple[int, list[float]]:
        """(number, milliseconds of each of `count` repeats of `number` runs)."""
        return number, [self._timed(number) for _ in range(count)]

    def _timed(self, number: int) -> float:
        self.start.record()
        for k in range(number):
            self.run(None, k)
        self.end.record()
        self.end.synchronize()
        return self.end.time_since(self.start)  # milliseconds
