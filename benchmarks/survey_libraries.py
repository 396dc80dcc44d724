"""What the surveys of torchvision, timm, diffusers and torchaudio share: non-degenerate weights
(BatchNorm statistics from a calibration pass, noise on constant parameters), the row of one export
checked in tract, and the table printed at the end (exported / checked at two sizes / reason /
seconds, the count, the slowest rows).

Each survey runs every model in a child process of its own (``survey_causal_lm.run_children``); with
``--out FILE`` the rows are appended to FILE as JSON lines and the table is printed from them.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef
sys.path.insert(0, str(Path(__file__).resolve().parent))


def calibrate(model, make_input, passes: int = 3):
    """BatchNorm running statistics from ``passes`` forward passes in train mode on
    ``make_input(seed)`` (cumulative averages, not the init's zeros and ones); noise on every other
    parameter whose items are all equal (norm weights, zero biases). Returns the model in eval mode."""
    import torch

    from survey_causal_lm import noisy_constants

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._NormBase)]
    noisy_constants(model)
    if norms:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the calibration passes
        model.train()
        with torch.no_grad():
            for seed in range(passes):
                inputs = make_input(seed)
                model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    return model.eval()


def export_row(row: dict, model, inputs: tuple, names: list, dynamic_axes: dict, path: str) -> dict:
    """``row`` with the export of ``model`` on ``inputs`` checked in tract: status (ok, mismatch or
    error with its first line, or rounding: the check failed but tract is as close to the float64
    answer as eager float32 is, see ``rounding``), seconds (wall clock, and the CPU seconds of this
    process and the engine runs it started), the sizes checked and the ranges."""
    import os

    import fx2nnef
    from survey_causal_lm import _tree_cpu_seconds

    t0, cpu0 = time.time(), _tree_cpu_seconds(os.getpid())
    try:
        r = fx2nnef.export(model, tuple(inputs), path, input_names=names,
                           target=fx2nnef.TractNNEF(dynamic_axes=dynamic_axes))
    except Exception as e:  # the survey reports every failure as a row, with its seconds
        row.update(status="error", seconds=round(time.time() - t0, 1),
                   cpu_seconds=round(_tree_cpu_seconds(os.getpid()) - cpu0, 1), error=f"{type(e).__name__}: {str(e)[:600]}")
        if isinstance(e, fx2nnef.CheckIOError) and e.bundle:
            try:
                row["float64"] = rounding(model, e.bundle)
            except Exception as f:  # a model that cannot run in float64 keeps its CheckIOError row
                row["float64_error"] = f"{type(f).__name__}: {str(f)[:200]}"
            if is_rounding(row):
                row["status"] = "rounding"
        return row
    checked = [label for label, _ in r.check.cases] if r.check else []
    row.update(status="ok" if r.check and r.check.ok else "mismatch", seconds=round(time.time() - t0, 1),
               cpu_seconds=round(_tree_cpu_seconds(os.getpid()) - cpu0, 1),
               max_abs=float(r.max_abs_diff), checked=checked,
               ranges={k: str(v) for k, v in r.ranges.items()})
    return row


# tract may sit this many times further from the float64 answer than eager float32 does and the
# mismatch still counts as rounding: both run float32, summed in other orders (a wrong padding,
# border or folded size is off by the activations' own size, orders of magnitude more)
ROUNDING_FACTOR = 4.0


def rounding(model, bundle: str) -> dict:
    """At each size whose check failed (read from the debug ``bundle`` of the ``CheckIOError``: the
    asset, the inputs, the report), how far tract and eager float32 each are from the eager model in
    float64, in units of the approximate tolerance (the check's own measure: 1 is the bound).
    ``{label: {"tract": x, "eager": y}}``; where tract is within ``ROUNDING_FACTOR`` of eager float32,
    the model amplifies float32 rounding (random weights, deep stacks) and the mismatch is not the
    export's."""
    import copy

    import numpy as np
    import torch

    from fx2nnef.ir.graph import sanitize
    from fx2nnef.targets.tract_runner import run_tract_many

    folder = Path(bundle)
    failed = [block.split("]", 1)[0] for block in (folder / "report.txt").read_text().split("\n[")
              if "FAIL" in block]
    failed = [label.lstrip("[") for label in failed]
    if not failed:
        return {}
    cases = [[torch.from_numpy(a) for a in np.load(folder / f"inputs_{sanitize(label)}.npz").values()]
             for label in failed]
    asset = next(folder.glob("*.nnef.tgz"))
    got = run_tract_many(str(asset), [[t.numpy() for t in ins] for ins in cases])
    double = copy.deepcopy(model).double()
    out = {}
    for label, ins, engine in zip(failed, cases, got):
        with torch.no_grad():
            single = _tensors(model(*ins))
            exact = _tensors(double(*[t.double() if t.is_floating_point() else t for t in ins]))
        out[label] = {"tract": _excess([torch.from_numpy(np.asarray(g)) for g in engine], exact),
                      "eager": _excess(single, exact)}
    return out


def _tensors(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _excess(got: list, exact: list) -> float:
    """The largest ``|got - exact| / (atol + rtol |exact|)`` at the approximate level over the outputs."""
    from fx2nnef.targets.tolerance import resolve_tolerance

    tol = resolve_tolerance("approximate")
    return max(float(((g.double() - e).abs() / (tol.atol + tol.rtol * e.abs())).max())
               for g, e in zip(got, exact))


def is_rounding(row: dict) -> bool:
    """Whether every failed size of ``row`` is off by float32 rounding only (see ``rounding``)."""
    cases = row.get("float64") or {}
    return bool(cases) and all(c["tract"] <= ROUNDING_FACTOR * max(c["eager"], 1e-3) for c in cases.values())


def reason(row: dict) -> str:
    """One short line: why a row did not export and check."""
    if row.get("status") == "ok":
        return ""
    text = row.get("error") or row.get("status", "")
    text = text.splitlines()[0][:150] if text else row.get("status", "")
    if "eager_float64" in row:
        text += f" (eager float32 vs float64: {row['eager_float64']:.2g})"
    if row.get("float64"):
        text = ("float32 rounding only: " if row.get("status") == "rounding" else "") + text
        text += " (x tolerance from float64, tract/eager float32: " + ", ".join(
            f"{label} {c['tract']:.2g}/{c['eager']:.2g}" for label, c in row["float64"].items()) + ")"
    return text


def print_table(rows: list, file=sys.stdout) -> None:
    """The table of ``rows``, the count of exported and checked at two sizes at least, and the
    five slowest rows."""
    def two_sizes(r):
        return r.get("status") == "ok" and len(r.get("checked", [])) >= 2

    print(f"{'model':40s} {'exported':8s} {'2 sizes':7s} {'s':>6s} {'cpu s':>6s}  reason", file=file)
    for r in rows:
        exported = r.get("status") in ("ok", "mismatch") or str(r.get("error", "")).startswith("CheckIOError")
        print(f"{r['family'][:40]:40s} {'yes' if exported else 'no':8s} {'yes' if two_sizes(r) else 'no':7s} "
              f"{r.get('seconds', float('nan')):6.1f} {r.get('cpu_seconds', float('nan')):6.1f}  {reason(r)}",
              file=file)
    good = sum(two_sizes(r) for r in rows)
    print(f"\n{good}/{len(rows)} exported and checked at two sizes ({100 * good / max(len(rows), 1):.0f}%)", file=file)
    rounded = sum(r.get("status") == "rounding" for r in rows)
    if rounded:
        print(f"{rounded} more off by float32 rounding only (tract within {ROUNDING_FACTOR:g}x of eager "
              "float32's own distance from float64)", file=file)
    slow = sorted((r for r in rows if "seconds" in r), key=lambda r: -r["seconds"])[:5]
    print("slowest: " + ", ".join(f"{r['family']} {r['seconds']:.0f} s" for r in slow), file=file)
    slow = sorted((r for r in rows if "cpu_seconds" in r), key=lambda r: -r["cpu_seconds"])[:5]
    print("most CPU: " + ", ".join(f"{r['family']} {r['cpu_seconds']:.0f} s" for r in slow), file=file)


def survey(script: str, one, models, timeout: float) -> None:
    """The command line of a library survey (``survey_causal_lm.survey_main``'s options), then the
    table of the rows written to ``--out``."""
    from survey_causal_lm import survey_main

    survey_main(script, one, models, timeout=timeout)
    if "--child" in sys.argv or "--out" not in sys.argv:
        return
    out = sys.argv[sys.argv.index("--out") + 1]
    rows = [json.loads(line) for line in open(out) if line.strip()]
    print_table(rows)


def table_main() -> None:
    """``python survey_libraries.py FILE.jsonl``: the table of a survey's rows."""
    print_table([json.loads(line) for line in open(sys.argv[1]) if line.strip()])


if __name__ == "__main__":
    table_main()
