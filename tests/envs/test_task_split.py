"""The training / held-out task split every env offers."""
from __future__ import annotations

import pytest

from envs.base import TaskSplit, split_ids
from tests.toy_envs import FirstCharEnv


def test_split_is_disjoint_complete_and_fixed_by_its_seed():
    ids = [f"t{i}" for i in range(40)]
    a = split_ids(ids, 8, seed=3)
    assert len(a.held_out) == 8 and not set(a.train) & set(a.held_out)
    assert sorted(a.train + a.held_out) == sorted(ids)
    assert split_ids(ids, 8, seed=3) == a
    assert split_ids(ids, 8, seed=4) != a
    assert a.train == [t for t in ids if t in set(a.train)]  # task order is kept


def test_held_out_is_at_most_half_and_zero_is_none():
    ids = ["a", "b", "c", "d", "e"]
    assert len(split_ids(ids, 100, seed=0).held_out) == 2
    assert split_ids(ids, 0, seed=0) == TaskSplit(train=ids, held_out=[])


def test_overlap_is_refused():
    with pytest.raises(ValueError, match="also in training"):
        TaskSplit(train=["a", "b"], held_out=["b"])


def test_envs_split_their_own_tasks():
    env = FirstCharEnv()
    split = env.task_split(2, seed=0)
    assert set(split.train) | set(split.held_out) == set(env.task_ids())
    for t in split.held_out:
        env.load_task(t)
