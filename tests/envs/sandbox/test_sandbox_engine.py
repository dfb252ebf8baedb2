"""The engine list: validation, one entry per engine, dead engines found fast and named once.
(No Docker engine needed; tests/envs/sandbox/test_sandbox_hosts.py places real sandboxes.)"""
from __future__ import annotations

import logging
import pickle
import socket
import time

import pytest

from envs.sandbox import engine, fleet, placement
from envs.sandbox.fleet import Fleet
from tests.cli import REPO


@pytest.fixture(autouse=True)
def local_engine_after():
    yield
    engine.set_hosts(None)


def test_a_fleet_travels_pickled_and_sets_hosts_and_cap():
    """What a Ray worker gets from its driver (EnvMaker.docker) places its sandboxes the same way."""
    fleet.use(pickle.loads(pickle.dumps(Fleet(("tcp://a:2376", "unix:///x.sock"), 3))))
    try:
        assert engine.hosts() == ["tcp://a:2376", "unix:///x.sock"] and placement.max_per_host == 3
        assert fleet.describe() == "tcp://a:2376, unix:///x.sock"
    finally:
        fleet.use(Fleet())
    assert engine.hosts() == [engine.LOCAL] and placement.max_per_host is None


def _dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def test_hosts_are_urls_each_engine_once():
    engine.set_hosts(None)
    assert engine.hosts() == [engine.LOCAL]
    engine.set_hosts(["tcp://a:2376", " tcp://a:2376 ", "unix:///x.sock", "tcp://a:2376"])
    assert engine.hosts() == ["tcp://a:2376", "unix:///x.sock"]
    assert {"tcp://a:2376", "unix:///x.sock", engine.LOCAL} <= set(engine.seen())  # cleanup visits all
    with pytest.raises(ValueError, match="is not a URL"):
        engine.set_hosts(["docker-host-1"])


def test_dead_engines_are_skipped_fast_and_named_once(caplog):
    dead = [_dead_url(), "unix:///nonexistent/openclaw.sock"]
    engine.set_hosts(dead)
    with caplog.at_level(logging.WARNING, logger="envs.sandbox.engine"):
        t0 = time.monotonic()
        assert engine.live_hosts(fresh=True) == []
        assert engine.live_hosts(fresh=True) == []
        assert time.monotonic() - t0 < 2 * engine.PING_TIMEOUT_S
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all(any(u in line for line in lines) for u in dead)
    assert "Connection refused" in next(line for line in lines if dead[0] in line)
    assert not engine.engine_available()
    with pytest.raises(engine.NoEngine, match="no Docker engine answers"):
        engine.primary()


def test_sandbox_hosts_that_are_not_urls_stop_the_run():
    from hydra import compose, initialize_config_dir

    from experiments.factories import ConfigError, env_factory

    with initialize_config_dir(config_dir=str(REPO / "experiments" / "conf"), version_base=None):
        cfg = compose("config", overrides=["env=toolcall", "sandbox=docker", "sandbox.hosts=[docker-host-1]"])
    with pytest.raises(ConfigError, match="sandbox: Docker host 'docker-host-1' is not a URL"):
        env_factory(cfg)
