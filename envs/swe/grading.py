"""Grade a patch the SWE-bench way, offline, with the `swebench` package's own pieces.

In a fresh sandbox from the instance's image: check out base_commit, apply the model patch
(`git apply`, then `patch --fuzz` as SWE-bench does), run the eval script (apply the test patch,
run the test files between swebench's output markers, record the test command's exit code),
and hand the log to `swebench.harness.grading.get_eval_report`, which parses it with the
instance's log parser (pytest by default) and decides FAIL_TO_PASS / PASS_TO_PASS resolution.

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

WORKDIR = "/testbed"
SCRATCH = "/tmp/openclaw-swe"  # outside the repository, so `git diff` never sees it
DEFAULT_TEST_CMD = "python3 -m pytest -rA -p no:cacheprovider"
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


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
        heredoc(f"{SCRATCH}/test.patch", record.get("test_patch", "")),
        f"git apply -v {SCRATCH}/test.patch || {{ echo '{c.APPLY_PATCH_FAIL} (test patch)'; exit 1; }}",
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
    timed_out: bool
    report: dict[str, Any]  # swebench's per-instance report (with tests_status when the tests ran)
    log: str  # the eval log (apply output, test output, markers)

    def summary(self) -> str:
        if not self.patch_applied:
            head = "The patch does not apply"
        elif self.timed_out:
            head = "The tests timed out"
        elif not self.report.get("patch_successfully_applied"):
            head = "The tests produced no result (see the log)"
        else:
            head = "Resolved" if self.resolved else "Not resolved"
        lines = [head + "."]
        status = self.report.get("tests_status") or {}
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            if key in status:
                ok, bad = len(status[key]["success"]), len(status[key]["failure"])
                lines.append(f"{key}: {ok} passed, {bad} failed" + (f" ({', '.join(status[key]['failure'][:5])})" if bad else ""))
        return "\n".join(lines)


def checkout_base(sb: Sandbox, base_commit: str, timeout: float = 60.0) -> None:
    """Put the work tree at base_commit, clean. Raises RuntimeError with git's words if it cannot."""
    r = sb.exec(f"git -c advice.detachedHead=false checkout -q -f {base_commit} && git clean -fdq",
                timeout=timeout, workdir=WORKDIR)
    if not r.ok:
        raise RuntimeError(f"cannot check out {base_commit} in {WORKDIR}: {(r.stdout + r.stderr).strip()[-500:]}")


def grade(sb: Sandbox, record: dict[str, Any], patch: str, image: str, timeout: float = 120.0) -> Grade:
    """Grade `patch` for `record` in `sb`, a fresh sandbox of the instance's image.
    SandboxError propagates (infrastructure); everything else the patch does is in the Grade."""
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
    timed_out = False
    if applied:
        sb.write_file(f"{SCRATCH}/eval.sh", eval_script(record))
        r = sb.exec(f"bash {SCRATCH}/eval.sh", timeout=timeout, max_output=4 * 1024 * 1024, workdir=WORKDIR)
        log.append(r.stdout + r.stderr)
        if r.timed_out:
            timed_out = True
            log.append(f"\n{c.TESTS_TIMEOUT} after {timeout:.0f} s\n")
    text = "\n".join(log)
    spec = test_spec(record, image)
    with tempfile.NamedTemporaryFile("w", suffix=".log", prefix="openclaw-swe-eval-", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        prediction = {"instance_id": spec.instance_id, "model_name_or_path": "openclaw", "model_patch": patch}
        report = h.grading.get_eval_report(spec, prediction, path, include_tests_status=True)[spec.instance_id]
    finally:
        os.unlink(path)
    return Grade(resolved=bool(report.get("resolved")), patch_applied=applied, timed_out=timed_out,
                 report=report, log=text)
