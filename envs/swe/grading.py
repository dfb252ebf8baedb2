"""Grade a patch the SWE-bench way, offline, with the `swebench` package's own pieces.

In a fresh sandbox from the instance's image: check out base_commit, apply the model patch
(`git apply`, then `patch --fuzz` as SWE-bench does), put every piece of test infrastructure the
patch touched back to base_commit (`restore_test_infra`), run the eval script (apply the test
patch, run the test files between swebench's output markers, record the test command's exit
code) in a clean environment, and hand the log to `swebench.harness.grading.get_eval_report`,
which parses it with the instance's log parser (pytest by default) and decides FAIL_TO_PASS /
PASS_TO_PASS resolution.

Test infrastructure is whatever decides how tests run or report rather than what they test, so
a patch may not change it (upstream SWE-bench grades a patch that adds a conftest.py forcing
every report to "passed" as resolved). Reverted: the files the test patch or the tests' ids
name; test files by path (test_*.py, *_test.py, anything under a tests/, test/ or testing/
folder); conftest.py, pytest.ini, .pytest.ini, tox.ini, sitecustomize.py, usercustomize.py,
*.pth and *.pyc at any depth; *.egg-info/ and *.dist-info/ (their entry points load pytest
plugins); and setup.cfg / pyproject.toml as whole files when either side has a pytest section
([tool:pytest], [pytest], [tool.pytest...]): a section cannot be reverted alone without parsing
the format, and a fix rarely needs to change such a file together with its test settings. The
rest of such a file (packaging, dependencies) stays the agent's when it has no pytest section.

Nor may a patch put a module in front of the test runner: the eval script runs with
PYTHONSAFEPATH=1 (CLEAN_ENV), so `python3 -m pytest` in /testbed does not put the working
directory first on sys.path, where a /testbed/pytest.py or json.py would run instead of pytest or
the stdlib (images built here append /testbed to sys.path after site-packages instead, so the
tests still import the repository's package). Python < 3.11 ignores the variable, so a module the
patch adds at the top of the repository (or of src/) under the name of a stdlib module or a test
runner package (`SHADOWED`) is reverted too, which also covers a name the image lacks (readline).
What remains out of reach: source code the tests import can still patch the test framework at
import time (docs/threat_model.md).

What is used from swebench 5.0.2 and why not more:
- `swebench.types.TestSpec` is built here directly. `harness.utils.make_test_spec` builds the
  same dataclass from the same fields, but its module imports `datasets` (and the `harness`
  package's __init__ imports `modal`) at import time: neither is needed to grade.
- `harness.grading.get_eval_report` (-> get_logs_eval, the log parser registry,
  get_eval_tests_report, get_resolution_status) and `harness.constants` markers are used as they
  are. To import them without running `swebench/harness/__init__.py`, `swebench.harness` is
  registered as a bare namespace package first (only if nothing imported it before).
- `run_instance` is not used: it drives its own containers; ours come from the sandbox pool.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
import tempfile
import types
from typing import Any

from envs.sandbox import Sandbox
from envs.sandbox.shell import bash_quote, cpu_limited
from envs.swe.bundled import PYTEST_PACKAGES

WORKDIR = "/testbed"
SCRATCH = "/tmp/openclaw-swe"  # outside the repository, so `git diff` never sees it
DEFAULT_TEST_CMD = "python3 -m pytest -rA -p no:cacheprovider"
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_TEST_INFRA = re.compile(
    r"(^|/)(tests?|testing)/"  # a test folder, at any depth
    r"|(^|/)(test_[^/]*\.py|[^/]*_test\.py|conftest\.py|\.?pytest\.ini|tox\.ini|sitecustomize\.py|usercustomize\.py)$"
    r"|\.(pth|pyc)$|(^|/)[^/]+\.(egg|dist)-info(/|$)"
)
_SETTINGS_FILE = re.compile(r"(^|/)(setup\.cfg|pyproject\.toml)$")
_PYTEST_SECTION = re.compile(r"^\s*\[\s*(tool:pytest|pytest|tool\.pytest[^\]]*)\s*\]", re.M)
# Fixed for the eval script: nothing the image's shell could carry in changes how tests run, and
# the working directory is not put first on sys.path (Python >= 3.11; see the module docstring).
CPU_LIMIT_NOTE = "CPU time limit exceeded"  # what bash says of a child that SIGXCPU ended
CLEAN_ENV = "env -u BASH_ENV -u ENV -u PYTHONSTARTUP -u PYTEST_ADDOPTS -u PYTEST_PLUGINS PYTHONNOUSERSITE=1 PYTHONSAFEPATH=1"
# Module names a new top-level module of the repository may not take: the standard library's and
# those of pytest and what it imports (also in older pytest versions).
SHADOWED = frozenset(sys.stdlib_module_names) | frozenset(PYTEST_PACKAGES) | {
    "tomli", "exceptiongroup", "colorama", "attr", "attrs", "more_itertools", "atomicwrites", "wcwidth",
    "importlib_metadata", "zipp", "typing_extensions", "six", "setuptools", "pkg_resources", "_distutils_hack",
    "sitecustomize", "usercustomize"}
# a path's top-level module (its folder, or the file itself with a module suffix) at the top or
# under src/, and the module's name
_TOP_MODULE = re.compile(r"^((?:src/)?([A-Za-z_]\w*)(?:\.[^/]*)?\.(?:py|pyc|pyw|so|pyd)$|(?:src/)?([A-Za-z_]\w*)(?=/))")


def _harness() -> types.SimpleNamespace:
    """swebench's grading modules, imported without the harness package's heavy __init__."""
    if "swebench.harness" not in sys.modules:
        spec = importlib.util.find_spec("swebench")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("the swebench package is not installed (see requirements.txt)")
        pkg = types.ModuleType("swebench.harness")
        pkg.__path__ = [os.path.join(list(spec.submodule_search_locations)[0], "harness")]
        sys.modules["swebench.harness"] = pkg
    from swebench.harness import constants, grading
    from swebench.types import TestSpec

    return types.SimpleNamespace(constants=constants, grading=grading, TestSpec=TestSpec)


def as_list(value: Any) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS come as JSON strings (HF datasets) or lists (local files)."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    return [str(v) for v in (value or [])]


def patch_files(patch: str) -> list[str]:
    """Paths a unified git diff touches (new side)."""
    return [m.group(2) for m in _DIFF_FILE.finditer(patch or "")]


def test_files(record: dict[str, Any]) -> list[str]:
    """The files the tests run from: those the test patch touches, plus the files named by the
    FAIL_TO_PASS / PASS_TO_PASS pytest ids (for SWE-bench records these are the same files)."""
    files = patch_files(record.get("test_patch", ""))
    for test in as_list(record.get("FAIL_TO_PASS")) + as_list(record.get("PASS_TO_PASS")):
        path = test.split("::", 1)[0]
        if "::" in test and path not in files:
            files.append(path)
    return files


def is_test_infra(path: str) -> bool:
    """Whether a path is a test file or test infrastructure by its name alone (see the module
    docstring); grading puts such files back to base_commit whatever the patch did to them."""
    return bool(_TEST_INFRA.search(path))


def heredoc(path: str, text: str) -> str:
    """A shell line that writes `text` to `path` exactly."""
    tag = "EOF_OPENCLAW"
    while tag in text:
        tag += "_"
    return f"cat > {path} <<'{tag}'\n{text}{'' if text.endswith(chr(10)) else chr(10)}{tag}"


def eval_script(record: dict[str, Any]) -> str:
    """The instance's eval script: its own `eval_script` (SWE-bench 5.x records carry one), or
    the SWE-bench default for Python repositories: apply the test patch, run the test files
    (`test_files`) with pytest -rA between the output markers."""
    if record.get("eval_script"):
        return str(record["eval_script"])
    c = _harness().constants
    tests = " ".join(test_files(record))
    cmd = record.get("test_cmd") or DEFAULT_TEST_CMD
    return "\n".join([
        "#!/bin/bash",
        "set -uo pipefail",
        "exec 2>&1",
        f"cd {WORKDIR}",
        *([heredoc(f"{SCRATCH}/test.patch", record["test_patch"]),  # none: the tests are in the repository
           f"git apply -v {SCRATCH}/test.patch || {{ echo '{c.APPLY_PATCH_FAIL} (test patch)'; exit 1; }}"]
          if (record.get("test_patch") or "").strip() else []),
        f"echo '{c.START_TEST_OUTPUT}'",
        f"{cmd} {tests}",
        f"{c.TEST_EXIT_CODE_VAR}=$?",
        f"echo '{c.END_TEST_OUTPUT}'",
        f'echo "{c.TEST_EXIT_CODE}: ${c.TEST_EXIT_CODE_VAR}"',
    ]) + "\n"


def test_spec(record: dict[str, Any], image: str) -> Any:
    """swebench's TestSpec for one of our records (the fields make_test_spec would fill)."""
    h = _harness()
    return h.TestSpec(
        instance_id=str(record["instance_id"]), image=image,
        eval_script_list=eval_script(record).splitlines(), repo=str(record.get("repo", "")),
        version=str(record.get("version", "")), FAIL_TO_PASS=as_list(record.get("FAIL_TO_PASS")),
        PASS_TO_PASS=as_list(record.get("PASS_TO_PASS")),
        log_parser=str(record.get("log_parser") or "parse_log_pytest"),
        eval_type=str(record.get("eval_type") or h.constants.EvalType.PASS_AND_FAIL.value),
    )


@dataclasses.dataclass
class Grade:
    resolved: bool
    patch_applied: bool
    report: dict[str, Any]  # swebench's per-instance report (with tests_status when the tests ran)
    log: str  # the eval log (apply output, test output, markers)
    reverted: list[str] = dataclasses.field(default_factory=list)  # test infrastructure put back to base
    statuses: dict[str, str] = dataclasses.field(default_factory=dict)  # every test the log parser saw -> its status
    time_limit: str = ""  # which limit stopped the test run, in words ("" when none did)

    @property
    def timed_out(self) -> bool:
        return bool(self.time_limit)

    def summary(self) -> str:
        if not self.patch_applied:
            head = "The patch does not apply"
        elif self.timed_out:
            head = f"The tests timed out: {self.time_limit}"
        elif not self.report.get("patch_successfully_applied"):
            head = "The tests produced no result (see the log)"
        else:
            head = "Resolved" if self.resolved else "Not resolved"
        lines = [head + "."]
        if self.reverted:
            lines.append(f"Test infrastructure reverted to the base commit before testing: {', '.join(self.reverted[:10])}"
                         + (f" (+{len(self.reverted) - 10} more)" if len(self.reverted) > 10 else ""))
        status = self.report.get("tests_status") or {}
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            if key in status:
                ok, bad = len(status[key]["success"]), len(status[key]["failure"])
                lines.append(f"{key}: {ok} passed, {bad} failed" + (f" ({', '.join(status[key]['failure'][:5])})" if bad else ""))
        return "\n".join(lines)


def passed(test: str, statuses: dict[str, str]) -> bool:
    """Whether `test` passed in a Grade's statuses, by swebench's own rule (PASSED or XFAIL)."""
    return bool(_harness().grading.test_passed(test, statuses))


def checkout_base(sb: Sandbox, base_commit: str, timeout: float = 60.0) -> None:
    """Put the work tree at base_commit, clean. Raises RuntimeError with git's words if it cannot."""
    r = sb.exec(f"git -c advice.detachedHead=false checkout -q -f {base_commit} && git clean -fdq",
                timeout=timeout, workdir=WORKDIR)
    if not r.ok:
        raise RuntimeError(f"cannot check out {base_commit} in {WORKDIR}: {(r.stdout + r.stderr).strip()[-500:]}")


def _git(sb: Sandbox, command: str, timeout: float = 60.0) -> str:
    r = sb.exec(command, timeout=timeout, max_output=1 << 20, workdir=WORKDIR)
    if not r.ok:
        raise RuntimeError(f"{command[:80]} failed in {WORKDIR}: {(r.stdout + r.stderr).strip()[-500:]}")
    return r.stdout


def restore_test_infra(sb: Sandbox, record: dict[str, Any]) -> list[str]:
    """Put every test file and piece of test infrastructure the work tree changed since
    base_commit back as it was there (a file new since then is deleted); the paths, sorted."""
    base = str(record["base_commit"])
    changed = [p for p in _git(sb, f"git add -A && git diff --cached --no-renames --name-only -z {base}").split("\0") if p]
    named = set(test_files(record))
    infra = [p for p in changed if p in named or is_test_infra(p)]
    for p in (p for p in changed if _SETTINGS_FILE.search(p)):
        q = bash_quote(p)
        sides = sb.exec(f"git show {base}:{q}; cat -- {q}", timeout=30, max_output=1 << 20, workdir=WORKDIR).stdout
        if _PYTEST_SECTION.search(sides):
            infra.append(p)
    shadows = {p: m.group(1) for p in changed if (m := _TOP_MODULE.match(p)) and (m.group(2) or m.group(3)) in SHADOWED}
    new = {top for top in set(shadows.values())
           if not sb.exec(f"git cat-file -e {base}:{bash_quote(top)}", timeout=30, workdir=WORKDIR).ok}
    infra += [p for p, top in shadows.items() if top in new and p not in infra]
    for p in infra:
        q = bash_quote(p)
        _git(sb, f"if git cat-file -e {base}:{q} 2>/dev/null; then git checkout -q {base} -- {q}; "
                 f"else git rm -q -r -f --cached --ignore-unmatch -- {q} && rm -rf -- {q}; fi")
    return sorted(infra)


def grade(sb: Sandbox, record: dict[str, Any], patch: str, image: str, cpu_s: float = 120.0,
          wall_s: float | None = None) -> Grade:
    """Grade `patch` for `record` in `sb`, a fresh sandbox of the instance's image.
    SandboxError propagates (infrastructure); everything else the patch does is in the Grade.

    The test run's limit is CPU time: each of its processes may compute for `cpu_s` seconds
    (the kernel's RLIMIT_CPU), however slowly a loaded machine gives it those seconds, so load
    never fails a correct patch. A run that waits without computing (sleep, deadlock) is
    stopped at `wall_s` (default 5 x cpu_s). Either way the Grade says timed_out."""
    h = _harness()
    c = h.constants
    checkout_base(sb, str(record["base_commit"]))
    sb.exec(f"mkdir -p {SCRATCH}", timeout=10)
    log: list[str] = []
    applied = True
    if patch.strip():
        sb.write_file(f"{SCRATCH}/model.patch", patch)
        r = sb.exec(f"git apply -v {SCRATCH}/model.patch || patch --batch --fuzz=5 -p1 -i {SCRATCH}/model.patch",
                    timeout=60, max_output=256 * 1024, workdir=WORKDIR)
        log.append(r.stdout + r.stderr)
        if not r.ok:
            applied = False
            log.append(f"{c.APPLY_PATCH_FAIL}:\n")
    time_limit = ""
    reverted: list[str] = []
    if applied:
        reverted = restore_test_infra(sb, record)
        sb.write_file(f"{SCRATCH}/eval.sh", eval_script(record))
        wall = 5 * cpu_s if wall_s is None else wall_s
        command, cpu = cpu_limited(f"{CLEAN_ENV} bash --noprofile --norc {SCRATCH}/eval.sh", cpu_s, grace_s=5)
        r = sb.exec(command, timeout=wall, max_output=4 * 1024 * 1024, workdir=WORKDIR)
        log.append(r.stdout + r.stderr)
        if r.timed_out:
            time_limit = f"no result in {wall:.0f} s"
        elif CPU_LIMIT_NOTE in r.stdout + r.stderr:
            time_limit = f"a process used its {cpu} s of CPU time"
        if time_limit:
            log.append(f"\n{c.TESTS_TIMEOUT}: {time_limit}\n")
    text = "\n".join(log)
    spec = test_spec(record, image)
    with tempfile.NamedTemporaryFile("w", suffix=".log", prefix="openclaw-swe-eval-", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        prediction = {"instance_id": spec.instance_id, "model_name_or_path": "openclaw", "model_patch": patch}
        report = h.grading.get_eval_report(spec, prediction, path, include_tests_status=True)[spec.instance_id]
        statuses = h.grading.get_logs_eval(spec, path)[0]
    finally:
        os.unlink(path)
    return Grade(resolved=bool(report.get("resolved")), patch_applied=applied,
                 report=report, log=text, reverted=reverted, statuses=statuses, time_limit=time_limit)
