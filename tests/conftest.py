"""Session-wide test settings, and how tests share parallel workers (pytest-xdist)."""
import os
import signal

import pytest

# Tests interrupt their child processes with SIGINT as a terminal would. A run started in the
# background (nohup, `cmd &` in a script) ignores SIGINT and its children would inherit that:
# restore Python's default so the children behave as under a terminal, however pytest started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The suite's runs log nothing to W&B unless a test asks for it (W&B's own tests set WANDB_MODE
# themselves): W&B's service process took about 5 s of CPU per CLI run, and no test may write to
# a user's W&B account.
os.environ["WANDB_MODE"] = "disabled"

# Several workers share the cores: one intra-op thread each (and in the processes they start),
# or torch's spinning thread pools would fight each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`: a file's tests stay on one worker (its module fixtures, such as a
    built image or a loaded model, are made once), `heavy` tests run one after another, and the
    files with the most slow tests are handed out first so no long file starts last: the heavy
    group, the longest of all, before any file."""
    def file(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    slow: dict[str, int] = {}
    for item in items:
        item.add_marker(pytest.mark.xdist_group("heavy" if item.get_closest_marker("heavy") else file(item)))
        slow[file(item)] = slow.get(file(item), 0) + bool(item.get_closest_marker("slow"))
    items.sort(key=lambda it: (not it.get_closest_marker("heavy"), -slow[file(it)]))  # stable: a file's tests keep their order
