"""The setup leaves compiled bytecode for the packages a run imports, so no process compiles
torch or transformers again where PYTHONDONTWRITEBYTECODE is set (about 12 s of CPU each)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

from tests.cli import REPO

_UNCOMPILED = """
import importlib.util, json, sys
import agent.policy.engine, learner.torch_learner, experiments.run  # what a run imports
site = sys.argv[1]
missing = [m.__file__ for m in list(sys.modules.values())
           if (getattr(m, "__file__", None) or "").startswith(site) and m.__file__.endswith(".py")
           and not __import__("os").path.exists(importlib.util.cache_from_source(m.__file__))]
print(json.dumps({"missing": missing, "n": len(sys.modules)}))
"""


def test_every_site_package_module_a_run_imports_has_its_bytecode():
    site = sysconfig.get_paths()["purelib"]
    p = subprocess.run([sys.executable, "-c", _UNCOMPILED, site], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})  # read what is there, write nothing
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["n"] > 1000  # torch and transformers were imported
    assert not out["missing"], f"{len(out['missing'])} without bytecode (run bash scripts/setup.sh), e.g. {out['missing'][:3]}"
