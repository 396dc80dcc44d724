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


@pytest.fixture(autouse=True, scope="session")
def _record_asset_hashes(request):
    """With ``--asset-hashes=FILE``: the sha256 of every graph.nnef written, per test, in write order,
    so that a refactor can show its assets byte-identical (see benchmarks/compare_asset_hashes.py)."""
    out = request.config.getoption("--asset-hashes")
    if not out:
        yield
        return
    import hashlib

    from fx2nnef.nnef_emit import archive

    original = archive._checked_entries
    counts: dict = {}
    lines: list = []  # written at the end: a test may limit the file sizes it can write meanwhile

    def recording(files):
        entries = original(files)
        for name, data in entries:
            if name == "graph.nnef" or name.endswith("/graph.nnef"):
                test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
                counts[test] = counts.get(test, 0) + 1
                lines.append(f"{test}\t{counts[test]}\t{name}\t{hashlib.sha256(bytes(data)).hexdigest()}\n")
        return entries

    archive._checked_entries = recording
    yield
    archive._checked_entries = original
    with open(out, "a") as f:  # one block per pytest-xdist worker
        f.writelines(lines)


def pytest_addoption(parser):
    """``--fuzz=N`` / ``--fuzz-seed=K``: how many random programs tests/test_fuzz.py tries, and from which seed."""
    group = parser.getgroup("fx2nnef fuzz")
    group.addoption("--fuzz", type=int, default=int(os.environ.get("FX2NNEF_FUZZ", "300")),
                    help="number of random programs in tests/test_fuzz.py (env FX2NNEF_FUZZ, default 300)")
    group.addoption("--asset-hashes", default=os.environ.get("FX2NNEF_ASSET_HASHES"), metavar="FILE",
                    help="append 'test id, n-th asset, sha256 of its graph.nnef' for every asset the tests "
                         "write to FILE (compare two runs with benchmarks/compare_asset_hashes.py)")
    group.addoption("--fuzz-seed", type=int, default=int(os.environ.get("FX2NNEF_FUZZ_SEED", "0")),
                    help="first seed of tests/test_fuzz.py (env FX2NNEF_FUZZ_SEED, default 0)")


def pytest_configure(config):
    """``--asset-hashes`` needs a fixed PYTHONHASHSEED: a model that iterates over a set of strings
    (Gemma's ``set(layer_types)``) traces its independent branches in the order of the process's
    string hashing, so two runs with random seeds record different bytes for the same code."""
    if config.getoption("--asset-hashes") and not os.environ.get("PYTHONHASHSEED", "").isdigit():
        raise pytest.UsageError("--asset-hashes: set PYTHONHASHSEED to a number (e.g. PYTHONHASHSEED=0 ./dev test ...; "
                                "./dev test sets 0), or assets of models that iterate over sets differ between runs")
