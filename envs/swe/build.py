"""A SWE-bench instance on your own repository: its image and its record.

    python -m envs.swe.build --repo PATH|BUNDLE --name NAME --fix REF [--base-commit REF]
        [--install "pip install -e ."] [--test-cmd CMD] [--problem TEXT | --problem-file FILE]
        [--wheels DIR] [--base-image TAG] [--out FILE] [--replace]

The repository (a git work tree or a `git bundle` file) goes into an image at --base-commit
(default HEAD) with only the history up to it, so the fix is nowhere in the image. The fix is
`git diff BASE FIX` (or a diff file, --patch): its test files and test infrastructure (by the
names grading.py reverts) become the test patch, the rest the gold patch. The image is
`docker build --network none` on the sandbox base (or --base-image, any local image with
python3, git and bash), with pytest, pip and setuptools copied from this venv and pip set to
install offline from --wheels (no index, no build isolation), then --install runs in /testbed
as root; episodes run as the user `agent` (made if the base lacks it), who owns /testbed.
FAIL_TO_PASS and PASS_TO_PASS come from running the test patch's files before and after the
gold patch with grading.grade (SWE-bench's validation), and the finished record is graded once
more with the gold patch, which must resolve it (else the image just built is removed). The record (instance_id NAME, `image`, `user`,
`test_cmd`) is appended to --out, which `env=swe env.instances=FILE` reads.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envs.swe import bundled, grading, snapshot

NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
IMAGE_PREFIX = "swe-own-"  # openclaw/swe-own-<name>: apart from the bundled swe-<library>-<bug> images
USER = "agent"
TOOL_PACKAGES = bundled.PYTEST_PACKAGES + ("pip", "setuptools", "_distutils_hack")
WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")
PIP_CONF = """[global]
no-index = true
find-links = /opt/openclaw-wheels
break-system-packages = true
disable-pip-version-check = true
root-user-action = ignore
# pip's inverted boolean: false turns build isolation off, so builds use the vendored setuptools
no-build-isolation = false
"""
INSTALL_FAILED = "openclaw-install-failed"
NEEDS_BASE = "openclaw-base-lacks"
DOCKERFILE = "ARG BASE\nFROM ${BASE}\nUSER root\n" + f"""RUN command -v python3 && command -v git && command -v bash \\
    || {{ echo "{NEEDS_BASE} python3, git or bash"; exit 1; }}
""" + bundled.VENDOR_STEP + f"""COPY pip.conf /etc/pip.conf
COPY wheels /opt/openclaw-wheels
RUN for p in pip pip3; do command -v $p || {{ printf '#!/bin/sh\\nexec python3 -m pip "$@"\\n' > /usr/local/bin/$p \\
    && chmod 755 /usr/local/bin/$p; }}; done && python3 -m pip --version \\
    && {{ id -u {USER} || useradd --create-home --uid 1000 --shell /bin/bash {USER}; }}
COPY repo.bundle install.sh /build/
RUN {snapshot.unpack_step("/build/repo.bundle", grading.WORKDIR)}
WORKDIR {grading.WORKDIR}
RUN bash -e /build/install.sh > /build/install.log 2>&1 \\
    || {{ rc=$?; tail -n 20 /build/install.log; echo "{INSTALL_FAILED}: exit $rc"; exit 1; }}
RUN chown -R {USER}:{USER} {grading.WORKDIR} && rm -rf /build
ENV PYTHONDONTWRITEBYTECODE=1
"""
# What pip (or git) says when it needed an index or a host: the build has no network.
_NETWORK = re.compile(r"No matching distribution found for \S+|Could not find a version that satisfies the requirement \S+"
                      r"|Temporary failure in name resolution|Network is unreachable|Could not resolve host: \S+"
                      r"|Failed to establish a new connection")
# markers at the start of an output line (the build log also echoes each step's command)
_EXIT = re.compile(rf"(?m)^{INSTALL_FAILED}: exit (\d+)")
_LACKS = re.compile(rf"(?m)^{NEEDS_BASE}")


class BuildError(Exception):
    """Input or a step that cannot go on; the message is the one line the CLI prints."""


def _git(repo: str | Path, *args: str, what: str, timeout: float = 600) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:  # git's first complaint says most
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        raise BuildError(f"{what} (git: {lines[0]})" if lines else what)
    return proc.stdout


def _clone(source: Path, dest: Path) -> None:
    """A mirror of `source` (a work tree, a bare repository or a bundle) in `dest`."""
    if not source.exists():
        raise BuildError(f"--repo {source}: no such file or folder")
    if source.is_dir():  # a work tree's top, or a bare repository: not a folder inside either
        where = subprocess.run(["git", "-C", str(source), "rev-parse", "--is-bare-repository", "--show-toplevel"],
                               capture_output=True, text=True, timeout=60).stdout.splitlines()
        if not where or (where[0] != "true" and (len(where) < 2 or Path(where[1]).resolve() != source.resolve())):
            raise BuildError(f"--repo {source} is not the top folder of a git repository")
    _git(dest.parent, "clone", "-q", "--mirror", str(source.resolve()), str(dest),
         what=f"--repo {source} is neither a git repository nor a git bundle")


def _commit(repo: Path, ref: str, flag: str) -> str:
    out = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", what=f"{flag} {ref}: no such commit")
    return out.strip()


def split_patch(diff: str) -> tuple[str, str]:
    """(gold patch, test patch) of a git diff: a file goes to the test patch when grading would
    put it back to base_commit anyway (grading.is_test_infra)."""
    blocks = re.split(r"(?m)^(?=diff --git )", diff)
    code, tests = [], []
    for block in (b for b in blocks if b.startswith("diff --git ")):
        (tests if any(grading.is_test_infra(p) for p in grading.patch_files(block)) else code).append(block)
    return "".join(code), "".join(tests)


def _context(ctx: Path, mirror: Path, base: str, install: str, wheels: Path | None) -> None:
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    (ctx / "pip.conf").write_text(PIP_CONF)
    (ctx / "install.sh").write_text(install + "\n")
    bundled.vendor_packages(ctx / "vendor", TOOL_PACKAGES)
    (ctx / "wheels").mkdir()
    if wheels is not None:
        if not wheels.is_dir():
            raise BuildError(f"--wheels {wheels}: no such folder")
        for w in sorted(wheels.iterdir()):
            if w.is_file() and w.name.endswith(WHEEL_SUFFIXES):
                shutil.copy2(w, ctx / "wheels" / w.name)
    # only the history up to base: nothing later (the fix above all) is in the image
    try:
        snapshot.bundle(mirror, base, ctx / "repo.bundle")
    except RuntimeError as e:
        raise BuildError(f"cannot bundle the history up to the base commit (git: {e})") from None


def _build_error(e: Exception, install: str) -> BuildError:
    """One line from a failed build: the install's own words when it was the install."""
    text = str(e)
    if _LACKS.search(text):
        return BuildError("--base-image lacks python3, git or bash (all three are needed in the image)")
    failed = _EXIT.search(text)
    if not failed:
        return BuildError(f"docker build failed: {text.strip().splitlines()[0]}")
    net = _NETWORK.search(text)
    if net:
        return BuildError(f"the install command needs the network ({net.group(0)}); images are built offline: put "
                          "wheels of what it installs in a folder and pass --wheels DIR")
    lines = [ln for ln in text[:failed.start()].splitlines() if ln.strip() and not ln.startswith(("Step ", " ---> "))]
    last = lines[-1].strip() if lines else ""
    return BuildError(f"the install command {install!r} failed (exit {failed.group(1)}): {last}")


def own_image(ctx: Path, name: str, base_image: str | None, install: str, replace: bool) -> tuple[str, bool]:
    """Build the context's image as openclaw/swe-own-<name>: (its tag, whether this call built
    it). Another build under that name is a clash unless `replace` (the new build untags it)."""
    import docker

    from envs.sandbox import images
    from envs.sandbox.engine import client

    try:
        base = base_image or images.ensure_image("base")
        if base_image and not images.image_exists(base_image):
            raise BuildError(f"--base-image {base_image} is not on this Docker engine (docker load it first)")
        tag = images.layer_tag(ctx, IMAGE_PREFIX + name, base)
        others = [t for img in client().images.list(name=tag.rpartition(":")[0]) for t in img.tags if t != tag]
        if others and not replace:
            raise BuildError(f"--name {name}: image {others[0]} exists from another build (pass --replace, or another --name)")
        existed = images.image_exists(tag)
        return images.build_image(ctx, base=base, name=IMAGE_PREFIX + name), not existed
    except images.ImageError as e:
        raise _build_error(e, install) from None
    except docker.errors.DockerException as e:
        raise BuildError(f"no Docker engine answers ({e})") from None


def _grade(record: dict[str, Any], patch: str, image: str) -> grading.Grade:
    from envs.sandbox import Limits, SandboxError, open_sandbox

    try:  # pool_size 0: no warm container outlives the grading
        with open_sandbox("docker", image, Limits(), workdir=grading.WORKDIR, user=USER, pool_size=0) as sb:
            return grading.grade(sb, record, patch, image)
    except (SandboxError, RuntimeError) as e:
        raise BuildError(f"grading in {image} failed: {str(e).splitlines()[0]}") from None


def _last_line(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return lines[-1] if lines else "(empty log)"


def derive_tests(record: dict[str, Any], patch: str, image: str) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS: the test patch's tests that pass only with the gold patch,
    and those that pass with and without it."""
    probe = {**record, "FAIL_TO_PASS": [], "PASS_TO_PASS": []}
    before = _grade(probe, "", image)
    if not before.statuses:
        raise BuildError(f"the tests gave no result at the base commit with the test patch: {_last_line(before.log)}")
    after = _grade(probe, patch, image)
    if not after.patch_applied:
        raise BuildError("the gold patch does not apply at the base commit")
    fixed = [t for t in after.statuses if grading.passed(t, after.statuses)]
    f2p = sorted(t for t in fixed if not grading.passed(t, before.statuses))
    p2p = sorted(t for t in fixed if grading.passed(t, before.statuses))
    if not f2p:
        raise BuildError(f"no test fails before the fix and passes after it ({len(p2p)} pass both ways; with "
                         "`pip install .` rather than `-e` the tests do not see the source's changes)")
    return f2p, p2p


def _read_out(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    from envs.swe.instances import InstanceError, load_instances

    try:
        return load_instances(out)
    except InstanceError as e:
        raise BuildError(f"--out {out}: {e}") from None


def make_instance(args: argparse.Namespace) -> dict[str, Any]:
    """Check the input, build the image, derive the tests and return the record (see the module
    docstring). Raises BuildError."""
    if not NAME.match(args.name):
        raise BuildError(f"--name {args.name!r}: use lower-case letters, digits, '.', '_' and '-' (a Docker name)")
    if args.patch and not (args.problem or args.problem_file):
        raise BuildError("--patch needs --problem or --problem-file (the issue the agent is given)")
    out = Path(args.out)
    if not args.replace and any(r["instance_id"] == args.name for r in _read_out(out)):
        raise BuildError(f"--name {args.name}: {out} already has that instance (pass --replace, or another --name)")
    source = Path(args.repo)
    with tempfile.TemporaryDirectory(prefix=f"openclaw-swe-own-{args.name}-") as tmp:
        mirror = Path(tmp) / "src.git"
        _clone(source, mirror)
        # refs as the user sees them: a work tree's HEAD, branches and tags; else the bundle's
        where = source if source.is_dir() else mirror
        base = _commit(where, args.base_commit, "--base-commit")
        fix = None
        if args.patch:
            if not Path(args.patch).is_file():
                raise BuildError(f"--patch {args.patch}: no such file")
            diff = Path(args.patch).read_text()
        else:
            fix = _commit(where, args.fix, "--fix")
            _git(mirror, "cat-file", "-e", fix, what=f"--fix {args.fix} is not in the repository's history")
            diff = _git(mirror, "diff", "--no-renames", "--binary", base, fix, what="cannot diff the base commit and the fix")
        if not diff.strip():
            raise BuildError(f"the fix ({args.fix or args.patch}) changes nothing at the base commit")
        patch, test_patch = split_patch(diff)
        if not patch or not test_patch:
            raise BuildError(f"the fix must change code and tests: it touches {'no test file' if not test_patch else 'only tests'}"
                             " (a test file is test_*.py, *_test.py, conftest.py or anything under tests/, test/, testing/)")
        problem = _problem(args, mirror, fix)
        t0 = time.monotonic()
        ctx = Path(tmp) / "ctx"
        _context(ctx, mirror, base, args.install or "true", Path(args.wheels) if args.wheels else None)
        image, built = own_image(ctx, args.name, args.base_image, args.install or "true", args.replace)
        created = _git(mirror, "log", "-1", "--format=%cI", base, what="cannot read the base commit's date").strip()
    record = {
        "instance_id": args.name,
        "repo": f"local/{source.resolve().name.removesuffix('.bundle').removesuffix('.git')}",
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": problem,
        "hints_text": "",
        "created_at": created,
        "version": "0",
        "environment_setup_commit": base,
        "image": image,
        "user": USER,
        "test_cmd": args.test_cmd,
    }
    try:
        f2p, p2p = derive_tests(record, patch, image)
        record.update(FAIL_TO_PASS=json.dumps(f2p), PASS_TO_PASS=json.dumps(p2p))
        gold = _grade(record, patch, image)
        if not gold.resolved:
            raise BuildError("the gold patch does not resolve the finished instance (flaky tests?): "
                             + gold.summary().splitlines()[-1])
    except BaseException:  # no instance: an image built for it would only block the next try's name
        if built:
            from envs.sandbox import images

            images.remove_image(image)
        raise
    print(f"{args.name}: {image} ({time.monotonic() - t0:.0f} s); FAIL_TO_PASS {len(f2p)}, PASS_TO_PASS {len(p2p)}; "
          "the gold patch resolves it", flush=True)
    return record


def _problem(args: argparse.Namespace, mirror: Path, fix: str | None) -> str:
    """The issue text: --problem-file, --problem, else the fix commit's message."""
    if args.problem_file:
        path = Path(args.problem_file)
        if not path.is_file():
            raise BuildError(f"--problem-file {path}: no such file")
        return path.read_text()
    if args.problem:
        return args.problem
    return _git(mirror, "log", "-1", "--format=%B", fix, what="cannot read the fix's message").strip()


def write_record(out: Path, record: dict[str, Any]) -> int:
    """Append `record` to the JSONL file `out`, replacing one with the same instance_id; the count."""
    rows = [r for r in _read_out(out) if r["instance_id"] != record["instance_id"]] + [record]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(out)
    return len(rows)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m envs.swe.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="a git repository (its top folder) or a git bundle file")
    ap.add_argument("--name", required=True, help="the instance id, and the image's name openclaw/swe-own-NAME")
    fix = ap.add_mutually_exclusive_group(required=True)
    fix.add_argument("--fix", help="a commit (branch, tag, sha) whose diff from the base is the fix plus its tests")
    fix.add_argument("--patch", help="a diff file: the fix plus its tests, applying at the base commit")
    ap.add_argument("--base-commit", default="HEAD", help="the commit the agent starts from (default HEAD)")
    ap.add_argument("--install", help='run in /testbed at image build, offline, e.g. "pip install -e ."')
    ap.add_argument("--test-cmd", default=grading.DEFAULT_TEST_CMD,
                    help="runs the test files (appended); must print pytest -rA lines (default: %(default)s)")
    problem = ap.add_mutually_exclusive_group()
    problem.add_argument("--problem", help="the issue text the agent gets (default: the fix commit's message)")
    problem.add_argument("--problem-file", help="a file with the issue text")
    ap.add_argument("--wheels", help="a folder of wheels (and sdists) the install may use; pip has no index")
    ap.add_argument("--base-image", help="a local image with python3, git and bash (default: the sandbox base, Debian's python3)")
    ap.add_argument("--out", default="swe_instances.jsonl", help="the JSONL file the record goes to (default: %(default)s)")
    ap.add_argument("--replace", action="store_true", help="replace an instance and image of the same name")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        record = make_instance(args)
    except BuildError as e:
        print(f"envs.swe.build: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("envs.swe.build: interrupted", file=sys.stderr)
        return 130
    n = write_record(Path(args.out), record)
    print(f"wrote {args.out} ({n} instance{'s' * (n != 1)}); run it with: python -m experiments.run env=swe "
          f"env.instances={args.out} policy=oracle mode=eval")
    return 0


if __name__ == "__main__":
    from envs.sandbox import sweeper

    sweeper.sigterm_as_sigint()  # SIGTERM stops a build or a grading run as Ctrl-C does, cleaning up
    raise SystemExit(main())
