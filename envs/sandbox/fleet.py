"""This process's Docker fleet: the engines its sandboxes go to and how many each takes.

The Docker backend keeps process-wide state in four modules (engine.py: the hosts and their
health; placement.py: the cap per engine and the load; pool.py: the warm pools; sweeper.py: who
owns a container, the exit cleanup). Code outside envs/sandbox sets and asks it here only.
`Fleet` is the setting: a frozen value that pickles, so a Ray worker applies its driver's
(experiments/factories.py's EnvMaker) with `use`. What a process holds is ended through
`envs.sandbox.release_all`, to which the first pool of a process subscribes the sweeper.
"""
from __future__ import annotations

import dataclasses

from envs.sandbox import engine, placement


@dataclasses.dataclass(frozen=True)
class Fleet:
    hosts: tuple[str, ...] = ()  # engine URLs (unix:///path.sock, tcp://host:port); empty: the local engine
    max_per_host: int | None = None  # containers an engine takes before others are preferred (None or 0: no cap)


def use(fleet: Fleet) -> None:
    """Place this process's Docker sandboxes as `fleet` says (ValueError names a bad host or cap)."""
    engine.set_hosts(fleet.hosts)
    placement.configure(fleet.max_per_host)


def available() -> bool:
    """Whether an engine of this process's fleet answers (never raises)."""
    return engine.engine_available()


def describe() -> str:
    """This process's engines, for messages."""
    return ", ".join(map(engine.name, engine.hosts()))
