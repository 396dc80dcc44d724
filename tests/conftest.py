import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True, scope="session")
def _record_lowered_ops():
    """With FX2NNEF_OPS_LOG=path, append the source-op kinds every export lowered (op coverage)."""
    log = os.environ.get("FX2NNEF_OPS_LOG")
    if not log:
        yield
        return
    from fx2nnef.nnef_emit import emitter

    original = emitter.lower_nodes

    def recording(ctx, graph):
        with open(log, "a") as f:
            f.writelines(f"{n.kind}\n" for n in graph.nodes)
        return original(ctx, graph)

    emitter.lower_nodes = recording
    yield
    emitter.lower_nodes = original


def pytest_addoption(parser):
    """``--fuzz=N`` / ``--fuzz-seed=K``: how many random programs tests/test_fuzz.py tries, and from which seed."""
    group = parser.getgroup("fx2nnef fuzz")
    group.addoption("--fuzz", type=int, default=int(os.environ.get("FX2NNEF_FUZZ", "300")),
                    help="number of random programs in tests/test_fuzz.py (env FX2NNEF_FUZZ, default 300)")
    group.addoption("--fuzz-seed", type=int, default=int(os.environ.get("FX2NNEF_FUZZ_SEED", "0")),
                    help="first seed of tests/test_fuzz.py (env FX2NNEF_FUZZ_SEED, default 0)")
