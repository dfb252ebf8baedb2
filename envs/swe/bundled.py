"""The bundled SWE instances: small Python libraries written for this project (repos/<name>/)
with realistic bugs (bugs/<name>.yaml), turned into SWE-bench records, and one Docker image per
instance that holds the repository with only its base commit's history (snapshot.py) and an
offline pytest (a layer all instances share).

A bug is a snippet of the finished library (`fixed`) and what it looks like broken (`buggy`),
the test file(s) that catch it (`tests`) and an issue text. history.py makes the commits; the
records' patch and test_patch are `git diff base_commit initial`, split by path.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from envs.swe import history, snapshot

HERE = Path(__file__).resolve().parent
REPOS = HERE / "repos"
BUGS = HERE / "bugs"
OWNER = "openclaw"
WORKDIR = "/testbed"
# pytest and what it imports, copied from this venv into the images (docker build has no network)
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
# The Dockerfile lines that put the vendored packages on the image's python3 path (own-repo
# images, envs/swe/build.py, use them too), and /testbed after them: the tests import the
# repository's own package from there, while the eval script keeps the working directory off
# sys.path (grading.CLEAN_ENV), so nothing in /testbed shadows the stdlib or the test runner.
VENDOR_STEP = f"""COPY vendor /opt/openclaw-pytest
RUN d=$(python3 -c "import site; print(site.getsitepackages()[0])") && mkdir -p "$d" \\
    && printf '/opt/openclaw-pytest\\n{WORKDIR}\\n' > "$d/openclaw-pytest.pth" && python3 -m pytest --version
"""
# the layer every instance's image starts from; an instance's own adds only its repository
TOOLS_DOCKERFILE = "ARG BASE\nFROM ${BASE}\n" + VENDOR_STEP + f"ENV PYTHONDONTWRITEBYTECODE=1\nWORKDIR {WORKDIR}\n"
DOCKERFILE = "ARG BASE\nFROM ${BASE}\n" + f"""COPY repo.bundle /build/
RUN {snapshot.unpack_step("/build/repo.bundle", WORKDIR)} && chown -R agent:agent {WORKDIR} && rm -rf /build
"""

_image_lock = threading.Lock()
_images: dict[str, dict[str, str]] = {}  # repo name -> {instance_id: tag}, this process
builds: list[str] = []  # tags this process built (not found ready): the benchmark counts them


def repo_names() -> list[str]:
    return sorted(p.stem for p in BUGS.glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def load_bugs(name: str) -> dict[str, Any]:
    spec = yaml.safe_load((BUGS / f"{name}.yaml").read_text())
    for bug in spec["bugs"]:
        bug["id"] = str(bug["id"])
        if isinstance(bug["tests"], str):
            bug["tests"] = [bug["tests"]]
    return spec


def pytest_ids(path: Path, rel: str) -> list[str]:
    """pytest node ids of the module-level test functions in one file."""
    tree = ast.parse(path.read_text())
    return [f"{rel}::{n.name}" for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]


def _repo_records(name: str) -> list[dict[str, Any]]:
    spec = load_bugs(name)
    src = REPOS / name
    all_tests = sorted(str(p.relative_to(src)) for p in (src / "tests").glob("test_*.py"))
    with tempfile.TemporaryDirectory(prefix=f"openclaw-swe-{name}-") as tmp:
        dest = os.path.join(tmp, name)
        shas = history.build(str(src), spec["bugs"], dest)
        records = []
        for bug in spec["bugs"]:
            base, tests = shas[bug["id"]], bug["tests"]
            f2p = [t for rel in tests for t in pytest_ids(src / rel, rel)]
            p2p = [t for rel in all_tests if rel not in tests for t in pytest_ids(src / rel, rel)]
            records.append({
                "instance_id": f"{OWNER}__{name}-{bug['id']}",
                "repo": f"{OWNER}/{name}",
                "base_commit": base,
                "patch": history.git(dest, "diff", base, shas["initial"], "--", bug["file"]),
                "test_patch": history.git(dest, "diff", base, shas["initial"], "--", *tests),
                "problem_statement": bug["problem_statement"],
                "hints_text": "",
                "created_at": "2024-01-01T00:00:00Z",
                "version": str(spec["version"]),
                "environment_setup_commit": base,  # the image is set up at the base commit
                "FAIL_TO_PASS": json.dumps(f2p),
                "PASS_TO_PASS": json.dumps(p2p),
            })
        return records


@functools.lru_cache(maxsize=1)
def instances() -> tuple[dict[str, Any], ...]:
    """Every bundled instance as a SWE-bench record. Making them runs git some hundred times, so
    they are kept in a file keyed by the hash of everything they come from."""
    from envs.sandbox.images import recipe_hash

    key = recipe_hash(REPOS, Path(history.__file__).read_text(), *(p.read_text() for p in sorted(BUGS.glob("*.yaml"))))
    cache = Path(tempfile.gettempdir()) / f"openclaw-swe-records-{key}.json"
    if cache.is_file():
        return tuple(json.loads(cache.read_text()))
    records = [r for name in repo_names() for r in _repo_records(name)]
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(records))
    os.replace(tmp, cache)
    return tuple(records)


def is_bundled(record: dict[str, Any]) -> bool:
    owner, _, name = str(record.get("repo", "")).partition("/")
    return owner == OWNER and (BUGS / f"{name}.yaml").is_file()


def vendor_packages(dest: Path, packages: tuple[str, ...] = PYTEST_PACKAGES) -> None:
    """Copy `packages` (pure Python) with their metadata from this venv into folder `dest`."""
    dest.mkdir()
    for mod in packages:
        spec = importlib.util.find_spec(mod)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{mod} is not installed in this venv: the SWE images copy it from there")
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, dest / origin.parent.name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, dest / origin.name)
        # the metadata too: pluggy and pytest read their own version through importlib.metadata
        for info in origin.parent.parent.glob("*.dist-info") if origin.name == "__init__.py" else ():
            if info.name.lower().startswith(f"{mod}-") and not (dest / info.name).exists():
                shutil.copytree(info, dest / info.name)


def repo_images(name: str) -> dict[str, str]:
    """{instance_id: Docker tag} of library `name`'s instances, built on first use (each on one
    shared pytest layer; reused across processes while their content is unchanged)."""
    with _image_lock:
        if name in _images:
            return _images[name]
        base = tools_image()
        with tempfile.TemporaryDirectory(prefix=f"openclaw-swe-ctx-{name}-") as tmp:
            repo = os.path.join(tmp, "repo")
            shas = history.build(str(REPOS / name), load_bugs(name)["bugs"], repo)
            tags = {}
            for bug in load_bugs(name)["bugs"]:
                ctx = Path(tmp) / f"bug-{bug['id']}"
                ctx.mkdir()
                (ctx / "Dockerfile").write_text(DOCKERFILE)
                snapshot.bundle(repo, shas[bug["id"]], ctx / "repo.bundle")
                tags[f"{OWNER}__{name}-{bug['id']}"] = _build(ctx, f"swe-{name}-{bug['id']}", base)
        _images[name] = tags
        return tags


def tools_image() -> str:
    """The shared layer under every bundled instance's image: the base with the vendored pytest."""
    from envs.sandbox import images

    with tempfile.TemporaryDirectory(prefix="openclaw-swe-tools-") as tmp:
        tools = Path(tmp) / "tools"
        tools.mkdir()
        (tools / "Dockerfile").write_text(TOOLS_DOCKERFILE)
        vendor_packages(tools / "vendor")
        return _build(tools, "swe-pytest", images.ensure_image("base"))


def _build(ctx: Path, name: str, base: str) -> str:
    from envs.sandbox import images

    existed = images.image_exists(images.layer_tag(ctx, name, base))
    tag = images.build_image(ctx, base=base, name=name)
    if not existed:
        builds.append(tag)
    return tag


def instance_image(record: dict[str, Any]) -> str:
    """The Docker tag of a bundled record's image. KeyError for an id the library lacks."""
    name = str(record["repo"]).split("/", 1)[1]
    tags = repo_images(name)
    if record["instance_id"] not in tags:
        raise KeyError(f"{record['instance_id']} is not a bundled instance of {name} (those: {', '.join(tags)})")
    return tags[record["instance_id"]]
