#!/usr/bin/env python3
"""A stand-in for the ``tract`` command line, built on tract's Python bindings (benchmark helper).

torch_to_nnef's LLM exporter (``t2n_export_llm_to_tract``) runs its checks through a tract CLI
binary, which it would otherwise download. This script answers the two calls it makes:

    tract --version
    tract MODEL.nnef.tgz [--nnef-* flags] [-O] run --input-from-bundle IN.npz
          (--assert-output-bundle OUT.npz [--approx LEVEL] | --save-outputs-npz OUT.npz) [--allow-float-casts]

Inputs are taken from the bundle by the model's input names (cast to the model's input types,
as ``--allow-float-casts`` does); outputs are compared by position with tract's tolerance
levels (atol, rtol; f16 outputs at the f16 values of the level). A mismatch or a failure prints
``ERROR`` on stderr and exits 1, which torch_to_nnef reads as a failed check.

``bench_llm.py`` installs it as ``VENV/tract-cli`` (a copy with the venv's python in its
first line) and passes it with ``--tract-specific-path``.
"""
from __future__ import annotations

import sys

VERSION = "0.23.9"
# tract's Approximation levels: f32 (atol, rtol), f16 (atol, rtol)
LEVELS = {"exact": ((0, 0), (0, 0)), "close": ((1e-7, 1e-7), (1e-3, 1e-3)),
          "approximate": ((1e-4, 5e-4), (1e-3, 5e-3)), "very": ((5e-2, 1e-2), (5e-2, 1e-2)),
          "super": ((0.1, 0.05), (0.1, 0.05)), "ultra": ((0.2, 0.1), (0.2, 0.1))}


def _option(args: list, name: str, default=None):
    return args[args.index(name) + 1] if name in args else default


def run(args: list) -> int:
    import numpy as np
    import tract

    model = tract.nnef().with_tract_transformers().load(args[0])
    names = [model.input_name(i) for i in range(model.input_count())]
    facts = [str(model.input_fact(i)) for i in range(model.input_count())]
    bundle = np.load(_option(args, "--input-from-bundle"))
    inputs = []
    for name, fact in zip(names, facts):
        value = bundle[name]
        if fact.endswith("f16"):
            value = value.astype(np.float16)
        elif fact.endswith("f32"):
            value = value.astype(np.float32)
        inputs.append(value)
    outputs = [t.to_numpy() for t in model.into_runnable().run(inputs)]
    save = _option(args, "--save-outputs-npz")
    if save:
        np.savez(save, **{f"output_{i}": o for i, o in enumerate(outputs)})
        return 0
    expected = np.load(_option(args, "--assert-output-bundle"))
    level = LEVELS[_option(args, "--approx", "exact").lower().replace("_", "")]
    for i, (key, got) in enumerate(zip(expected.files, outputs)):
        want = expected[key]
        atol, rtol = level[1] if got.dtype == np.float16 else level[0]
        if want.shape != got.shape:
            print(f"ERROR output {i} ({key}): shape {got.shape} != {want.shape}", file=sys.stderr)
            return 1
        close = np.isclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol)
        if not close.all():
            worst = float(np.abs(got.astype(np.float64) - want).max())
            print(f"ERROR output {i} ({key}): max abs diff {worst:.3g} over {level}", file=sys.stderr)
            return 1
    return 0


def main(argv: list) -> int:
    if "--version" in argv:
        print(f"tract {VERSION}")
        return 0
    if "run" not in argv:
        print(f"ERROR this stand-in only answers --version and run, got {argv}", file=sys.stderr)
        return 2
    try:
        return run(argv)
    except Exception as exc:  # noqa: BLE001 - reported the way the real CLI does
        print(f"ERROR {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
