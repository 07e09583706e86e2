"""Replaying candidates from the state of their longest prefix replayed before.

A candidate's records start with its sketch's structure and its parent's decisions up to the
one a mutation changed, so the candidates of one search share long prefixes: the steps of a
sketch before its first decision, a parent's steps before the split a child mutated. States are
immutable values, so the state after a prefix serves every candidate that starts with it.
`PrefixReplay` keeps those states in a trie of records and applies only the steps past the
longest known prefix, the way a replay from scratch applies them (`steps.replay_step`): the
result is the same state.

The trie holds at most `capacity` states and is emptied when a replay would pass that, so its
memory stays bounded (states share their unchanged stages; a few KB each).
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.schedule.loop_state import State
from autosched.schedule.steps import replay_step
from autosched.search.mutations import Records, as_step


class _Node:
    """A replayed prefix: its state, and the longer prefixes replayed from it by record."""

    __slots__ = ("state", "children")

    def __init__(self, state: State) -> None:
        self.state = state
        self.children: dict[tuple, _Node] = {}


class PrefixReplay:
    """Replays candidates' records (the search's own: nested tuples, as `mutations.as_step`
    reads them) on one DAG, each from the state of its longest prefix replayed before."""

    def __init__(self, init_state: State, capacity: int = 20_000) -> None:
        self.init_state = init_state
        self.capacity = capacity
        self.root = _Node(init_state)
        self.size = 0  # states in the trie

    def replay(self, records: Records) -> State:
        """The state of `records` (raises as a replay from scratch does where they do not
        replay; the prefix that did is kept)."""
        node, k = self._longest_prefix(records)
        if self.size + len(records) - k > self.capacity:
            self.root, self.size = _Node(self.init_state), 0
            node, k = self.root, 0
        steps = [as_step(r) for r in records[k:]]  # all converted first, as a replay does
        for record, step in zip(records[k:], steps, strict=True):
            child = _Node(replay_step(node.state, step))
            node.children[record] = child
            self.size += 1
            node = child
        return node.state

    def _longest_prefix(self, records: Sequence[tuple]) -> tuple[_Node, int]:
        """The trie's node of the longest prefix of `records` it holds, and its length."""
        node, k = self.root, 0
        for record in records:
            child = node.children.get(record)
            if child is None:
                break
            node, k = child, k + 1
        return node, k


__all__ = ["PrefixReplay"]
