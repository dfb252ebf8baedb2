"""Task families from reasoning-gym: parse `env.tasks`, build the generators, name and regenerate items.

A spec is a dataset name (its default difficulty) or a mapping
`{name: NAME, size: N, config: {KEY: VALUE, ...}, label: ID_PREFIX}`. Task ids are
`<label>/<index>` for training items (generator seed `seed`) and `<label>/h<split seed>/<index>`
for held-out items (a generator seed of their own, see `held_out_seed`), so `load_task`
regenerates any item from its id alone.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import reasoning_gym
from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS

SPEC_KEYS = ("name", "size", "config", "label")
# The mix where SmolLM2-135M-Instruct starts inside 5-60% success (docs/results.md).
DEFAULT_TASKS = ({"name": "products", "config": {"max_digits": 1}},)
DEFAULT_SIZE = 200
MAX_SIZE = 1_000_000
# reasoning-gym draws item i of a generator seeded s from Random(s + i): held-out generators
# start this far from the training seed, so their streams never meet a training item's.
HELD_OUT_STRIDE = 10 * MAX_SIZE


class TaskSpecError(ValueError):
    """A bad `env.tasks` entry; the message is one line saying what to change."""


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task family: a reasoning-gym dataset with its difficulty config."""

    name: str
    size: int = DEFAULT_SIZE
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    label: str = ""  # the task-id prefix; default: the dataset name

    def dataset(self, seed: int, size: int | None = None) -> ProceduralDataset:
        """The generator at `seed` (config errors become one TaskSpecError line)."""
        try:
            return reasoning_gym.create_dataset(self.name, seed=seed, size=size or self.size, **self.config)
        except (AssertionError, TypeError, ValueError) as e:  # the config's own validate() asserts
            raise TaskSpecError(f"env.tasks: {self.label}: bad config {self.config} ({e or type(e).__name__})") from None


def config_keys(name: str) -> list[str]:
    """The difficulty keys dataset `name` takes (its config dataclass without seed and size)."""
    return [f.name for f in dataclasses.fields(DATASETS[name][1]) if f.name not in ("seed", "size")]


def parse_spec(raw: Any) -> TaskSpec:
    """One `env.tasks` entry: a dataset name, or a mapping with the keys in SPEC_KEYS."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        raise TaskSpecError(f"env.tasks: each entry is a dataset name or {{name: ..., size: ..., config: {{...}}}}, got {raw!r}")
    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        raise TaskSpecError(f"env.tasks: entry {raw!r} has unknown key {', '.join(unknown)}; an entry takes {', '.join(SPEC_KEYS)}")
    name = raw.get("name")
    if name not in DATASETS:
        raise TaskSpecError(f"env.tasks: unknown reasoning-gym dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    config = raw.get("config") or {}
    if not isinstance(config, dict):
        raise TaskSpecError(f"env.tasks: {name}: config must be a mapping of difficulty keys, got {config!r}")
    bad = sorted(set(config) - set(config_keys(name)))
    if bad:
        raise TaskSpecError(f"env.tasks: {name} has no config key {', '.join(bad)}; it takes: {', '.join(config_keys(name))}")
    size = raw.get("size", DEFAULT_SIZE)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise TaskSpecError(f"env.tasks: {name}: size must be an integer from 1 to {MAX_SIZE}, got {size!r}")
    label = str(raw.get("label") or name)
    if "/" in label:
        raise TaskSpecError(f"env.tasks: label {label!r} may not contain '/'")
    return TaskSpec(name=name, size=size, config=dict(config), label=label)


def parse_specs(raw: Any) -> list[TaskSpec]:
    """The whole `env.tasks` list (a single name or mapping counts as a list of one)."""
    if isinstance(raw, (str, dict)):
        raw = [raw]
    specs = [parse_spec(r) for r in raw or []]
    if not specs:
        raise TaskSpecError("env.tasks is empty; give at least one reasoning-gym dataset name")
    labels = [s.label for s in specs]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise TaskSpecError(f"env.tasks: {', '.join(dup)} appears twice; give each entry its own label: ...")
    return specs


def held_out_seed(seed: int, split_seed: int) -> int:
    """The generator seed of held-out items for a split seed (never overlaps the training stream)."""
    return seed + HELD_OUT_STRIDE * (1 + int(split_seed))


def train_id(label: str, index: int) -> str:
    return f"{label}/{index}"


def held_out_id(label: str, split_seed: int, index: int) -> str:
    return f"{label}/h{split_seed}/{index}"


def parse_id(task_id: str) -> tuple[str, int | None, int]:
    """(label, split seed or None for training items, index); ValueError if malformed."""
    parts = task_id.split("/")
    if len(parts) == 2 and parts[1].isdigit():
        return parts[0], None, int(parts[1])
    if len(parts) == 3 and parts[1][:1] == "h" and parts[1][1:].isdigit() and parts[2].isdigit():
        return parts[0], int(parts[1][1:]), int(parts[2])
    raise ValueError(f"malformed reasoning task id {task_id!r} (ids look like 'chain_sum/3' or 'chain_sum/h0/3')")
