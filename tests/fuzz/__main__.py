"""Fuzz campaign from the command line (run from ``tests/``).

    python -m fuzz run --first 0 --count 2000 --out /tmp/fuzz     # one JSON line per program
    python -m fuzz run --count 500 --focus fft,stft --out /tmp/f2  # those generators drawn 8x more often
    python -m fuzz minimise --out /tmp/fuzz --per-class 2         # smallest reproducer per class
    python -m fuzz summary --out /tmp/fuzz                        # counts per verdict and per class

At scale, with both cores and wrong results by class: ``python benchmarks/fuzz_campaign.py``
(from the repository root).

``run`` appends to ``OUT/records.jsonl`` (seed, verdict, reason, families, failing sizes);
``minimise`` takes the failing records, groups them by verdict and reason, minimises a
few of each group and writes ``OUT/min_<seed>.txt`` reports plus ``OUT/minimised.jsonl``.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import tempfile
import warnings
from pathlib import Path

from .generator import generate
from .program import Program
from .runner import FAILING, minimise, run_program


def _run(args) -> None:
    from . import generator

    for name in filter(None, args.focus.split(",")):
        generator.FOCUS[name if name.startswith("g_") else "g_" + name] = args.focus_factor
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    with open(out / "records.jsonl", "a") as log, tempfile.TemporaryDirectory(prefix="fuzz_") as tmp:
        for seed in range(args.first, args.first + args.count, args.step):
            program = generate(seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome = run_program(program, Path(tmp) / str(seed))
            counts[outcome.kind] += 1
            record = {"seed": seed, "kind": outcome.kind, "reason": outcome.reason, "families": program.families,
                      "failing": outcome.failing, "sizes": outcome.sizes, "example": program.example,
                      "details": outcome.details[:3000] if outcome.kind in FAILING else ""}
            log.write(json.dumps(record) + "\n")
            log.flush()
            if outcome.kind in FAILING:
                (out / f"fail_{seed}.txt").write_text(outcome.report(program))
                (out / f"fail_{seed}.json").write_text(json.dumps(program.to_dict()))
    print(dict(counts))


_SUSPECTS = ("floordiv_inf", "squeeze_dyn", "empty_example", "advwrite", "empty_write", "narrow_mul", "size_branch",
             "loop_small", "small_example", "bitwise", "inplace", "setitem", "branch", "loop", "size_scalar")


def signature(record: dict) -> str:
    """A rough bug class of a failing record, before minimisation.

    Mismatches are split by whether the example size itself is wrong and by the first
    family of a known-fragile kind the program uses; other verdicts by their reason with
    numbers blanked.
    """
    reason = re.sub(r"\b\d+\b", "N", record["reason"])
    if record["kind"] == "MISMATCH" and reason.startswith("outputs differ"):
        at_example = "at example" if record["example"] in record["failing"] else "not at example"
        families = set(record["families"])
        suspect = next((f for f in _SUSPECTS if f in families), "other: " + ",".join(sorted(families)))
        return f"MISMATCH {reason.split(':')[0]}, {at_example} [{suspect}]"
    return f"{record['kind']} {reason[:140]}"


def _summary(args) -> None:
    records = [json.loads(line) for line in open(Path(args.out) / "records.jsonl")]
    counts = collections.Counter(r["kind"] for r in records)
    print(f"{len(records)} programs: {dict(counts)}")
    groups = collections.Counter(signature(r) for r in records if r["kind"] != "OK")
    for key, n in groups.most_common():
        print(f"{n:5d}  {key}")


def _minimise(args) -> None:
    out = Path(args.out)
    records = [json.loads(line) for line in open(out / "records.jsonl")]
    done = {json.loads(line)["seed"] for line in open(out / "minimised.jsonl")} if (out / "minimised.jsonl").exists() else set()
    groups = collections.defaultdict(list)
    for r in records:
        if r["kind"] in FAILING:
            groups[signature(r)].append(r)
    with open(out / "minimised.jsonl", "a") as log, tempfile.TemporaryDirectory(prefix="fuzzmin_") as tmp:
        for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            for r in members[: args.per_class]:
                if r["seed"] in done:
                    continue
                saved = out / f"fail_{r['seed']}.json"
                program = Program.from_dict(json.loads(saved.read_text())) if saved.exists() else generate(r["seed"])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    outcome = run_program(program, Path(tmp) / "first")
                    if outcome.kind not in FAILING:
                        continue
                    small, small_outcome = minimise(program, outcome, Path(tmp) / str(r["seed"]), budget=args.budget)
                (out / f"min_{r['seed']}.txt").write_text(small_outcome.report(small))
                log.write(json.dumps({"seed": r["seed"], "class": key, "kind": small_outcome.kind, "reason": small_outcome.reason,
                                      "families": sorted({s.family for s in small.stmts}),
                                      "statements": len(small.stmts), "group_size": len(members)}) + "\n")
                log.flush()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m fuzz")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--first", type=int, default=0)
    run.add_argument("--count", type=int, default=100)
    run.add_argument("--step", type=int, default=1)
    run.add_argument("--out", required=True)
    run.add_argument("--focus", default="", help="generators drawn more often, e.g. fft,stft,resize")
    run.add_argument("--focus-factor", type=float, default=8.0)
    mini = sub.add_parser("minimise")
    mini.add_argument("--out", required=True)
    mini.add_argument("--per-class", type=int, default=2)
    mini.add_argument("--budget", type=int, default=40)
    summary = sub.add_parser("summary")
    summary.add_argument("--out", required=True)
    args = parser.parse_args()
    {"run": _run, "minimise": _minimise, "summary": _summary}[args.command](args)


if __name__ == "__main__":
    main()
