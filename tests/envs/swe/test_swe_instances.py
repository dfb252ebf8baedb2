"""SWE instance records: the bundled set, loading JSONL / parquet, image lookup (no Docker needed
except where marked)."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envs.swe import bundled, grading
from envs.swe.edit import oracle_edits
from envs.swe.env import SWEEnv
from envs.swe.instances import InstanceError, image_candidates, load_instances


def test_records_are_stable_and_complete():
    recs = bundled.instances()
    assert len(recs) >= 20 and len({r["repo"] for r in recs}) >= 4
    for r in recs:
        f2p, p2p = json.loads(r["FAIL_TO_PASS"]), json.loads(r["PASS_TO_PASS"])
        assert f2p and p2p and not set(f2p) & set(p2p)
        assert len(r["base_commit"]) == 40 and r["environment_setup_commit"] == r["base_commit"]
        test_files = grading.patch_files(r["test_patch"])
        assert all(t.split("::")[0] in test_files for t in f2p)  # the test patch adds the failing tests
        assert grading.patch_files(r["patch"]) and not set(grading.patch_files(r["patch"])) & set(test_files)
        assert oracle_edits(r["patch"])[0]["command"] == "str_replace"


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_load_formats(tmp_path, fmt):
    recs = list(bundled.instances())[:3]
    path = tmp_path / f"inst.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    elif fmt == "json":
        path.write_text(json.dumps(recs))
    else:
        pq.write_table(pa.Table.from_pylist(recs), path)
    assert [r["instance_id"] for r in load_instances(path)] == [r["instance_id"] for r in recs]
    env = SWEEnv(instances=str(path))
    assert env.task_ids() == [r["instance_id"] for r in recs]
    task = env.load_task(recs[0]["instance_id"])
    assert task.prompt == recs[0]["problem_statement"].strip() and task.oracle[-1].count("submit") == 1


def test_bad_instance_files(tmp_path):
    with pytest.raises(InstanceError, match="no instance file"):
        load_instances(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "x"}\n')
    with pytest.raises(InstanceError, match="lacks repo"):
        load_instances(bad)
    bad.write_text("{not json\n")
    with pytest.raises(InstanceError, match="not JSON"):
        load_instances(bad)


def test_swebench_image_names():
    rec = {"instance_id": "astropy__astropy-12907"}
    assert image_candidates(rec) == ["sweb.eval.x86_64.astropy__astropy-12907:latest",
                                     "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"]
    assert image_candidates({**rec, "image_name": "my/img:1"})[0] == "my/img:1"


@pytest.mark.docker
def test_external_record_without_image_is_a_clear_error(tmp_path):
    from envs.sandbox import SandboxError

    rec = {**bundled.instances()[0], "instance_id": "someone__lib-1", "repo": "someone/lib"}
    path = tmp_path / "ext.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    env = SWEEnv(instances=str(path))
    with pytest.raises(SandboxError, match="no image for someone__lib-1 on the Docker engines"):
        env.reset(options={"task_id": "someone__lib-1"})
    env.close()


def test_swebench_eval_script_is_used_when_given():
    rec = {**bundled.instances()[0], "eval_script": "#!/bin/bash\necho custom\n"}
    assert grading.eval_script(rec) == "#!/bin/bash\necho custom\n"
    spec = grading.test_spec(bundled.instances()[0], "img")
    assert spec.log_parser == "parse_log_pytest" and spec.FAIL_TO_PASS == json.loads(bundled.instances()[0]["FAIL_TO_PASS"])
