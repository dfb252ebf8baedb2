"""Bug synthesis (the SWE-smith recipe): SWE-bench instances made by breaking a tested repository.

    python -m envs.swe.synth --out FILE [--seed N] [--per-function K]          # the bundled libraries
    python -m envs.swe.synth --repo PATH --name NAME --out FILE [--install CMD] [--wheels DIR]
        [--base-image TAG] [--test-cmd CMD] [--seed N] [--per-function K]      # your own repository

Per function of the library code (not tests), candidate mutants (mutate.py: operator swap,
off-by-one, wrong constant, removed if-branch, swapped return) are tried in an order drawn from
the seed; a mutant is kept when the test suite still runs (collects, finishes in time) and at
least one test that passes on the original fails: those become FAIL_TO_PASS, the tests that still
pass PASS_TO_PASS. At most K are kept per function. The gold patch is the reverse diff (mutant ->
original); the test patch is empty (the failing tests are in the repository, as in SWE-smith);
the problem statement names the failing tests and their assertion messages, not the change.

The tests run here, in a copy of the repository, with this venv's python (mutant_tests.py: one
pytest process per copy, on 2 workers); an own repository's tests must therefore run here too.
Each instance's base commit is a parentless commit of the mutated tree in a repository kept with
the records under $OPENCLAW_CACHE/swe_synth/<name>-<key> (key: the repository's content and these
settings), so a second call with the same inputs reads them back at once. Its image (built on
first use, `instance_image`) holds that commit alone, on the bundled instances' pytest layer or,
for an own repository, on the image `envs.swe.build` makes of it (the install done at HEAD).
`env=swe env.instances=synth` runs the bundled libraries' instances; `env.instances=FILE` a file
this command wrote.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from envs.swe import bundled, grading, history, mutate, snapshot
from envs.swe.mutant_tests import TestRun, Worker, copy_repo

DEFAULT_SEED = 0
DEFAULT_PER_FUNCTION = 10
MAX_TRIES_PER_FUNCTION = 40  # candidates tried per function at most (each is one test run)
SHOWN_TESTS = 3              # failing tests the problem statement names
USER = "agent"
RECORDS_VERSION = "1"        # part of the cache key: raise it when what this file makes of the mutants changes
# An own repository's image holds HEAD in /testbed, owned by the agent: root's git refuses such a
# folder, so it goes to root until the base commit alone replaces its history.
DOCKERFILE = "ARG BASE\nFROM ${BASE}\nUSER root\n" + f"""COPY repo.bundle /build/
RUN rm -rf {grading.WORKDIR}/.git && chown -R root:root {grading.WORKDIR} \\
    && {snapshot.unpack_step("/build/repo.bundle", grading.WORKDIR)} \\
    && chown -R {USER}:{USER} {grading.WORKDIR} && rm -rf /build
"""
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".tox", ".venv", "venv", "build", "dist"}
_image_lock = threading.Lock()
_images: dict[str, str] = {}  # instance_id -> tag, this process


class SynthError(Exception):
    """Synthesis cannot go on; the message is the one line the CLI prints."""


def cache_base() -> Path:
    from agent.policy.models import cache_base as base

    return base() / "swe_synth"


def _py_files(root: Path) -> list[str]:
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith((".egg-info", ".dist-info")))
        out += [str((Path(dirpath) / f).relative_to(root)) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def split_files(root: Path) -> tuple[list[str], list[str]]:
    """(library files to mutate, test files to run) of a repository's work tree."""
    files = _py_files(root)
    tests = [f for f in files if Path(f).name.startswith("test_") or f.endswith("_test.py")]
    code = [f for f in files if not grading.is_test_infra(f) and Path(f).name not in ("setup.py", "conftest.py")]
    return code, tests


def problem_statement(name: str, run: TestRun, failing: list[str]) -> str:
    """The issue: which tests fail and how (their assertion messages), never the change."""
    lines = [f"Tests of {name} fail", "", f"{len(failing)} test{'s' * (len(failing) != 1)} of the test suite "
             f"fail{'s' * (len(failing) == 1)} on the current code:", ""]
    for t in failing[:SHOWN_TESTS]:
        lines.append(f"- `{t}`")
        msg = run.messages.get(t, "").strip()
        if msg:
            lines += ["  ```", *("  " + ln[:200] for ln in msg.splitlines()), "  ```"]
    if len(failing) > SHOWN_TESTS:
        lines.append(f"- and {len(failing) - SHOWN_TESTS} more")
    lines += ["", "The tests are right; the library code has a bug. Fix it so that these tests pass and the "
              "others keep passing."]
    return "\n".join(lines) + "\n"


def _order(mutants: list[mutate.Mutant], seed: int, function: str, path: str) -> list[mutate.Mutant]:
    rng = np.random.default_rng([seed, zlib.crc32(f"{path}:{function}".encode())])
    return [mutants[int(i)] for i in rng.permutation(len(mutants))]


def find_bugs(root: Path, seed: int = DEFAULT_SEED, per_function: int = DEFAULT_PER_FUNCTION,
              workers: int = 2, log=print) -> tuple[TestRun, list[tuple[mutate.Mutant, TestRun]]]:
    """The original's test run and the kept mutants with their test runs, in a fixed order (by
    file, function, then the seed's order), whatever the workers' timing."""
    code, tests = split_files(root)
    if not tests:
        raise SynthError(f"{root}: no test files (test_*.py, *_test.py) to tell a bug by")
    with tempfile.TemporaryDirectory(prefix="openclaw-swe-synth-") as tmp:
        copies = []
        for i in range(max(1, workers)):
            copy_repo(root, Path(tmp) / f"w{i}")
            copies.append(Worker(Path(tmp) / f"w{i}", tests))
        try:
            copies[0].run(tests[0], None, timeout=300)  # the first run pays pytest's imports
            t0 = time.monotonic()
            base = copies[0].run(tests[0], None, timeout=300)
            took = time.monotonic() - t0
            passing = sorted(t for t, s in base.items() if s == "PASSED")
            if base.broken or not passing:
                raise SynthError(f"{root}: the tests do not run here ({base.broken or 'none passes'}); "
                                 "they run with this venv's python, in a copy of the repository")
            timeout = max(5.0, 20 * took)  # a mutant that loops forever costs this much
            jobs = [(path, fn, ms) for path in code
                    for fn, ms in mutate.mutants(path, (root / path).read_text(encoding="utf-8")).items()]
            log(f"synth: {root.name}: {sum(len(ms) for *_, ms in jobs)} candidate mutants in {len(jobs)} functions; "
                f"{len(passing)} tests pass on the original ({took:.1f} s)")
            free = list(copies)
            lock = threading.Lock()

            def one(job: tuple[str, str, list[mutate.Mutant]]) -> list[tuple[mutate.Mutant, TestRun]]:
                path, fn, ms = job
                with lock:
                    worker = free.pop()
                try:
                    kept = []
                    for m in _order(ms, seed, fn, path)[:MAX_TRIES_PER_FUNCTION]:
                        run = worker.run(path, m.text, timeout)
                        ran = not run.broken and all(t in run for t in passing)
                        if ran and any(run[t] != "PASSED" for t in passing):
                            kept.append((m, run))
                            if len(kept) >= per_function:
                                break
                    return kept
                finally:
                    with lock:
                        free.append(worker)

            with concurrent.futures.ThreadPoolExecutor(len(copies)) as pool:
                found = [k for ks in pool.map(one, jobs) for k in ks]
        finally:
            for w in copies:
                w.close()
    return base, found


def _instance_id(owner: str, name: str, m: mutate.Mutant) -> str:
    digest = hashlib.sha1(f"{m.path}\0{m.function}\0{m.kind}\0{m.line}\0{m.text}".encode()).hexdigest()[:10]
    return f"{owner}__{name}-synth-{digest}"


def make_records(root: Path, name: str, repo: str, owner: str, dest: Path, final: Path, base: TestRun,
                 found: list[tuple[mutate.Mutant, TestRun]], fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Commit the original and one parentless commit per mutant into the repository `dest`
    (created; the records name it at `final`, where it is moved) and return the SWE-bench
    records, with `fields` added (an own repository's test_cmd, base_image)."""
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns(*_SKIP_DIRS, "*.pyc"))
    history.git(str(dest), "init", "-q", "-b", history.INITIAL_BRANCH)
    history.git(str(dest), "add", "-A")
    history.git(str(dest), "commit", "-q", "-m", "Initial version")
    initial = history.git(str(dest), "rev-parse", "HEAD").strip()
    passing = sorted(t for t, s in base.items() if s == "PASSED")
    records = []
    for m, run in found:
        iid = _instance_id(owner, name, m)
        history.git(str(dest), "checkout", "-q", "--orphan", f"synth-{iid.rsplit('-', 1)[1]}", initial)
        (dest / m.path).write_text(m.text, encoding="utf-8")
        history.git(str(dest), "commit", "-q", "-a", "-m", "Current version")
        sha = history.git(str(dest), "rev-parse", "HEAD").strip()
        f2p = [t for t in passing if run[t] != "PASSED"]
        records.append({
            "instance_id": iid,
            "repo": repo,
            "base_commit": sha,
            "patch": history.git(str(dest), "diff", sha, initial, "--", m.path),
            "test_patch": "",
            "problem_statement": problem_statement(name, run, f2p),
            "hints_text": "",
            "created_at": "2024-01-01T00:00:00Z",
            "version": "synth",
            "environment_setup_commit": sha,
            "FAIL_TO_PASS": json.dumps(f2p),
            "PASS_TO_PASS": json.dumps([t for t in passing if run[t] == "PASSED"]),
            "user": USER,
            "synth": {"git": str(final), "file": m.path, "function": m.function, "kind": m.kind, "line": m.line},
            **fields,
        })
    history.git(str(dest), "checkout", "-q", history.INITIAL_BRANCH)
    return records


def synthesize(root: Path, name: str, repo: str, owner: str, key: str, seed: int, per_function: int,
               fields: dict[str, Any] | None = None, log=print) -> list[dict[str, Any]]:
    """The records of `root`'s synthesized bugs, read from the cache when `key` was made before."""
    cached = cache_base() / f"{name}-{key}"
    if (cached / "records.json").is_file():
        return json.loads((cached / "records.json").read_text())
    t0 = time.monotonic()
    base, found = find_bugs(root, seed, per_function, log=log)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=cached.parent))
    try:  # made aside and renamed: a cache entry is whole or absent
        records = make_records(root, name, repo, owner, tmp / "repo", cached / "repo", base, found, fields or {})
        (tmp / "records.json").write_text(json.dumps(records))
        if not cached.exists():
            tmp.rename(cached)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"synth: {name}: kept {len(records)} instances in {time.monotonic() - t0:.0f} s (cached in {cached})")
    return records


def _key(*parts: str) -> str:
    """What decides a repository's instances: the given parts (its content or commit, the
    settings), the code that finds them and RECORDS_VERSION."""
    from envs.swe import mutant_tests

    h = hashlib.sha256()
    for part in (*parts, RECORDS_VERSION, *(Path(m.__file__).read_text() for m in (mutate, mutant_tests))):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


_records_lock = threading.Lock()  # a run builds its envs in threads: one synthesis, not one each


@functools.lru_cache(maxsize=4)
def _bundled_records(seed: int, per_function: int) -> tuple[dict[str, Any], ...]:
    from envs.sandbox.images import recipe_hash

    records = []
    for name in bundled.repo_names():
        src = bundled.REPOS / name
        key = _key(recipe_hash(src), f"seed={seed}", f"per_function={per_function}")
        records += synthesize(src, name, f"{bundled.OWNER}/{name}", bundled.OWNER, key, seed, per_function,
                              log=lambda s: print(s, file=sys.stderr, flush=True))
    return tuple(records)


def bundled_records(seed: int = DEFAULT_SEED, per_function: int = DEFAULT_PER_FUNCTION) -> list[dict[str, Any]]:
    """The synthesized instances of the four bundled libraries (cached; the first call runs the
    tests of every candidate mutant: about 10 minutes on 2 busy cores)."""
    with _records_lock:
        return list(_bundled_records(int(seed), int(per_function)))


def is_synth(record: dict[str, Any]) -> bool:
    return isinstance(record.get("synth"), dict) and not any(record.get(k) for k in ("image", "image_name", "docker_image"))


def instance_image(record: dict[str, Any]) -> str:
    """The Docker tag of a synthesized record's image, built on first use: its base commit alone
    on the layer it was synthesized for. Raises KeyError when its repository is gone."""
    from envs.sandbox import images

    iid = str(record["instance_id"])
    with _image_lock:
        if iid in _images:
            return _images[iid]
        info = record["synth"]
        git_dir = Path(info["git"])
        if not (git_dir / ".git").is_dir():
            raise KeyError(f"{iid}: its synthesized repository {git_dir} is gone; synthesize again (python -m envs.swe.synth)")
        base = record.get("base_image") or bundled.tools_image()
        with tempfile.TemporaryDirectory(prefix="openclaw-swe-synth-ctx-") as tmp:
            ctx = Path(tmp)
            (ctx / "Dockerfile").write_text(DOCKERFILE)
            snapshot.bundle(git_dir, str(record["base_commit"]), ctx / "repo.bundle")
            name = str(record["repo"]).split("/")[-1]
            _images[iid] = images.build_image(ctx, base=base, name=f"swe-synth-{name}-{iid.rsplit('-', 1)[1]}")
        return _images[iid]


# ---- own repositories -------------------------------------------------------------------------
def own_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Synthesize on a local git repository at HEAD; its image (envs.swe.build's, the install run
    at HEAD) is built first, so every instance image is one small layer on it."""
    from envs.swe import build

    if not build.NAME.match(args.name):
        raise SynthError(f"--name {args.name!r}: use lower-case letters, digits, '.', '_' and '-' (a Docker name)")
    source = Path(args.repo)
    with tempfile.TemporaryDirectory(prefix=f"openclaw-swe-synth-{args.name}-") as tmp:
        mirror = Path(tmp) / "src.git"
        try:
            build._clone(source, mirror)
            head = build._commit(source if source.is_dir() else mirror, "HEAD", "--repo")
            work = Path(tmp) / args.name
            build._git(Path(tmp), "clone", "-q", str(mirror), str(work), what="cannot check out HEAD")
            build._git(work, "checkout", "-q", head, what="cannot check out HEAD")
            key = _key(head, f"seed={args.seed}", f"per_function={args.per_function}",
                       args.install or "", args.test_cmd, args.base_image or "")
            ctx = Path(tmp) / "ctx"
            build._context(ctx, mirror, head, args.install or "true", Path(args.wheels) if args.wheels else None)
            image, _ = build.own_image(ctx, args.name, args.base_image, args.install or "true", args.replace)
        except build.BuildError as e:
            raise SynthError(str(e)) from None
        shutil.rmtree(work / ".git")
        return synthesize(work, args.name, f"local/{source.resolve().name.removesuffix('.bundle').removesuffix('.git')}",
                          "local", key, args.seed, args.per_function,
                          fields={"base_image": image, "test_cmd": args.test_cmd})


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m envs.swe.synth", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSONL file the records go to (replaced)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="which mutants are tried first (default %(default)s)")
    ap.add_argument("--per-function", type=int, default=DEFAULT_PER_FUNCTION,
                    help="instances kept per function at most (default %(default)s)")
    ap.add_argument("--repo", help="your own git repository (its top folder) or bundle; default: the bundled libraries")
    ap.add_argument("--name", help="with --repo: the instances' name prefix and image name openclaw/swe-own-NAME")
    ap.add_argument("--install", help='with --repo: run in /testbed at image build, offline, e.g. "pip install -e ."')
    ap.add_argument("--wheels", help="with --repo: a folder of wheels the install may use")
    ap.add_argument("--base-image", help="with --repo: a local image with python3, git and bash")
    ap.add_argument("--test-cmd", default=grading.DEFAULT_TEST_CMD, help="with --repo: runs the test files in grading")
    ap.add_argument("--replace", action="store_true", help="with --repo: rebuild an image of the same name")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.per_function < 1:
        print("envs.swe.synth: --per-function must be at least 1", file=sys.stderr)
        return 1
    if args.repo and not args.name:
        print("envs.swe.synth: --repo needs --name", file=sys.stderr)
        return 1
    try:
        records = own_records(args) if args.repo else bundled_records(args.seed, args.per_function)
    except SynthError as e:
        print(f"envs.swe.synth: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("envs.swe.synth: interrupted", file=sys.stderr)
        return 130
    if not records:
        print("envs.swe.synth: no mutant broke a test: no instances", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"wrote {out} ({len(records)} instances); run them with: python -m experiments.run env=swe env.instances={out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
