"""The cost model shared by the tasks of a model tuned at once: trained in a thread of its own
(`shared_measure.TrainedInBackground`), so an update never waits for a training."""

from __future__ import annotations

import threading

import numpy as np

from autosched.search.shared_measure import TrainedInBackground


class BlockingModel:
    """A `Retrainable` model whose trainings wait for `release` and count what they saw."""

    def __init__(self, fail_first: bool = False) -> None:
        self.kept: list[int] = []
        self.trained_on: list[int] = []  # programs each adopted training had
        self.release = threading.Event()
        self.started = threading.Event()
        self.fail_first = fail_first

    def add(self, features, throughputs, task_ids=None) -> int:
        self.kept.extend(features)
        return len(features)

    def snapshot(self) -> BlockingModel:
        copy = BlockingModel()
        copy.kept, copy.release, copy.started = list(self.kept), self.release, self.started
        copy.fail_first, self.fail_first = self.fail_first, False
        return copy

    def retrain(self) -> None:
        self.started.set()
        self.release.wait(10)
        if self.fail_first:
            raise RuntimeError("training failed")

    def adopt(self, trained: BlockingModel) -> None:
        self.trained_on.append(len(trained.kept))

    def predict(self, features) -> np.ndarray:
        return np.zeros(len(features))


def test_updates_return_while_training_runs_and_those_meanwhile_train_once_more():
    model = BlockingModel()
    shared = TrainedInBackground(model)
    shared.update([1, 2], [1.0, 1.0])
    assert model.started.wait(10)  # the first training is running, blocked
    shared.update([3], [1.0])  # neither waits for it
    shared.update([4, 5], [1.0, 1.0])
    assert len(shared.predict([0, 0, 0])) == 3  # predictions neither
    model.release.set()
    shared.wait()
    assert model.trained_on == [2, 5]  # the programs that came meanwhile: one more training


def test_a_failed_training_keeps_the_trees_and_the_next_update_trains_again(caplog):
    model = BlockingModel(fail_first=True)
    model.release.set()
    shared = TrainedInBackground(model)
    shared.update([1], [1.0])
    shared.wait()
    assert model.trained_on == [] and "retraining the cost model failed" in caplog.text
    shared.update([2], [1.0])
    shared.wait()
    assert model.trained_on == [2]


def test_a_model_that_cannot_train_apart_is_updated_under_the_lock():
    class Plain:
        def __init__(self) -> None:
            self.updates: list[int] = []

        def update(self, features, throughputs, task_ids=None) -> None:
            self.updates.append(len(features))

    plain = Plain()
    shared = TrainedInBackground(plain)
    shared.update([1, 2, 3], [1.0] * 3)
    shared.wait()
    assert plain.updates == [3]
