"""The ``fx2nnef`` command: export a model from a factory or a transformers causal LM folder,
run the built-in demo, diagnose a model piece by piece, print the supported ops.

Every failure ends in one line ``fx2nnef: error: ...`` on stderr saying what is wrong and what
to do (followed by the model's source line where its forward failed), with exit code 2 for a
bad command line and 1 for a failed export; ``--debug`` prints the traceback too. An export
writes its output completely or not at all. Nothing here imports torch before a subcommand
runs: ``--help`` and ``--version`` answer at once.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import re
import sys
import sysconfig
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from ._version import __version__
from .errors import Fx2NnefError, InvalidArgumentError, spellings

# Choices spelled here so that building the parser imports no torch (tests/test_cli_errors.py
# checks them against fx2nnef.targets.TARGET_CLASSES and fx2nnef.ir.WEIGHT_FORMATS).
TARGETS = ("tract", "khronos")
WEIGHT_FORMATS = ("native", "f16", "q4_0")
Q4_0_ROUNDINGS = ("minmax", "search", "gptq")
TOLERANCES = "exact, close, approximate, very, super or ultra"
ARCHIVE_FORMS = "*.nnef.tgz or *.tgz (gzip tar), *.tar (plain tar), or a folder (no suffix, or *.nnef)"

# How messages built by the library name its options on the command line (see fx2nnef.errors.spell).
CLI_SPELLINGS = {
    "overwrite": "--overwrite", "dtype": "--dtype", "weights": "--weights", "force_f32": "--force-f32",
    "fused": "--fused", "generate": "--generate", "check_io_tolerance": "--tolerance", "target": "--target",
    "branches": "--branches", "max_loop_iterations": "--max-loop-iterations", "dynamic_axes": "--dynamic-axes",
    "input_names": "--input-names", "output_names": "--output-names", "last_logits_only": "--last-logits-only",
    "batch_symbol": "--batch-symbol",
    "check": lambda value: "the checks (no --no-check)" if value else "--no-check",
    "check_io": lambda value: "the checks (no --no-check)" if value else "--no-check",
    "fallback": lambda value: "--fallback" if value else "no --fallback",
    "error.report": "written by `fx2nnef diagnose FACTORY --html REPORT.html` (or --json)",
    "diagnose": "`fx2nnef diagnose`",
    "tract_weights": "--target tract --weights ...",
    "tolerance.object": "",
    "verbose": "--verbose", "rounding": "--rounding", "keep_f16": "--keep-f16", "calibration": "--calibration FILE",
    "leaf_modules": "fx2nnef.export(..., leaf_modules=(ItsClass,)) from Python (the command line has no leaf modules)",
    "weights.f16_or_q4_0": "--weights f16 or --weights q4_0",
}


class UserCodeError(Fx2NnefError):
    """The user's own code (a factory, the model's forward run in PyTorch) raised."""


# parsing ---------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one ``fx2nnef: error:`` line (exit code 2)."""

    def error(self, message):
        self.exit(2, f"fx2nnef: error: {message}; see '{self.prog} --help'\n")


class _Version(argparse.Action):
    """``--version``: fx2nnef's and, read from the installed packages' metadata, its engines'."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib import metadata

        found = []
        for dist in ("torch", "tract", "transformers"):
            try:
                found.append(f"{dist} {metadata.version(dist)}")
            except metadata.PackageNotFoundError:
                found.append(f"{dist} not installed")
        print(f"fx2nnef {__version__} ({', '.join(found)})")
        parser.exit(0)


def _count(text: str) -> int:
    """A number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text}")
    return value


def _positive(text: str) -> int:
    """A number >= 1."""
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text}")
    return value


def _names(text: str) -> list:
    """Comma-separated names, none empty."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names (e.g. 'x,mask'), got {text!r}")
    return names


def _dynamic_axes(text: str) -> dict:
    """JSON ``{input or output name: {axis: symbol}}`` -> ``{name: {int axis: symbol}}``."""
    example = 'e.g. \'{"input_ids": {"1": "S"}}\' (name -> {axis: symbol})'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at column {exc.colno}); {example}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}; {example}")
    axes = {}
    for name, dims in parsed.items():
        if not isinstance(dims, dict):
            raise argparse.ArgumentTypeError(f"{name!r} maps to {json.dumps(dims)}, not to {{axis: symbol}}; {example}")
        try:
            axes[name] = {int(axis): symbol for axis, symbol in dims.items()}
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name!r} has an axis that is not a whole number "
                                             f"({', '.join(map(repr, dims))}); {example}") from None
        if not all(isinstance(s, str) and s.strip() for s in axes[name].values()):
            raise argparse.ArgumentTypeError(f"{name!r}: symbols must be names such as \"S\"; {example}")
    return axes


def _strategy(text: str) -> tuple:
    """``MODULE_PATH_OR_CLASS=STRATEGY`` -> (key, strategy)."""
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"expected MODULE_PATH_OR_CLASS=STRATEGY (e.g. LlamaDecoderLayer=ALWAYS), "
                                         f"got {text!r}")
    return key, value


def _add_target_options(p) -> None:
    p.add_argument("--target", choices=TARGETS, default="tract",
                   help="engine the asset is written for and checked in (default: tract)")
    p.add_argument("--dynamic-axes", type=_dynamic_axes, metavar="JSON",
                   help='dynamic dims as JSON, input or output name -> {axis: symbol}, '
                        'e.g. \'{"input_ids": {"1": "S"}}\' (default: all sizes fixed)')
    p.add_argument("--tolerance", default="approximate",
                   help=f"how close the engine must be to PyTorch: {TOLERANCES} (tract's levels; default approximate)")
    p.add_argument("--no-check", action="store_true", help="do not run the asset in the engine")
    p.add_argument("--weights", default="native", choices=WEIGHT_FORMATS,
                   help="how float parameters are written (tract): native, f16, or q4_0 for Linear/Embedding weights")
    _add_rounding_option(p)


def _add_rounding_option(p) -> None:
    p.add_argument("--rounding", choices=Q4_0_ROUNDINGS, help="with --weights q4_0: how each block's scale is "
                   "chosen: search (the default: least squared error, same size), minmax (GGML's), or gptq (fx2nnef "
                   "llm: GPTQ, errors moved onto the inputs not rounded yet, from the model run on calibration tokens)")


def _add_trace_options(p) -> None:
    p.add_argument("--max-loop-iterations", type=_positive, metavar="N",
                   help="steps of every while_loop whose trip count no size bounds (the extra ones keep the carries)")
    p.add_argument("--branches", choices=["select", "example"],
                   help="select: a Python `if` on tensor data exported both ways, merged with select (one on "
                        "sizes is, by default, when it bounds the range); example: every decision keeps the "
                        "example's outcome")


def _add_llm_parser(sub, common) -> None:
    p = sub.add_parser("llm", parents=[common], help="export a local transformers causal LM folder to "
                       "OUT_DIR/model.nnef.tgz with a KV cache, checked in tract")
    p.add_argument("model_dir", help="folder written by save_pretrained (config.json, *.safetensors); no downloads")
    p.add_argument("out_dir", help="folder to write: model.nnef.tgz, fx2nnef.json (what was checked), config and "
                   "tokenizer files; missing parent folders are created")
    p.add_argument("--dtype", choices=["f32", "f16"], help="float type of the asset (default: the model's; bf16 -> "
                   "f32; f16 with --weights q4_0, which tract runs several times faster with f16 activations)")
    p.add_argument("--weights", choices=WEIGHT_FORMATS, help="how float parameters are stored: native (default), "
                   "f16, or q4_0 for Linear/Embedding weights (q4_0 implies --dtype f16 unless --dtype f32 is given)")
    _add_rounding_option(p)
    p.add_argument("--keep-f16", metavar="BUDGET", help="with --weights q4_0: keep in f16 the weights whose rounding "
                   "alone moves the next-token distributions most per byte, within BUDGET: a fraction of the Q4_0 "
                   "weights (0.1) or extra bytes (16MiB, 2000000B)")
    p.add_argument("--calibration", metavar="FILE", help="with --rounding gptq or --keep-f16: a text file, tokenized "
                   "with the folder's tokenizer.json, to calibrate on (default: random tokens of the vocabulary)")
    p.add_argument("--force-f32", metavar="PARTS", help="with --dtype f16: parts computed in f32, comma-separated "
                   "from norms, attention, linear, or all")
    p.add_argument("--generate", type=_count, metavar="N", help="greedy tokens the asset must produce as "
                   "transformers does (default 4; 0: none); given with --no-check, this check still runs")
    p.add_argument("--last-logits-only", action="store_true", help="logits of the last position only")
    p.add_argument("--batch-symbol", action="store_true", help="a symbol B for the batch axis instead of 1")
    p.add_argument("--no-check", action="store_true", help="skip the checks in tract (the export's own, the "
                   "prompt/past/decode modes and, unless --generate is given, the generation)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it exists (once the new one is complete)")
    p.add_argument("--fused", metavar="NAMES", help="tract fused ops where the pattern matches exactly: "
                   "comma-separated among rms_norm, rope, sdpa, or all (default: none)")
    p.set_defaults(func=cmd_llm)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (building it imports no torch)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the full traceback of an error")
    parser = _Parser(prog="fx2nnef", description="Export PyTorch models to NNEF, checked in tract.",
                     epilog="'fx2nnef COMMAND --help' lists a command's options. An error is one 'fx2nnef: error:' "
                            "line on stderr; the exit code is 2 for a bad command line, 1 for a failed export or "
                            "a failing diagnosis; --debug adds the traceback.")
    parser.add_argument("--version", action=_Version, help="print the versions of fx2nnef and of the engines "
                        "and libraries it uses, then exit")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("export", parents=[common], help="export MODULE:FACTORY to OUT (folder, .nnef.tgz or .tar)")
    p.add_argument("factory", help="module:function returning (model, args[, kwargs]), imported from the "
                   "current folder or the Python path")
    p.add_argument("out", help=f"the asset to write: {ARCHIVE_FORMS}; missing parent folders are created")
    p.add_argument("--input-names", type=_names, metavar="NAMES",
                   help="comma-separated names of the asset's inputs (default: the forward's parameter names)")
    p.add_argument("--output-names", type=_names, metavar="NAMES",
                   help="comma-separated names of the asset's outputs (default: from the structure of the "
                   "forward's result)")
    p.add_argument("--fallback", action="store_true", help="if the whole model fails, export it piece by piece "
                   "(failing submodules as custom ops)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists (once the new one is complete)")
    p.add_argument("--verbose", action="store_true", help="list every guard (shape decision) in the summary, "
                   "with the line that decided it")
    _add_target_options(p)
    _add_trace_options(p)
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("demo", parents=[common], help="export a tiny built-in Llama (no download) and check it "
                       "in tract")
    p.add_argument("--out", help="asset to write (default: a new temporary folder)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention implementation")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("diagnose", parents=[common], help="per-submodule export report for MODULE:FACTORY; "
                       "exit code 1 when a submodule fails with no working replacement")
    p.add_argument("factory", help="module:function returning (model, args[, kwargs])")
    p.add_argument("--html", metavar="FILE", help="also write the report as HTML to FILE")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    p.add_argument("--strategy", action="append", type=_strategy, metavar="MODULE=STRATEGY",
                   help="e.g. LlamaDecoderLayer=ALWAYS or model.layers.0=LOCAL (NONE, ONLY_IF_FAILING, ALWAYS, LOCAL)")
    _add_target_options(p)
    _add_trace_options(p)
    p.set_defaults(func=cmd_diagnose)
    _add_llm_parser(sub, common)
    p = sub.add_parser("ops", parents=[common], help="print (or --write) the supported-op page")
    p.add_argument("--write", metavar="FILE", help="write the page to FILE instead of printing it")
    p.set_defaults(func=cmd_ops)
    p = sub.add_parser("run", parents=[common], help="run an asset in tract on INPUTS.npz, after checking the "
                       "inputs against its declared names, shapes and ranges")
    p.add_argument("asset", help="folder, .nnef.tgz or .nnef.tar written by export, or the folder of fx2nnef llm")
    p.add_argument("inputs", help=".npz whose keys are the input names (or arr_0, arr_1, ... in the graph's order)")
    p.add_argument("-o", "--output", metavar="OUT.npz", help="write the outputs there, by output name")
    p.add_argument("--isolate", action="store_true",
                   help="run tract in a child process even when every input size was checked")
    p.set_defaults(func=cmd_run)
    return parser


# commands ---------------------------------------------------------------------------------------
def load_factory(spec: str):
    """``package.module:function`` -> the result of calling it: (model, args[, kwargs])."""
    if ":" not in spec:
        raise InvalidArgumentError(f"expected MODULE:FACTORY (e.g. mypkg.models:make), got {spec!r}")
    mod_name, fn_name = spec.split(":", 1)
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise InvalidArgumentError(f"cannot import module {mod_name!r}: {exc}; run from the folder that holds "
                                   "it or add that folder to PYTHONPATH") from exc
    except Exception as exc:
        raise UserCodeError(f"importing {mod_name!r} raised {_exception_text(exc)}; fix the module") from exc
    factory = getattr(module, fn_name, None)
    if not callable(factory):
        raise InvalidArgumentError(f"{mod_name!r} has no callable {fn_name!r}")
    try:
        made = factory()
    except Exception as exc:
        raise UserCodeError(f"the factory {spec} raised {_exception_text(exc)}; fix the factory") from exc
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise InvalidArgumentError(f"{spec} must return (model, args) or (model, args, kwargs), got {type(made).__name__}")
    model, args = made[0], made[1]
    kwargs = made[2] if len(made) == 3 else {}
    if not isinstance(args, tuple):
        args = (args,)
    return model, args, kwargs


def _target(ns):
    from .targets import TARGET_CLASSES

    cls = TARGET_CLASSES[ns.target]
    options = dict(check_io=not ns.no_check, check_io_tolerance=ns.tolerance, weights=ns.weights)
    if ns.rounding:
        if ns.weights != "q4_0":
            raise InvalidArgumentError("--rounding chooses the scales of Q4_0 weights: pass it with --weights q4_0")
        options["rounding"] = ns.rounding
    if ns.dynamic_axes:
        if not cls.dynamic_dims:
            raise InvalidArgumentError(f"--dynamic-axes: target '{ns.target}' takes static shapes only; "
                                       "use --target tract")
        options["dynamic_axes"] = ns.dynamic_axes
    return cls(**options)


def cmd_export(ns) -> int:
    from .api import export

    target = _target(ns)
    out = _asset_path(ns.out, ns.overwrite)
    model, args, kwargs = load_factory(ns.factory)
    with _parents_made(out):
        with _blamed_on_model(model, args, kwargs, ns.factory):
            result = export(model, args, out, kwargs=kwargs, target=target, input_names=ns.input_names,
                            output_names=ns.output_names, fallback="piece_by_piece" if ns.fallback else None,
                            max_loop_iterations=ns.max_loop_iterations, branches=ns.branches)
    print(result.summary(verbose=ns.verbose or getattr(ns, "debug", False)))
    return 0


def cmd_demo(ns) -> int:
    """Build a tiny random-weight Llama, export it with a dynamic sequence axis, check it in tract."""
    from .api import export
    from .examples.tiny_llm import example_input_ids, tiny_llama
    from .targets import TractNNEF

    model = tiny_llama(ns.attn)
    ids = example_input_ids(8)
    out = _asset_path(ns.out, True) if ns.out else \
        Path(tempfile.mkdtemp(prefix="fx2nnef_demo_")) / "tiny_llama.nnef.tgz"
    print(f"exporting a tiny LlamaForCausalLM ({sum(p.numel() for p in model.parameters())} parameters, "
          f"attn_implementation={ns.attn!r}) with a dynamic sequence axis S ...")
    with _parents_made(out):
        result = export(model, (ids,), out, target=TractNNEF(dynamic_axes={"input_ids": {1: "S"}}),
                        input_names=["input_ids"], output_names=["logits"])
    print(result)
    return 0


def cmd_diagnose(ns) -> int:
    from .piece_by_piece import diagnose

    strategies = dict(ns.strategy or [])
    model, args, kwargs = load_factory(ns.factory)
    with _blamed_on_model(model, args, kwargs, ns.factory):
        report = diagnose(model, inputs=[(args, kwargs)], target=_target(ns), strategies=strategies,
                          max_loop_iterations=ns.max_loop_iterations, branches=ns.branches)
    print(report)
    for path, text in ((ns.html, report.to_html), (ns.json, report.to_json)):
        if path:
            with _parents_made(Path(path)):
                Path(path).write_text(text())
            print(f"wrote {path}")
    failing = [f"{r.label} ({r.class_name})" for r in report.blocking_rows()]
    if report.ok and not failing:
        return 0
    why = (f"{len(failing)} module(s) fail with no working replacement ({', '.join(failing)})" if failing
           else "the whole model fails")
    print(f"fx2nnef: error: {report.model} does not export: {why}; the report above says where and why",
          file=sys.stderr)
    return 1


def cmd_ops(ns) -> int:
    from .docs import supported_ops_markdown

    text = supported_ops_markdown()
    if ns.write:
        with _parents_made(Path(ns.write)):
            Path(ns.write).write_text(text)
        print(f"wrote {ns.write}")
    else:
        print(text)
    return 0


def cmd_run(ns) -> int:
    """Run an asset in tract on the arrays of an .npz (keys: input names, or np.savez's arr_0, ...)."""
    import numpy as np

    from .runtime import run

    try:
        npz = np.load(ns.inputs, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"cannot read {ns.inputs!r} as an .npz of arrays: {exc}") from exc
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise InvalidArgumentError(f"{ns.inputs!r} holds one array, not an .npz: save the inputs with "
                                   "numpy.savez(path, NAME=array, ...)")
    with npz:
        arrays = {key: npz[key] for key in npz.files}
    positional = [f"arr_{i}" for i in range(len(arrays))]
    inputs = [arrays[k] for k in positional] if sorted(arrays) == sorted(positional) else arrays
    outputs = run(ns.asset, inputs, isolate=True if ns.isolate else None)
    for name, value in outputs.items():
        print(f"{name}: shape {list(value.shape)} {value.dtype}")
    if ns.output:
        np.savez(ns.output, **outputs)
        print(f"wrote {ns.output}")
    return 0


def _calibration_tokens(model_dir: str, text_file: str):
    """The text of ``text_file`` as token ids ``[sequences, 128]`` (the last piece dropped when
    shorter), tokenized with ``model_dir``'s tokenizer.json."""
    tokenizer_file = Path(model_dir) / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise InvalidArgumentError(f"--calibration FILE is tokenized with the folder's tokenizer.json, and "
                                   f"{str(model_dir)!r} has none; drop --calibration (random tokens are used)")
    try:
        text = Path(text_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"--calibration {text_file}: cannot read it as UTF-8 text ({exc})") from exc
    import numpy as np
    from tokenizers import Tokenizer

    ids = np.asarray(Tokenizer.from_file(str(tokenizer_file)).encode(text).ids, dtype=np.int64)
    length = min(128, len(ids))
    if length < 8:
        raise InvalidArgumentError(f"--calibration {text_file}: {len(ids)} tokens, too few to calibrate on; give "
                                   "a longer text (a few thousand words)")
    return ids[:len(ids) // length * length].reshape(-1, length)


def cmd_llm(ns) -> int:
    out = Path(ns.out_dir)
    if out.name.lower().endswith((".tgz", ".tar.gz", ".tar", ".zip")):
        raise InvalidArgumentError(f"{ns.out_dir!r} looks like an archive, but OUT_DIR is the folder fx2nnef llm "
                                   "writes (model.nnef.tgz, fx2nnef.json, config and tokenizer files); give a "
                                   "folder name, e.g. 'out/llama'")
    if ns.rounding and ns.weights != "q4_0":
        raise InvalidArgumentError("--rounding chooses the scales of Q4_0 weights: pass it with --weights q4_0")
    calibration = _calibration_tokens(ns.model_dir, ns.calibration) if ns.calibration else None
    # "weights": a stage inside the export's write; "check": the export's, run or not
    with _stage_lines("fx2nnef llm", quiet=("weights", "check") if ns.no_check else ("weights",)):
        from .progress import stage

        stage("load", ns.model_dir)  # importing torch and transformers is part of it
        from .llm import export_causal_lm

        # --generate given with --no-check still runs: an explicit request is not dropped silently
        generate = ns.generate if ns.generate is not None else 0 if ns.no_check else 4
        with _parents_made(out):
            result = export_causal_lm(ns.model_dir, out, dtype=ns.dtype, weights=ns.weights,
                                      last_logits_only=ns.last_logits_only, batch_symbol=ns.batch_symbol,
                                      generate=generate, check=not ns.no_check, overwrite=ns.overwrite,
                                      force_f32=ns.force_f32 or (), rounding=ns.rounding,
                                      keep_f16=ns.keep_f16, calibration=calibration,
                                      **({"fused": ns.fused} if ns.fused else {}))
    print(result)
    return 0


# paths ------------------------------------------------------------------------------------------
def _asset_path(text: str, overwrite: bool) -> Path:
    """OUT checked before any work: a form fx2nnef writes, and not there already unless ``overwrite``."""
    path = Path(text)
    name = path.name.lower()
    if not name.endswith((".tgz", ".tar.gz", ".tar")) and re.fullmatch(r"\.[a-z][a-z0-9]*", path.suffix.lower()) \
            and path.suffix.lower() != ".nnef" and not path.is_dir():
        raise InvalidArgumentError(f"cannot write an NNEF asset to {text!r}: fx2nnef does not write "
                                   f"{path.suffix!r} files; name it {ARCHIVE_FORMS}")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise InvalidArgumentError(f"{text!r} exists: remove it or pass --overwrite")
    return path


@contextmanager
def _parents_made(path: Path):
    """Create ``path``'s missing parent folders; remove them again if the block fails."""
    existing = next(p for p in path.absolute().parents if p.exists())
    if not existing.is_dir():
        raise InvalidArgumentError(f"cannot write {str(path)!r}: {str(existing)!r} is a file, not a folder; "
                                   "choose a path inside a folder")
    made = [p for p in path.parents if not p.exists()]  # deepest first
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(path.parent, os.W_OK):
            raise InvalidArgumentError(f"cannot write in {str(path.parent)!r} (permission denied); choose a "
                                       "folder you can write to")
        yield
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                break
        raise


# errors -----------------------------------------------------------------------------------------
@contextmanager
def _blamed_on_model(model, args, kwargs, factory: str):
    """An error that is not fx2nnef's own, raised while exporting: when the model fails the same
    way run plainly in PyTorch, it is the model's (UserCodeError naming its line); otherwise it
    is fx2nnef's, left as it is."""
    try:
        yield
    except Fx2NnefError:
        raise
    except Exception as exc:
        try:
            import torch

            with torch.no_grad():
                model(*args, **kwargs)
        except Exception as eager:
            raise UserCodeError(f"the model's forward fails in PyTorch on the inputs {factory} returns "
                                f"({_exception_text(eager)}); fix the model or its inputs") from eager
        raise


def describe(exc: BaseException) -> tuple[str, int]:
    """The one line (and the model's source line, if any) an error gives, and the exit code."""
    if isinstance(exc, Fx2NnefError):
        text = str(exc).strip() or type(exc).__name__
        cause = exc.__cause__
        if isinstance(exc, UserCodeError) and cause is not None:
            text = _with_source_line(text, cause)
        return text, 1
    if isinstance(exc, ImportError):
        top = (exc.name or "").split(".")[0]
        if isinstance(exc, ModuleNotFoundError) and top:
            return (f"the Python package {top!r} is not installed ({exc}); install it, e.g. pip install {top}", 1)
        return (f"an import failed ({exc}); check that the installed packages are the versions fx2nnef "
                "requires (pip show fx2nnef)", 1)
    if isinstance(exc, OSError):
        return _os_error_text(exc), 1
    if isinstance(exc, MemoryError):
        return "out of memory; close other programs or export a smaller model", 1
    return _with_source_line(f"internal error, {_exception_text(exc)}; run again with --debug and report the "
                             "traceback", exc), 1


def _os_error_text(exc: OSError) -> str:
    where = f" {str(exc.filename)!r}" if exc.filename else ""
    what = exc.strerror or str(exc)
    advice = {errno.EACCES: "check its permissions or choose another path",
              errno.EPERM: "check its permissions or choose another path",
              errno.EROFS: "choose a path on a writable disk",
              errno.ENOSPC: "free some disk space or choose another disk",
              errno.ENOENT: "check the path",
              errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
              errno.EEXIST: "remove it or choose another path",
              errno.EISDIR: "it is a folder; give a file"}.get(exc.errno, "check the path")
    return f"{what}:{where}; {advice}"


def _exception_text(exc: BaseException) -> str:
    """``Type: first lines of the message`` (one line)."""
    message = " ".join(line.strip() for line in str(exc).split("\n\n")[0].splitlines() if line.strip())
    if len(message) > 400:
        message = message[:400] + " ..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _library_folders() -> tuple:
    """Folders whose code is not the user's: fx2nnef, the standard library, torch, numpy."""
    folders = [str(Path(__file__).parent), sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    for name in ("torch", "numpy"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            folders.append(str(Path(module.__file__).parent))
    return tuple(f.rstrip(os.sep) + os.sep for f in folders)


def _with_source_line(text: str, exc: BaseException) -> str:
    """``text`` and, indented below it, the deepest line of the user's code in ``exc``'s traceback."""
    library = _library_folders()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(library)
              and not f.filename.startswith("<")]
    if not frames:
        return text
    frame = frames[-1]
    try:
        shown = os.path.relpath(frame.filename)
        shown = frame.filename if shown.startswith("..") else shown
    except ValueError:
        shown = frame.filename
    code = f": {frame.line.strip()}" if frame.line else ""
    return f"{text}\n  at {shown}:{frame.lineno}, in {frame.name}{code}"


@contextmanager
def _stage_lines(what: str, quiet=()):
    """One line on stderr as each stage of a long export starts, with the seconds so far
    (stages named in ``quiet`` are not shown)."""
    from .progress import listening

    started, seen = time.perf_counter(), set(quiet)

    def show(name: str, detail: str) -> None:
        if name in seen:
            return
        seen.add(name)
        print(f"{what} [{time.perf_counter() - started:6.1f}s] {name}{': ' + detail if detail else ''}",
              file=sys.stderr, flush=True)

    with listening(show):
        yield


def main(argv=None) -> int:
    """Run the command line; returns the exit code (argparse exits with 2 on a bad command line)."""
    ns = build_parser().parse_args(argv)
    try:
        with spellings(CLI_SPELLINGS):
            try:
                return ns.func(ns)
            except Exception as exc:
                if getattr(ns, "debug", False):
                    traceback.print_exc()
                text, code = describe(exc)
    except KeyboardInterrupt:
        if getattr(ns, "debug", False):
            traceback.print_exc()
        print("fx2nnef: error: interrupted; nothing was written", file=sys.stderr)
        return 130
    print(f"fx2nnef: error: {text}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
