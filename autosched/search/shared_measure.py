"""What the tasks of a model share when they are tuned at once: one measure context, and
thread-safe handles on the cost model and the record log.

`tune_model.tune_tasks` tunes several tasks at once when there are several GPUs (or a
cluster's workers): each task keeps its own policy and measurer, but all measure through one
context (one builder, one runner per GPU), learn in one cost model and append to one log. The
context and the log writer (`records.RecordToFile`) are thread-safe; the model is wrapped in
`TrainedInBackground`, a `Locked` proxy that also retrains it outside the lock.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)


class Locked:
    """A proxy running every method call of `target` (and calls of `target` itself) under one
    lock; attributes that are not callable are read through."""

    def __init__(self, target, lock: threading.RLock | None = None) -> None:
        self._target = target
        self._lock = lock or threading.RLock()

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        if not callable(value):
            return value
        lock = self._lock

        def call(*args, **kwargs):
            with lock:
                return value(*args, **kwargs)

        return call

    def __call__(self, *args, **kwargs):
        with self._lock:
            return self._target(*args, **kwargs)


@runtime_checkable
class Retrainable(Protocol):
    """A cost model whose training can run apart from its predictions (`costmodel.XGBModel`):
    `add` keeps programs without training, `snapshot` copies the data kept, `retrain` trains a
    copy, `adopt` takes a trained copy's trees."""

    def add(self, features: Any, throughputs: Any, task_ids: Any = None) -> int: ...

    def retrain(self) -> None: ...

    def snapshot(self) -> Retrainable: ...

    def adopt(self, trained: Any) -> None: ...


class TrainedInBackground(Locked):
    """A cost model shared by the tasks of a model tuned at once, retrained in a thread of its
    own.

    Every round of every task gives the model its measurements (`update`). Retraining from
    scratch under the lock made the rounds of all tasks queue behind one training after another,
    and every prediction behind them: a model's tuning then ran as many rounds a second as one
    core trains models, however many GPUs measured. Here `update` keeps the programs and
    returns; one trainer thread retrains a snapshot of all programs kept, outside the lock, and
    hands its trees to the model, then trains again if programs came in meanwhile. Predictions
    use the trees of the last finished training, at most one training behind (as the pipelined
    loop's are). A model that is not `Retrainable` is updated under the lock.
    """

    def __init__(self, target: Any) -> None:
        super().__init__(target)
        self._finished = threading.Condition(self._lock)
        self._pending = False
        self._trainer: threading.Thread | None = None

    def update(self, features: Any, throughputs: Any, task_ids: Any = None) -> None:
        model = self._target
        with self._lock:
            if not isinstance(model, Retrainable):
                model.update(features, throughputs, task_ids)
                return
            if not model.add(features, throughputs, task_ids):
                return
            self._pending = True
            if self._trainer is None:
                self._trainer = threading.Thread(
                    target=self._train, name="cost-model-training", daemon=True
                )
                self._trainer.start()

    def _train(self) -> None:
        """Retrain snapshots until no programs wait; a failed training keeps the trees before."""
        model = self._target
        while True:
            with self._lock:
                if not self._pending:
                    self._trainer = None
                    self._finished.notify_all()
                    return
                self._pending = False
                snapshot = model.snapshot()
            try:
                snapshot.retrain()
            except Exception:
                log.exception("retraining the cost model failed; it keeps its earlier trees")
                continue
            with self._lock:
                model.adopt(snapshot)

    def wait(self) -> None:
        """Return once every program given so far has been trained on (or its training failed)."""
        with self._finished:
            self._finished.wait_for(lambda: self._trainer is None)
