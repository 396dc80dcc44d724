"""Fuzz campaign at scale: thousands of random programs exported raw and run in tract, wrong results by class.

Run by hand from the repository root (it takes minutes to hours; both cores by default):

    python benchmarks/fuzz_campaign.py --count 4000 --seed 100000
    python benchmarks/fuzz_campaign.py --count 400 --seed 200000 --focus advwrite,size_branch,loop_small
    python benchmarks/fuzz_campaign.py --count 400 --seed 300000 --only small_example,advwrite --check-io
    python benchmarks/fuzz_campaign.py --count 1000 --seed 100000 --out /tmp/camp   # reports of failures

Each program (``tests/fuzz``: ``generate(seed)``) is exported with ``check_io=False`` (the raw
export, as a user gets it) at its example size, run in tract at the example and at other
sizes, and compared with eager PyTorch. Printed at the end:

- the verdicts (OK, REFUSED, MISMATCH, CRASH) and the wrong results (MISMATCH and CRASH) by
  class: a class is a generator family or a tag a program carries (``advwrite``,
  ``origin:plain``, ``index:separated``, ``small_example``, ``size_branch``, ``loop_small``,
  ``squeeze_dyn``, ``floordiv_inf``...; ``program.families``), so a program counts in every
  class it uses; the goal is 0 wrong results everywhere;
- REFUSED counts by reason (numbers blanked);
- the slowest programs;
- with ``--check-io``, each program is also exported with the check on: how many of the raw
  wrong results the check catches (a refusal or an error at export) and how many it misses.

``--only FAMILIES`` keeps the programs using one of these families or tags (the others are
generated and skipped, so the seeds stay comparable); ``--focus GENERATORS`` draws these
generators more often (``--focus-factor``, default 8). ``--out DIR`` writes a reproducer of
each failing program (``DIR/fail_<seed>.txt``) and one JSON line per program
(``DIR/records.jsonl``, readable by ``python -m fuzz summary`` / ``minimise`` in tests/).
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

_ARGS = None


def _init(args) -> None:
    global _ARGS
    _ARGS = args
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    from fuzz import generator

    for name in filter(None, args.focus.split(",")):
        generator.FOCUS[name if name.startswith("g_") else "g_" + name] = args.focus_factor


def _one(seed: int) -> dict:
    from fuzz.generator import generate
    from fuzz.runner import FAILING, run_program

    args = _ARGS
    start = time.perf_counter()
    try:
        program = generate(seed)
    except Exception as error:  # noqa: BLE001 - a generator failure is reported, not fatal
        return {"seed": seed, "kind": "NOPROGRAM", "reason": f"{type(error).__name__}: {error}"[:200], "families": [],
                "seconds": time.perf_counter() - start}
    only = set(filter(None, args.only.split(",")))
    if only and not only & set(program.families):
        return {"seed": seed, "kind": "SKIPPED", "families": program.families, "seconds": 0.0}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="fuzzcamp_") as tmp:
        warnings.simplefilter("ignore")
        outcome = run_program(program, Path(tmp) / "raw", timeout=args.timeout)
        record = {"seed": seed, "kind": outcome.kind, "reason": outcome.reason, "families": program.families,
                  "example": program.example, "failing": outcome.failing, "sizes": outcome.sizes}
        if args.check_io:
            checked = run_program(program, Path(tmp) / "checked", timeout=args.timeout, check_io=True)
            record["checked_kind"], record["checked_reason"] = checked.kind, checked.reason
    record["seconds"] = time.perf_counter() - start
    if outcome.kind in FAILING:
        record["details"] = outcome.details[:3000]
        record["report"] = outcome.report(program)
        record["program"] = program.to_dict()
    return record


def _blank(reason: str) -> str:
    return re.sub(r"\b\d+\b", "N", reason)[:150]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="number of seeds")
    parser.add_argument("--seed", type=int, default=100000, help="first seed")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--check-io", action="store_true", help="also export with check_io=True: how many wrong results it catches")
    parser.add_argument("--only", default="", help="keep programs using one of these families/tags (comma separated)")
    parser.add_argument("--focus", default="", help="generators drawn more often, e.g. advwrite,size_branch")
    parser.add_argument("--focus-factor", type=float, default=8.0)
    parser.add_argument("--timeout", type=int, default=120, help="seconds per export / tract run")
    parser.add_argument("--slowest", type=int, default=8, help="how many of the slowest programs to print")
    parser.add_argument("--out", default="", help="folder for records.jsonl and fail_<seed>.txt reproducers")
    args = parser.parse_args(argv)

    seeds = range(args.seed, args.seed + args.count)
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    records, started = [], time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.jobs, initializer=_init, initargs=(args,), maxtasksperchild=50) as pool:
        for k, record in enumerate(pool.imap_unordered(_one, seeds, chunksize=1)):
            records.append(record)
            if record["kind"] in ("MISMATCH", "CRASH"):
                print(f"  {record['kind']} seed {record['seed']}: {record['reason'][:120]}", flush=True)
                if out:
                    (out / f"fail_{record['seed']}.txt").write_text(record["report"])
                    (out / f"fail_{record['seed']}.json").write_text(json.dumps(record["program"]))
            if out:
                with open(out / "records.jsonl", "a") as log:
                    log.write(json.dumps({k: v for k, v in record.items() if k not in ("report", "program")}) + "\n")
            if (k + 1) % 100 == 0:
                print(f"  ... {k + 1}/{len(seeds)} in {time.perf_counter() - started:.0f} s", flush=True)
    elapsed = time.perf_counter() - started
    _print_summary(records, args, elapsed)
    return 0


def _print_summary(records: list, args, elapsed: float) -> None:
    ran = [r for r in records if r["kind"] not in ("SKIPPED", "NOPROGRAM")]
    kinds = collections.Counter(r["kind"] for r in records)
    wrong = [r for r in ran if r["kind"] in ("MISMATCH", "CRASH")]
    print(f"\n{len(ran)} programs run (seeds {args.seed}..{args.seed + args.count - 1}) in {elapsed:.0f} s: {dict(kinds)}")
    print(f"wrong results (MISMATCH + CRASH): {len(wrong)} ({100 * len(wrong) / max(1, len(ran)):.2f}%)")

    per = collections.defaultdict(collections.Counter)
    for r in ran:
        for fam in r["families"]:
            per[fam][r["kind"]] += 1
            per[fam]["programs"] += 1
    print("\nby class (a program counts in every family/tag it uses):")
    print(f"  {'class':32s} {'programs':>8s} {'MISMATCH':>8s} {'CRASH':>6s} {'REFUSED':>7s}")
    for fam, c in sorted(per.items(), key=lambda kv: (-(kv[1]["MISMATCH"] + kv[1]["CRASH"]), kv[0])):
        print(f"  {fam:32s} {c['programs']:8d} {c['MISMATCH']:8d} {c['CRASH']:6d} {c['REFUSED']:7d}")

    if wrong:
        print("\nwrong results:")
        for r in sorted(wrong, key=lambda r: r["seed"]):
            new = [f for f in r["families"] if ":" in f or f in ("advwrite", "small_example", "empty_example", "size_branch",
                                                                  "loop_small", "squeeze_dyn", "floordiv_inf",
                                                                  "narrow_mul", "empty_write", "empty_axis")]
            checked = f" | check_io: {r['checked_kind']} {r.get('checked_reason', '')[:60]}" if "checked_kind" in r else ""
            print(f"  seed {r['seed']} {r['kind']}: {r['reason'][:100]} | example {r.get('example')} "
                  f"wrong at {r.get('failing')} | {', '.join(new)}{checked}")

    refused = collections.Counter(_blank(r["reason"]) for r in ran if r["kind"] == "REFUSED")
    if refused:
        print("\nREFUSED by reason:")
        for reason, n in refused.most_common(25):
            print(f"  {n:5d}  {reason}")

    print(f"\nslowest {args.slowest} programs:")
    for r in sorted(ran, key=lambda r: -r["seconds"])[: args.slowest]:
        print(f"  seed {r['seed']}: {r['seconds']:.1f} s ({r['kind']}, {', '.join(r['families'][:8])})")

    if args.check_io:
        caught = [r for r in wrong if r["checked_kind"] not in ("MISMATCH", "CRASH")]
        missed = [r for r in wrong if r["checked_kind"] in ("MISMATCH", "CRASH")]
        checked_wrong = [r for r in ran if r["checked_kind"] in ("MISMATCH", "CRASH")]
        print(f"\ncheck_io=True: of the {len(wrong)} raw wrong results it catches {len(caught)} and misses {len(missed)}"
              f" (seeds missed: {[r['seed'] for r in missed]}); wrong results with the check on: {len(checked_wrong)}")
        by = collections.Counter(r["checked_kind"] for r in ran)
        print(f"  verdicts with the check on: {dict(by)}")


if __name__ == "__main__":
    sys.exit(main())
