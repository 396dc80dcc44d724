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
    error with its first line), seconds (wall clock, and the CPU seconds of this process and the
    engine runs it started), the sizes checked and the ranges. ``float64``: where the plain
    comparison failed, how far tract and eager float32 are from the model's float64 outputs (the
    export's own arbitration, ``fx2nnef.targets.rounding``: float32 rounding alone passes, and the
    row is ok), or why float64 was not run."""
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
        if getattr(e, "float64", None) is not None:
            row["float64"] = e.float64.as_dict()
        return row
    checked = [label for label, _ in r.check.cases] if r.check else []
    row.update(status="ok" if r.check and r.check.ok else "mismatch", seconds=round(time.time() - t0, 1),
               cpu_seconds=round(_tree_cpu_seconds(os.getpid()) - cpu0, 1),
               max_abs=float(r.max_abs_diff), checked=checked,
               ranges={k: str(v) for k, v in r.ranges.items()})
    if r.check and r.check.float64 is not None:
        row.update(float64=r.check.float64.as_dict(), rounding=r.check.float64.passed)
    return row


def reason(row: dict) -> str:
    """One short line: why a row did not export and check (for a row that passed on float32
    rounding alone, that and its figures)."""
    if _passed(row):
        return "float32 rounding only" + _float64_text(row.get("float64")) if _rounded(row) else ""
    text = row.get("error") or row.get("status", "")
    text = text.splitlines()[0][:150] if text else row.get("status", "")
    return text + _float64_text(row.get("float64"))


def _float64_text(figures) -> str:
    """`` (x tolerance from float64, tract/eager float32: B=2 1.1/1.0)``, or why float64 was not run."""
    if not figures:
        return ""
    if "unavailable" in figures:
        return f" (float64: {figures['unavailable'][:100]})"
    return " (x tolerance from float64, tract/eager float32: " + ", ".join(
        f"{place} {c.get('tract', float('nan')):.2g}/{c['eager']:.2g}" for place, c in figures.items()) + ")"


def _passed(row: dict) -> bool:
    """Whether the row's export passed its check (a row of an earlier run marked ``rounding`` failed
    the plain comparison on float32 rounding alone: the export now passes it)."""
    return row.get("status") in ("ok", "rounding")


def _rounded(row: dict) -> bool:
    return row.get("status") == "rounding" or bool(row.get("rounding"))


def print_table(rows: list, file=sys.stdout) -> None:
    """The table of ``rows``, the count of exported and checked at two sizes at least, and the
    five slowest rows."""
    def two_sizes(r):
        return _passed(r) and (len(r.get("checked", [])) >= 2 or r.get("status") == "rounding")

    print(f"{'model':40s} {'exported':8s} {'2 sizes':7s} {'s':>6s} {'cpu s':>6s}  reason", file=file)
    for r in rows:
        exported = (r.get("status") in ("ok", "rounding", "mismatch")
                    or str(r.get("error", "")).startswith("CheckIOError"))
        print(f"{r['family'][:40]:40s} {'yes' if exported else 'no':8s} {'yes' if two_sizes(r) else 'no':7s} "
              f"{r.get('seconds', float('nan')):6.1f} {r.get('cpu_seconds', float('nan')):6.1f}  {reason(r)}",
              file=file)
    good = sum(two_sizes(r) for r in rows)
    print(f"\n{good}/{len(rows)} exported and checked at two sizes ({100 * good / max(len(rows), 1):.0f}%)", file=file)
    rounded = sum(_rounded(r) for r in rows)
    if rounded:
        from fx2nnef.targets.rounding import ROUNDING_FACTOR

        print(f"{rounded} of them passed on float32 rounding only (tract within {ROUNDING_FACTOR:g}x of eager "
              "float32's own distance from the model's float64 outputs)", file=file)
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
