"""Sandbox images built without a registry, tagged by the content hash of their recipe.

The base is a root file system made by `mmdebstrap` from the mirror in this machine's own apt
sources, then `docker import`ed; every other image is a `docker build --network none` layer on
it (see images/README.md). A task's own Dockerfile may instead start FROM any image this machine
has (Harbor tasks: `FROM python:3.12-slim`); one it lacks is never pulled: the build fails with
one line naming it, unless a substitute (`base`, or a local tag) is given. A tag is `openclaw/<name>:<hash>`: a changed recipe gets a new tag
and is built, an unchanged one is found and reused.

With several engines (engine.set_hosts) images are built on the primary by default. An image
one engine lacks is copied from an engine that has it (`docker save | docker load`, streamed:
seconds, where a rebuild of the base takes minutes and the distribution mirror).

CLI: `python -m envs.sandbox.images build [NAME...]` | `list`.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterator

import docker
import requests

from envs.progress import Progress
from envs.sandbox import engine
from envs.sandbox.engine import client

RECIPES = Path(__file__).resolve().parents[2] / "images"
REPO = "openclaw"
HASH_LEN = 12
BUILD_TIMEOUT_S = 1800


class ImageError(RuntimeError):
    """An image cannot be found or built (with the reason and what to do)."""


def _log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def recipe_hash(context_dir: str | os.PathLike, *extra: str) -> str:
    """Content hash of every file under `context_dir` (path, mode bit x, bytes) plus `extra`."""
    root = Path(context_dir)
    h = hashlib.sha256()
    for s in extra:
        h.update(s.encode() + b"\0")
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(b"x" if os.access(p, os.X_OK) else b"-")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:HASH_LEN]


def image_exists(tag: str, url: str | None = None) -> bool:
    """Whether engine `url` (None: the primary) has image `tag`."""
    try:
        client(url).images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.DockerException as e:
        raise ImageError(f"Docker engine error while looking up {tag}: {e}") from e


def remove_image(tag: str, wait_s: float = 60.0, url: str | None = None) -> None:
    """Remove image `tag` from engine `url` once no container of it is left (closed sandboxes
    are removed in the background), waiting at most `wait_s`."""
    c = client(url)
    try:
        image_id = c.images.get(tag).id
    except docker.errors.ImageNotFound:
        return
    deadline = time.monotonic() + wait_s
    while c.containers.list(all=True, filters={"ancestor": image_id}) and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        c.images.remove(image_id, force=True)
    except docker.errors.DockerException as e:
        raise ImageError(f"cannot remove {tag}: {e}") from e


@contextlib.contextmanager
def _build_lock(timeout_s: float = BUILD_TIMEOUT_S):
    """One build at a time on this host (two runs starting together build once)."""
    path = Path(tempfile.gettempdir()) / "openclaw-images.lock"
    with open(path, "a") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ImageError(f"another image build held {path} for {timeout_s:.0f} s")
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- apt sources of this machine ---------------------------------------------------------------

def apt_sources(root: str = "/etc/apt") -> list[str]:
    """This machine's `deb` entries as one-line sources (deb822 .sources and .list files)."""
    lines: list[str] = []
    for path in sorted(glob.glob(f"{root}/sources.list.d/*.sources")):
        for para in Path(path).read_text().split("\n\n"):
            fields: dict[str, str] = {}
            key = None
            for raw in para.splitlines():
                if raw.startswith("#") or not raw.strip():
                    continue
                if raw[0] in " \t" and key:  # continuation line
                    fields[key] += "\n" + raw.strip()
                    continue
                key, _, value = raw.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                continue
            opt = ""
            signed = fields.get("signed-by", "")
            if signed.startswith("/"):
                opt = f"[signed-by={signed}] "
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    lines.append(f"deb {opt}{uri} {suite} {fields.get('components', 'main')}".strip())
    for path in [f"{root}/sources.list", *sorted(glob.glob(f"{root}/sources.list.d/*.list"))]:
        if os.path.exists(path):
            for raw in Path(path).read_text().splitlines():
                raw = raw.split("#", 1)[0].strip()
                if raw.startswith("deb "):
                    lines.append(raw)
    return lines


def _suite(entry: str) -> str:
    words = entry.split()
    if len(words) > 1 and words[1].startswith("["):  # skip the [options] block
        while not words[1].endswith("]"):
            words.pop(1)
        words.pop(1)
    return words[2]


# --- builds ------------------------------------------------------------------------------------

def base_tag() -> str:
    """The tag the base image has for the current recipe and this machine's Debian suite."""
    sources = apt_sources()
    suite = _suite(sources[0]) if sources else "unknown"
    return f"{REPO}/base:{recipe_hash(RECIPES / 'base', suite)}"


def copy_image(tag: str, src: str, dst: str) -> None:
    """Copy image `tag` from engine `src` to engine `dst` (save streamed into load)."""
    t0 = time.monotonic()
    _log(f"copy {tag}: {engine.name(src)} -> {engine.name(dst)}")
    try:
        with Progress(f"copy {tag.rpartition('/')[2]}") as bar:
            client(dst).images.load(_counted(client(src).api.get_image(tag, chunk_size=1 << 20), bar))
    except (docker.errors.DockerException, OSError) as e:
        raise ImageError(f"copying {tag} from {engine.name(src)} to {engine.name(dst)} failed: {e}") from e
    if not image_exists(tag, dst):
        raise ImageError(f"docker load on {engine.name(dst)} did not produce {tag}")
    _log(f"copied {tag} in {time.monotonic() - t0:.1f} s")
    if tag.startswith(REPO + "/"):
        _drop_stale(tag, dst)


def _counted(chunks: Iterator[bytes], bar: Progress) -> Iterator[bytes]:
    """The chunks unchanged, the MiB passed so far on the bar."""
    sent = 0
    for chunk in chunks:
        sent += len(chunk)
        bar.update(status=f"{sent >> 20} MiB")
        yield chunk


def _from_peer(tag: str, url: str) -> bool:
    """Copy `tag` to engine `url` from another live engine that has it; False if none has it."""
    for src in engine.live_hosts():
        if src != url and image_exists(tag, src):
            copy_image(tag, src, url)
            return True
    return False


def _build_base(tag: str, url: str | None = None) -> None:
    if os.geteuid() != 0:
        raise ImageError(f"{tag} is missing and building it needs root (run scripts/setup.sh as root)")
    if not shutil.which("mmdebstrap"):
        raise ImageError(f"{tag} is missing and building it needs Debian's mmdebstrap (scripts/setup.sh)")
    sources = apt_sources()
    if not sources:
        raise ImageError("no `deb` entry in /etc/apt/sources.list{,.d}: cannot tell which mirror to use")
    recipe = RECIPES / "base"
    pkgs = [ln.split("#")[0].strip() for ln in (recipe / "packages.txt").read_text().splitlines()]
    pkgs = [p for p in pkgs if p]
    with tempfile.TemporaryDirectory(prefix="openclaw-rootfs-") as tmp:
        tar = os.path.join(tmp, "rootfs.tar")
        cmd = [
            "mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar",
            f"--include={','.join(pkgs)}",
            f"--customize-hook=chroot \"$1\" /bin/sh -s < {shlex.quote(str(recipe / 'customize.sh'))}",
            _suite(sources[0]), tar, *sources,
        ]
        _log(f"mmdebstrap {_suite(sources[0])} from {', '.join(s.split()[-3] for s in sources)}")
        t0 = time.monotonic()
        code, err = _mmdebstrap(cmd)
        if code is None:
            raise ImageError(f"mmdebstrap took over {BUILD_TIMEOUT_S} s")
        if code != 0:
            raise ImageError(f"mmdebstrap failed ({code}):\n{err[-3000:]}")
        _log(f"root file system in {time.monotonic() - t0:.0f} s; docker import as {tag}")
        repo, _, version = tag.rpartition(":")
        client(url).api.import_image(
            src=tar, repository=repo, tag=version,
            changes=[
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV LANG=C.UTF-8",
                "WORKDIR /home/agent",
                'CMD ["sleep", "infinity"]',
                f"LABEL openclaw.recipe={tag}",
            ],
        )
    if not image_exists(tag, url):
        raise ImageError(f"docker import did not produce {tag}")


def _mmdebstrap(cmd: list[str]) -> tuple[int | None, str]:
    """Run mmdebstrap, its latest stderr line ("I: downloading packages...") on the progress
    line: (its exit status, or None when BUILD_TIMEOUT_S passed and it was killed; its stderr's tail)."""
    tail: deque[str] = deque(maxlen=200)
    expired = threading.Event()
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, errors="replace") as proc:

        def expire() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(BUILD_TIMEOUT_S, expire)
        timer.start()
        try:
            with Progress("mmdebstrap") as bar:
                for line in proc.stderr or ():
                    tail.append(line)
                    bar.update(status=line.strip()[:70])
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:  # interrupted while reading: stop it before the context waits on it
                proc.kill()
    return (None if expired.is_set() else code), "".join(tail)


_VAR = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(raw text, logical line) per instruction: continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    raw: list[str] = []
    for line in dockerfile.splitlines(keepends=True):
        raw.append(line)
        text = line.rstrip("\r\n")
        if text.endswith("\\"):
            continue
        logical = " ".join(r.rstrip("\r\n").rstrip("\\").strip() for r in raw
                           if not r.lstrip().startswith("#")).strip()
        out.append(("".join(raw), logical))
        raw = []
    if raw:
        out.append(("".join(raw), " ".join(r.strip().rstrip("\\") for r in raw).strip()))
    return out


def _from_parts(dockerfile: str) -> list[tuple[int, str | None, str]]:
    """(instruction index, image or None for the project's base, stage name) per FROM line that
    names an image: global ARG defaults substituted; `${BASE}` (the build argument this module
    passes), `scratch` and earlier stages give None or are left out."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    found: list[tuple[int, str | None, str]] = []
    seen_from = False
    for i, (_, line) in enumerate(_instructions(dockerfile)):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG" and not seen_from:  # only ARGs before the first FROM reach FROM lines
            for decl in rest.split():
                key, _, value = decl.partition("=")
                args[key] = value.strip("'\"")
        elif word == "FROM":
            seen_from = True
            words = [w for w in rest.split() if not w.startswith("--")]
            if not words:
                continue
            stage = words[2] if len(words) >= 3 and words[1].lower() == "as" else ""
            uses_base = bool(re.search(r"\$\{?BASE\b", words[0]))

            def value(m: re.Match) -> str:
                key = m.group(1) or m.group(3)
                return args.get(key) or (m.group(2) or "")

            image = _VAR.sub(value, words[0])
            if stage:
                stages.add(stage.lower())
            if uses_base and not args.get("BASE"):
                found.append((i, None, stage))
            elif image and image.lower() != "scratch" and image.lower() not in stages - {stage.lower()}:
                found.append((i, image, stage))
    return found


def from_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile's FROM lines name, other than the project's base (`${BASE}`),
    `scratch` and its own stages."""
    return [image for _, image, _ in _from_parts(dockerfile) if image is not None]


def image_id(tag: str, url: str | None = None) -> str | None:
    """Engine `url`'s id of image `tag`, or None where it lacks it."""
    try:
        return client(url).images.get(tag).id
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.DockerException as e:
        raise ImageError(f"Docker engine error while looking up {tag}: {e}") from e


def missing_line(image: str, dockerfile: str | os.PathLike) -> str:
    """The one line for a FROM image this machine lacks (nothing is ever pulled)."""
    return (f"{dockerfile} starts FROM {image}, which this machine does not have (images are never pulled): "
            f"load it with `docker load -i FILE.tar` (FILE.tar from `docker save {image}` where it exists)")


def layer_tag(context_dir: str | os.PathLike, name: str, base: str | None = None, *from_ids: str) -> str:
    """The tag `build_image` gives the layer from `context_dir` on `base` (None: the base image);
    `from_ids` ("image=id") for a Dockerfile whose FROM lines name images of their own."""
    return f"{REPO}/{name}:{recipe_hash(context_dir, base or base_tag(), *from_ids)}"


def build_image(context_dir: str | os.PathLike, base: str | None = None, name: str | None = None,
                url: str | None = None, substitute: str | None = None, timeout: float = BUILD_TIMEOUT_S) -> str:
    """Build (or find) a layer from `context_dir` on engine `url` (None: the primary), with no
    network, or copy it there from an engine that has it. Its Dockerfile starts either with
    `ARG BASE` / `FROM ${BASE}` (`base`, default the project's base) or FROM images the engine
    has; a FROM image it lacks is built on `substitute` instead (`base`: the project's base; or
    a local tag), and without one is an ImageError with `missing_line`. Returns its tag
    `openclaw/<name>:<hash>` (the hash covers the context, the base and each FROM image's id)."""
    ctx = Path(context_dir).resolve()
    if not (ctx / "Dockerfile").is_file():
        raise ImageError(f"{ctx} has no Dockerfile")
    url = engine.primary() if url is None else url
    name = name or ctx.name
    text = (ctx / "Dockerfile").read_text()
    parts = _from_parts(text)
    ids = {image: image_id(image, url) for _, image, _ in parts if image is not None}
    missing = [image for image, found in ids.items() if found is None]
    if missing and substitute is None:
        raise ImageError(missing_line(missing[0], ctx / "Dockerfile"))
    sub = ensure_image("base", url) if missing and substitute == "base" else substitute if missing else None
    if sub is not None and image_id(sub, url) is None:
        raise ImageError(f"the substitute base {sub} is not on this machine either")
    tag = layer_tag(ctx, name, base, *(f"{image}={found or sub}" for image, found in sorted(ids.items())))
    if image_exists(tag, url):
        return tag
    with _build_lock():
        if image_exists(tag, url) or _from_peer(tag, url):
            return tag
        if any(image is None for _, image, _ in parts):
            base = ensure_image("base", url) if base is None else base
            if not image_exists(base, url) and not _from_peer(base, url):
                raise ImageError(f"base image {base} of {tag} is on no engine that answers")
        with tempfile.TemporaryDirectory(prefix="openclaw-dockerfile-") as tmp:
            dockerfile = None
            if missing:  # the same Dockerfile with each missing FROM image replaced (outside the context)
                instrs = _instructions(text)
                for i, image, stage in parts:
                    if image in missing:
                        instrs[i] = (f"FROM {sub}" + (f" AS {stage}" if stage else "") + "\n", "")
                dockerfile = os.path.join(tmp, "Dockerfile")
                Path(dockerfile).write_text("".join(raw for raw, _ in instrs))
                _log(f"{', '.join(missing)} not here: building {ctx} on {sub}")
            _log(f"docker build --network none {ctx} -> {tag} on {engine.name(url)}")
            try:
                _docker_build(url, path=str(ctx), dockerfile=dockerfile, tag=tag, buildargs={"BASE": base} if base else None,
                              network_mode="none", pull=False, rm=True, forcerm=True, labels={"openclaw.recipe": tag},
                              timeout=timeout)
            except docker.errors.BuildError as e:
                tail = "".join(str(x.get("stream", x.get("error", ""))) for x in e.build_log)[-3000:]
                raise ImageError(f"docker build of {tag} failed: {e.msg}\n{tail}") from e
            except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
                raise ImageError(f"docker build of {tag} failed (build timeout {timeout:g} s): {e}") from e
        _drop_stale(tag, url)
    return tag


_STEP = re.compile(r"Step (\d+)/(\d+) : (.*)")


def _docker_build(url: str | None, *, tag: str, **kw: Any) -> None:
    """docker-py's `images.build`, its stream read here: each `Step n/m` the builder reports moves
    the progress bar, so a build that takes minutes shows where it is. A failed step is a
    BuildError with the log so far, as `images.build` raises it."""
    build_log: list[dict[str, Any]] = []
    with Progress(f"docker build {tag.rpartition('/')[2]}", status="sending the context") as bar:
        for chunk in client(url).api.build(tag=tag, decode=True, **kw):
            build_log.append(chunk)
            if "error" in chunk:
                raise docker.errors.BuildError(chunk["error"], build_log)
            if m := _STEP.match(str(chunk.get("stream", ""))):
                bar.update(done=int(m[1]) - 1, total=int(m[2]), status=m[3].strip()[:60])
    if not image_exists(tag, url):
        raise docker.errors.BuildError(str(build_log[-1]) if build_log else "no image", build_log)


def ensure_image(name: str = "sandbox", url: str | None = None) -> str:
    """The tag of image `name` (a folder of images/) on engine `url` (None: the primary),
    copied from another engine or built first if its recipe changed."""
    if name == "base":
        url = engine.primary() if url is None else url
        tag = base_tag()
        if not image_exists(tag, url):
            with _build_lock():
                if not image_exists(tag, url) and not _from_peer(tag, url):
                    _build_base(tag, url)
                    _drop_stale(tag, url)
        return tag
    ctx = RECIPES / name
    if not (ctx / "Dockerfile").is_file():
        known = ", ".join(recipe_names())
        raise ImageError(f"no image recipe {name!r} (images/{name}/Dockerfile); known: base, {known}")
    return build_image(ctx, name=name, url=url)


def recipe_names() -> list[str]:
    return sorted(p.parent.name for p in RECIPES.glob("*/Dockerfile"))


def _drop_stale(tag: str, url: str | None = None) -> None:
    """Untag older builds of the same image on engine `url` (ones a container still uses stay)."""
    repo = tag.rpartition(":")[0]
    for img in client(url).images.list(name=repo):
        for old in img.tags:
            if old.startswith(repo + ":") and old != tag:
                with contextlib.suppress(docker.errors.APIError):
                    client(url).images.remove(old, noprune=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.sandbox.images")
    hosts = argparse.ArgumentParser(add_help=False)
    hosts.add_argument("--host", action="append", default=[],
                       help="engine URL (repeat: the first answering one builds, the others get copies; default: the local engine)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", parents=[hosts], help="build (or find) base and the named images (default: all)")
    b.add_argument("names", nargs="*")
    sub.add_parser("list", parents=[hosts], help="print each recipe's current tag and whether it is built")
    args = ap.parse_args(argv)
    try:
        engine.set_hosts(args.host)
        if args.cmd == "build":
            for name in ["base", *(args.names or recipe_names())]:
                for url in engine.live_hosts() if args.host else [None]:
                    t0 = time.monotonic()
                    where = f" on {engine.name(url)}" if url else ""
                    print(f"{name}: {ensure_image(name, url)}{where} ({time.monotonic() - t0:.1f} s)", flush=True)
        else:
            for url in engine.live_hosts() if args.host else [None]:
                print(f"base: {base_tag()} built={image_exists(base_tag(), url)}" + (f" on {engine.name(url)}" if url else ""))
                for name in recipe_names():
                    tag = layer_tag(RECIPES / name, name)
                    print(f"{name}: {tag} built={image_exists(tag, url)}")
    except (ImageError, docker.errors.DockerException) as e:
        print(f"[images] {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
