"""Images without a registry: apt sources read from the machine, content-hash tags, offline builds."""
from __future__ import annotations

import contextlib
import time

import docker
import pytest

from envs.sandbox import images
from envs.sandbox.engine import client, engine_available

needs_engine = pytest.mark.skipif(
    not engine_available(), reason="no Docker engine answers (scripts/setup.d/10-docker.sh starts one)")


def test_apt_sources_deb822_and_one_line(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "d.sources").write_text(
        "Types: deb deb-src\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main contrib\nSigned-By: /usr/share/keyrings/k.gpg\n\n"
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n"
    )
    (tmp_path / "sources.list").write_text("# old style\ndeb [arch=amd64] http://other.example/debian bookworm main\n")
    got = images.apt_sources(str(tmp_path))
    assert got == [
        "deb [signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main contrib",
        "deb [signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm-updates main contrib",
        "deb [arch=amd64] http://other.example/debian bookworm main",
    ]
    assert [images._suite(s) for s in got] == ["bookworm", "bookworm-updates", "bookworm"]
    assert all(s.startswith("deb ") for s in images.apt_sources())  # this machine's own


def test_recipe_hash_follows_content(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    h1 = images.recipe_hash(tmp_path, "base:1")
    assert images.recipe_hash(tmp_path, "base:1") == h1
    assert images.recipe_hash(tmp_path, "base:2") != h1  # a new base rebuilds the layer
    (tmp_path / "f.txt").write_text("a")
    assert images.recipe_hash(tmp_path, "base:1") != h1


@pytest.mark.docker
@needs_engine
def test_build_image_rebuilds_only_on_change(tmp_path):
    ctx = tmp_path / "layer"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY note.txt /opt/note.txt\n")
    (ctx / "note.txt").write_text("one\n")
    tags = []
    try:
        tag = images.build_image(ctx, name="test-layer")
        tags.append(tag)
        assert tag.startswith("openclaw/test-layer:") and images.image_exists(tag)
        t0 = time.monotonic()
        assert images.build_image(ctx, name="test-layer") == tag  # unchanged: found, not built
        assert time.monotonic() - t0 < 2
        (ctx / "note.txt").write_text("two\n")
        tag2 = images.build_image(ctx, name="test-layer")
        tags.append(tag2)
        assert tag2 != tag
        out = client().containers.run(tag2, ["cat", "/opt/note.txt"], remove=True, network_mode="none")
        assert out == b"two\n"
        assert not images.image_exists(tag)  # the stale build was untagged
    finally:
        for t in tags:
            with contextlib.suppress(docker.errors.APIError):
                client().images.remove(t)


@pytest.mark.docker
@needs_engine
def test_build_has_no_network(tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE\nFROM ${BASE}\n"
        "RUN python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\"\n"
    )
    with pytest.raises(images.ImageError, match="failed"):
        images.build_image(tmp_path, name="test-offline")


def test_unknown_recipe_is_a_clear_error():
    with pytest.raises(images.ImageError, match="no image recipe 'nope'"):
        images.ensure_image("nope")
