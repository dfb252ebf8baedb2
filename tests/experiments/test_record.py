"""experiments.record keeps a run as a committed record: its metrics, config, turns (gzipped),
the command and the machine; a folder that is not a finished run is one line."""
from __future__ import annotations

import gzip
import json
import os

from experiments.record import keep, machine, main


def test_a_run_becomes_a_record_with_its_command_and_machine(tmp_path):
    run = tmp_path / "run"
    (run / "warm_start").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "turns.jsonl").write_text('{"turn": 1}\n' * 100)
    (run / "weights").mkdir()  # not kept: weights are not a record
    (run / "warm_start" / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (run / "warm_start" / "demos.json").write_text("{}")
    log = tmp_path / "out.log"
    log.write_text("done\n")
    out = tmp_path / "docs" / "learn-x" / "s0"
    keep(run, out, "python -m experiments.run +experiment=learn-x seed=0 ", log)
    assert (out / "metrics.jsonl").read_text() == '{"step": 0}\n' and (out / "config.yaml").is_file()
    assert gzip.decompress((out / "turns.jsonl.gz").read_bytes()).decode() == '{"turn": 1}\n' * 100
    assert (out / "warm_start" / "metrics.jsonl").is_file() and (out / "warm_start" / "demos.json").is_file()
    assert not (out / "weights").exists() and (out / "run.log").read_text() == "done\n"
    assert (out / "command").read_text() == "python -m experiments.run +experiment=learn-x seed=0\n"
    m = json.loads((out / "machine.json").read_text())
    assert m["cpu"] == machine()["cpu"] and m["threads"] >= 1 and isinstance(m["flags"], list)
    first = (out / "turns.jsonl.gz").read_bytes()
    keep(run, out, "python -m experiments.run +experiment=learn-x seed=0")
    assert (out / "turns.jsonl.gz").read_bytes() == first  # the same run gives the same bytes


def test_machine_reads_the_cpu_model_and_precision_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile sse\n")
    m = machine(str(info))
    assert m["cpu"] == "Intel(R) Xeon(R) Platinum 8480+" and m["flags"] == ["avx2", "avx512f", "amx_bf16", "amx_tile"]
    # the threads the command ran with, where it set them
    assert machine(str(info), "OMP_NUM_THREADS=1 python -m experiments.run seed=0")["threads"] == 1
    assert machine(str(info), "python -m experiments.run")["threads"] == os.cpu_count()


def test_a_folder_without_metrics_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path), str(tmp_path / "out"), "--command", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no metrics.jsonl" in err
