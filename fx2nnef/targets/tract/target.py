"""TractNNEF: assets for the tract engine, tract extensions allowed, checked in tract."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from ...errors import InvalidArgumentError, spell
from ...ir import WEIGHT_FORMATS, Calibrated, Graph
from ...ir.weight_data import DEFAULT_Q4_0_ROUNDING, Q4_0_ROUNDINGS
from ...ir.fusions import fuse, fused_counts, resolve_fusions
from ...ir.precision import F32_REGIONS, apply_f32_regions, resolve_regions
from ...nnef_emit.emitter import properties_fragment
from ..base import InferenceTarget
from ..tolerance import resolve_tolerance
from .runner import run_tract_many

DEFAULT_TRACT_VERSION = "0.23.9"
# An optional "name:" then a comparison of size expressions.
_ASSERT = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*\s*:\s*)?[A-Za-z_0-9+\-*/() ]+(==|!=|<=|>=|<|>)[A-Za-z_0-9+\-*/() ]+$")


class TractNNEF(InferenceTarget):
    """Export for tract.

    Args:
        version: tract version the asset is written for (recorded in the properties).
        check_io: run the asset in tract (in a child process) and compare with PyTorch. Without
            it the export is cheaper by one forward pass: the model is not run on the example
            inputs first, the eager runs left being a dynamic export's probes.
        dynamic_axes: ``{input_name: {axis: "SYMBOL"}}``; symbols become ``tract_symbol``.
        check_io_tolerance: one of tract's levels (exact, close, approximate, very, super, ultra;
            see fx2nnef.targets.tolerance)
            or a Tolerance.
        specific_properties: extra ``key: value`` strings written in ``tract_core_properties``.
        dump_identity_properties: also record exporter identity (versions) in the properties.
        with_transformers: load with tract_transformers (default: when the asset uses it).
        weights: how float parameters are written. ``"native"`` (their own dtype; bfloat16 as
            float32), ``"f16"`` (float32 parameters as float16: matmuls read them as stored, at
            float32 speed, embedding rows and other uses are cast to float32 where read) or ``"q4_0"`` (Linear and
            Embedding weights, and right operands of mm/addmm/matmul, in tract's Q4_0 blocks,
            per block of 32, scales chosen by ``rounding``; other parameters stay native). The check then compares with the model holding the
            stored (rounded or dequantized) weights; ``result.weights`` says what each
            parameter became and why.
        rounding: how ``"q4_0"`` picks each block's scale: ``"search"`` (the default: the scale
            of least squared error among a few around min-max's; same size and speed, lower
            error in every block, see ``fx2nnef.ir.weight_data``) or ``"minmax"`` (GGML's and
            tract's own quantizer: the largest magnitude is exact). Given, it needs
            ``weights="q4_0"``. ``"gptq"``: the blocks GPTQ found from calibration inputs,
            given by ``calibrated`` (``fx2nnef.llm.calibrate``; ``export_causal_lm`` makes them).
        calibrated: an ``fx2nnef.ir.Calibrated``: Q4_0 blocks found beforehand per parameter
            (for ``rounding="gptq"``; other Q4_0 weights are rounded by the search) and the
            parameters kept in float16 rather than Q4_0. Given, it needs ``weights="q4_0"``.
        asserts: extra assertions on the symbols, e.g. ``["S+P < 128", "tg: S==1"]``, written as
            ``extension tract_assert`` (tract checks them at load, not at run time).
        fused: tract fused ops to rewrite exact patterns into: names among ``"rms_norm"``
            (``tract_core_rms_norm`` / ``tract_core_scaled_rms_norm``), ``"rope"``
            (``tract_transformers_apply_rope``), ``"sdpa"`` (``tract_transformers_sdpa``), or
            ``"all"``; default none. A pattern that does not match exactly stays as it is
            (see ``fx2nnef.ir.fusions``); the graph's ``fx2nnef_fused`` property counts the rewrites.
    """

    name = "tract"
    engine = "tract"
    dynamic_dims = True

    def __init__(self, version: str = DEFAULT_TRACT_VERSION, check_io: bool = True,
                 dynamic_axes: Optional[dict] = None, check_io_tolerance="approximate",
                 specific_properties: Optional[dict] = None, dump_identity_properties: bool = False,
                 with_transformers: Optional[bool] = None, timeout: float = 600.0, weights: str = "native",
                 asserts: Sequence[str] = (), fused=(), force_f32: Sequence[str] = (),
                 rounding: Optional[str] = None, calibrated: Optional[Calibrated] = None):
        try:
            self.force_f32 = resolve_regions(force_f32)
        except ValueError as exc:
            raise InvalidArgumentError(f"{exc} (see TractNNEF's docstring)") from None
        self.f32_regions_found: dict = {}
        if weights not in WEIGHT_FORMATS:
            raise InvalidArgumentError(f"weights must be one of {', '.join(map(repr, WEIGHT_FORMATS))}, got {weights!r} "
                                       "(see TractNNEF's docstring)")
        self.weights = weights
        if rounding is not None and rounding not in Q4_0_ROUNDINGS:
            raise InvalidArgumentError(f"rounding must be one of {', '.join(map(repr, Q4_0_ROUNDINGS))}, got "
                                       f"{rounding!r} (see TractNNEF's docstring)")
        if rounding is not None and weights != "q4_0":
            raise InvalidArgumentError(f"{spell('rounding', rounding)} chooses the scales of Q4_0 weights: pass it "
                                       f"with {spell('weights', 'q4_0')}, or leave it out")
        self.rounding = rounding or DEFAULT_Q4_0_ROUNDING
        self.calibrated = _checked_calibration(self.rounding, calibrated, weights)
        self.version = str(version)
        self.check_io = bool(check_io)
        self.dynamic_axes = dict(dynamic_axes or {})
        self.check_io_tolerance = resolve_tolerance(check_io_tolerance)
        self.specific_properties = dict(specific_properties or {})
        for k, v in self.specific_properties.items():
            if not isinstance(k, str) or not isinstance(v, (str, int, float)):
                raise InvalidArgumentError(f"specific_properties must map strings to str/int/float; got {k!r}: {v!r}")
        self.dump_identity_properties = bool(dump_identity_properties)
        self.with_transformers = with_transformers
        self.timeout = timeout
        self.asserts = list(asserts)
        self.fused = resolve_fusions(fused)
        for a in self.asserts:
            if not isinstance(a, str) or not _ASSERT.match(a):
                raise InvalidArgumentError(f"asserts must be strings such as 'S+P < 128' or 'tg: S==1', got {a!r}")

    def properties(self) -> dict:
        props = {"tract_target_version": self.version}
        if self.dump_identity_properties:
            import platform

            import torch

            from ..._version import __version__

            props.update({"exporter": "fx2nnef", "exporter_version": __version__,
                          "torch_version": torch.__version__, "python_version": platform.python_version()})
        props.update({k: str(v) for k, v in self.specific_properties.items()})
        return props

    def post_trace(self, graph: Graph) -> None:
        """Apply ``force_f32`` (the regions asked for computed in float32), then rewrite the
        patterns of the ``fused`` ops (none by default)."""
        if self.force_f32:
            self.f32_regions_found = apply_f32_regions(graph, self.force_f32)
            missing = [k for k, n in self.f32_regions_found.items() if n == 0]
            if missing:
                raise InvalidArgumentError(
                    f"force_f32={list(self.force_f32)}: no {' and no '.join(missing)} found in the graph "
                    f"(kinds: {', '.join(F32_REGIONS)}; see TractNNEF's docstring); drop "
                    f"{'it' if len(missing) == 1 else 'them'} from force_f32")
        if self.fused:
            fuse(graph, self.fused)

    def specific_asserts(self, graph: Graph) -> list:
        return list(self.asserts)

    def specific_fragments(self, graph: Graph) -> dict:
        """The ``tract_core_properties`` fragment, as tract itself writes it."""
        props = self.properties()
        props.update(_weight_properties(graph, self.weights, self.rounding))
        if self.fused:
            props["fx2nnef_fused"] = ",".join(f"{k}:{n}" for k, n in fused_counts(graph, self.fused).items())
        if self.f32_regions_found:
            props["fx2nnef_force_f32"] = ",".join(f"{k}:{n}" for k, n in self.f32_regions_found.items())
        return {"tract_core_properties": properties_fragment(props)}

    def run(self, asset: Path, input_sets: list) -> list:
        transformers = self.with_transformers
        if transformers is None:
            transformers = _uses_transformers(asset)
        return run_tract_many(asset, input_sets, with_transformers=transformers, timeout=self.timeout)


def _checked_calibration(rounding: str, calibrated, weights: str):
    """``calibrated`` when it fits the options; a one-line error when it does not."""
    if calibrated is not None and not isinstance(calibrated, Calibrated):
        raise InvalidArgumentError(f"calibrated must be an fx2nnef.ir.Calibrated, got {type(calibrated).__name__}")
    if calibrated is not None and weights != "q4_0":
        raise InvalidArgumentError(f"calibrated holds Q4_0 choices: pass it with {spell('weights', 'q4_0')}")
    if rounding == "gptq" and calibrated is None:
        raise InvalidArgumentError(f"{spell('rounding', 'gptq')} needs calibration: the blocks GPTQ finds from the "
                                   "model run on calibration tokens (fx2nnef llm / export_causal_lm compute them; or "
                                   f"pass calibrated=fx2nnef.llm.calibrate(...)), or use {spell('rounding', 'search')}")
    return calibrated


def _weight_properties(graph: Graph, weights: str, rounding: str) -> dict:
    """``fx2nnef_weights`` (the option) and, per stored format, the parameters written in it."""
    if weights == "native":
        return {}
    props = {"fx2nnef_weights": weights, **({"fx2nnef_q4_0_rounding": rounding} if weights == "q4_0" else {})}
    for fmt in ("q4_0", "f16"):
        paths = [v.source.parameter_path or v.name for v in graph.constants() if v.source.stored_format == fmt]
        if paths:
            props[f"fx2nnef_weights_{fmt}"] = ",".join(paths)
    return props


def _uses_transformers(asset: Path) -> bool:
    import tarfile

    path = Path(asset)
    if path.is_dir():
        text = (path / "graph.nnef").read_text()
    else:
        with tarfile.open(path) as tar:
            text = tar.extractfile("graph.nnef").read().decode()
    return "tract_registry tract_transformers" in text
