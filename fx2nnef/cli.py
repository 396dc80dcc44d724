"""The ``fx2nnef`` command: export a model from a factory, run the built-in demo, diagnose."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from pathlib import Path

from .errors import Fx2NnefError, InvalidArgumentError


def load_factory(spec: str):
    """``package.module:function`` -> the result of calling it: (model, args[, kwargs])."""
    if ":" not in spec:
        raise InvalidArgumentError(f"expected MODULE:FACTORY (e.g. mypkg.models:make), got {spec!r}")
    mod_name, fn_name = spec.split(":", 1)
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise InvalidArgumentError(f"cannot import module {mod_name!r}: {exc}") from exc
    factory = getattr(module, fn_name, None)
    if not callable(factory):
        raise InvalidArgumentError(f"{mod_name!r} has no callable {fn_name!r}")
    made = factory()
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
    if ns.dynamic_axes:
        if not cls.dynamic_dims:
            raise InvalidArgumentError(f"--dynamic-axes: target '{ns.target}' takes static shapes only")
        dyn = json.loads(ns.dynamic_axes)
        options["dynamic_axes"] = {name: {int(k): v for k, v in axes.items()} for name, axes in dyn.items()}
    return cls(**options)


def cmd_export(ns) -> int:
    from .api import export

    model, args, kwargs = load_factory(ns.factory)
    result = export(model, args, ns.out, kwargs=kwargs, target=_target(ns),
                    input_names=ns.input_names.split(",") if ns.input_names else None,
                    output_names=ns.output_names.split(",") if ns.output_names else None,
                    fallback="piece_by_piece" if ns.fallback else None,
                    max_loop_iterations=ns.max_loop_iterations, branches=ns.branches)
    print(result)
    return 0


def cmd_demo(ns) -> int:
    """Build a tiny random-weight Llama, export it with a dynamic sequence axis, check it in tract."""
    from .api import export
    from .examples.tiny_llm import example_input_ids, tiny_llama
    from .targets import TractNNEF

    model = tiny_llama(ns.attn)
    ids = example_input_ids(8)
    out = Path(ns.out) if ns.out else Path(tempfile.mkdtemp(prefix="fx2nnef_demo_")) / "tiny_llama.nnef.tgz"
    print(f"exporting a tiny LlamaForCausalLM ({sum(p.numel() for p in model.parameters())} parameters, "
          f"attn_implementation={ns.attn!r}) with a dynamic sequence axis S ...")
    result = export(model, (ids,), out, target=TractNNEF(dynamic_axes={"input_ids": {1: "S"}}),
                    input_names=["input_ids"], output_names=["logits"])
    print(result)
    return 0


def cmd_diagnose(ns) -> int:
    from .piece_by_piece import diagnose

    model, args, kwargs = load_factory(ns.factory)
    strategies = {}
    for item in ns.strategy or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgumentError(f"--strategy takes MODULE_PATH_OR_CLASS=STRATEGY, got {item!r}")
        strategies[key] = value
    report = diagnose(model, inputs=[(args, kwargs)], target=_target(ns), strategies=strategies,
                      max_loop_iterations=ns.max_loop_iterations, branches=ns.branches)
    print(report)
    if ns.html:
        Path(ns.html).write_text(report.to_html())
        print(f"wrote {ns.html}")
    if ns.json:
        Path(ns.json).write_text(report.to_json())
        print(f"wrote {ns.json}")
    return 0


def cmd_ops(ns) -> int:
    from .docs import supported_ops_markdown

    text = supported_ops_markdown()
    if ns.write:
        Path(ns.write).write_text(text)
        print(f"wrote {ns.write}")
    else:
        print(text)
    return 0


def cmd_llm(ns) -> int:
    from .llm import export_causal_lm

    result = export_causal_lm(ns.model_dir, ns.out_dir, dtype=ns.dtype, weights=ns.weights,
                              last_logits_only=ns.last_logits_only, batch_symbol=ns.batch_symbol,
                              generate=0 if ns.no_check else ns.generate, check=not ns.no_check, overwrite=ns.overwrite,
                              force_f32=ns.force_f32 or (), **({"fused": ns.fused} if ns.fused else {}))
    print(result)
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


def _add_llm_parser(sub) -> None:
    from .ir import WEIGHT_FORMATS

    p = sub.add_parser("llm", help="export a local transformers causal LM folder to OUT_DIR/model.nnef.tgz with a KV cache")
    p.add_argument("model_dir", help="folder written by save_pretrained (config.json, *.safetensors); no downloads")
    p.add_argument("out_dir")
    p.add_argument("--dtype", choices=["f32", "f16"], help="float type of the asset (default: the model's; bf16 -> f32)")
    p.add_argument("--weights", choices=list(WEIGHT_FORMATS), help="how float parameters are stored (TractNNEF(weights=...))")
    p.add_argument("--force-f32", metavar="PARTS", help="with --dtype f16: parts computed in f32, comma-separated "
                   "from norms, attention, linear, or all (TractNNEF(force_f32=...))")
    p.add_argument("--generate", type=int, default=4, metavar="N", help="greedy tokens checked against transformers (0: none)")
    p.add_argument("--last-logits-only", action="store_true", help="logits of the last position only")
    p.add_argument("--batch-symbol", action="store_true", help="a symbol B for the batch axis instead of 1")
    p.add_argument("--no-check", action="store_true", help="skip the checks in tract")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it exists")
    p.add_argument("--fused", metavar="NAMES", help="tract fused ops where the pattern matches exactly: "
                   "comma-separated among rms_norm, rope, sdpa, or all (default: none)")
    p.set_defaults(func=cmd_llm)


def _add_target_options(p):
    from .targets import TARGET_CLASSES

    p.add_argument("--target", choices=list(TARGET_CLASSES), default="tract")
    p.add_argument("--dynamic-axes", help='JSON, e.g. \'{"input_ids": {"1": "S"}}\'')
    p.add_argument("--tolerance", default="approximate", help="tract's levels: exact|close|approximate|very|super|ultra (default approximate)")
    p.add_argument("--no-check", action="store_true", help="do not run the asset in the engine")
    p.add_argument("--weights", default="native", choices=["native", "f16", "q4_0"],
                   help="how float parameters are written (tract): native, f16, or q4_0 for Linear/Embedding weights")


def _add_trace_options(p):
    p.add_argument("--max-loop-iterations", type=int, metavar="N",
                   help="steps of every while_loop whose trip count no size bounds (the extra ones keep the carries)")
    p.add_argument("--branches", choices=["select", "example"],
                   help="select: a Python `if` on tensor data exported both ways, merged with select (one on "
                        "sizes is, by default, when it bounds the range); example: every decision keeps the "
                        "example's outcome")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fx2nnef", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="export MODULE:FACTORY to OUT (folder, .nnef.tgz or .nnef.tar)")
    p.add_argument("factory", help="module:function returning (model, args[, kwargs])")
    p.add_argument("out")
    p.add_argument("--input-names")
    p.add_argument("--output-names")
    p.add_argument("--fallback", action="store_true", help="fall back to piece-by-piece export")
    _add_target_options(p)
    _add_trace_options(p)
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("demo", help="export a tiny built-in Llama (no download) and check it in tract")
    p.add_argument("--out")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("diagnose", help="per-submodule export report for MODULE:FACTORY")
    p.add_argument("factory")
    p.add_argument("--html")
    p.add_argument("--json")
    p.add_argument("--strategy", action="append", metavar="MODULE=STRATEGY",
                   help="e.g. LlamaDecoderLayer=ALWAYS or model.layers.0=LOCAL (NONE, ONLY_IF_FAILING, ALWAYS, LOCAL)")
    _add_target_options(p)
    _add_trace_options(p)
    p.set_defaults(func=cmd_diagnose)
    _add_llm_parser(sub)
    p = sub.add_parser("ops", help="print (or --write) the supported-op page")
    p.add_argument("--write")
    p.set_defaults(func=cmd_ops)
    p = sub.add_parser("run", help="run an asset in tract on INPUTS.npz, after checking the inputs against its "
                       "declared names, shapes and ranges")
    p.add_argument("asset", help="folder, .nnef.tgz or .nnef.tar written by export, or the folder of fx2nnef llm")
    p.add_argument("inputs", help=".npz whose keys are the input names (or arr_0, arr_1, ... in the graph's order)")
    p.add_argument("-o", "--output", metavar="OUT.npz", help="write the outputs there, by output name")
    p.add_argument("--isolate", action="store_true",
                   help="run tract in a child process even when every input size was checked")
    p.set_defaults(func=cmd_run)
    return parser


def main(argv=None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except Fx2NnefError as exc:
        print(f"fx2nnef: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
