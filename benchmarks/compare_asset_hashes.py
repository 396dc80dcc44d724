"""Compare two records of the assets the test suite writes (``pytest --asset-hashes=FILE``).

A refactor keeps every asset byte-identical:

    ./dev test --asset-hashes=/tmp/before.tsv        # on the commit before
    ./dev test --asset-hashes=/tmp/after.tsv         # on the refactor
    python benchmarks/compare_asset_hashes.py /tmp/before.tsv /tmp/after.tsv

Both runs need the same PYTHONHASHSEED (``./dev test`` sets 0; the option refuses to record
without one): a model that iterates over a set of strings traces in the order of the string
hashing, which Python draws anew for each process.

Prints how many assets were compared, and every one that differs or is written in one run only;
exits 1 when any differs.
"""
from __future__ import annotations

import sys


def read(path: str) -> dict:
    found: dict = {}
    with open(path) as f:
        for line in f:
            test, nth, name, digest = line.rstrip("\n").split("\t")
            found[(test, int(nth), name)] = digest
    return found


def main(argv: list) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: compare_asset_hashes.py BEFORE AFTER", file=sys.stderr)
        return 2
    before, after = read(argv[0]), read(argv[1])
    common = sorted(before.keys() & after.keys())
    differ = [k for k in common if before[k] != after[k]]
    only = sorted(before.keys() ^ after.keys())
    for test, nth, name in differ:
        print(f"differs: {test} #{nth} {name}")
    for key in only:
        print(f"only in {'before' if key in before else 'after'}: {key[0]} #{key[1]} {key[2]}")
    print(f"{len(common)} assets compared, {len(differ)} differ, {len(only)} written in one run only")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
