"""``fx2nnef.export``: trace, lower, write and check a model in one call.

The arguments are checked here and gathered in one :class:`~.pipeline.ExportOptions`; the
stages and their retry policy are in :mod:`fx2nnef.pipeline`.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Optional

import torch

from .errors import InvalidArgumentError, spell
from .fx_tracer.capture import CaptureOptions
from .nnef_emit.archive import check_compression_level
from .nnef_emit.extractors import registered_module_classes
from .pipeline import ExportOptions, export_model
from .targets import InferenceTarget, TractNNEF
from .targets.result import ExportResult


def export(model: torch.nn.Module, args=(), path=None, *, kwargs: Optional[dict] = None,
           target: Optional[InferenceTarget] = None, input_names: Optional[list] = None,
           output_names: Optional[list] = None, fallback: Optional[str] = None,
           leaf_modules: tuple = (), debug_bundle: Optional[str] = None,
           compression_level: Optional[int] = None, progress: Optional[bool] = None,
           max_loop_iterations: Optional[int] = None, branches: Optional[str] = None,
           scalars_as_inputs: bool = False, dynamic_axes: Optional[dict] = None) -> ExportResult:
    """Export ``model(*args, **kwargs)`` to NNEF at ``path`` and check it in ``target``.

    ``dynamic_axes``: ``{input_name: {axis: "SYMBOL"}}`` (or ``{input_name: [axis, ...]}``), the
    axes whose sizes the asset takes as inputs (``result.ranges`` says where a size is bounded),
    as in ``torch.onnx.export``. A target's own
    ``dynamic_axes`` (``TractNNEF(dynamic_axes=...)``, as torch_to_nnef takes them) are used when
    this is None; given both ways they must be equal (otherwise an error says so).

    ``path`` ending in ``.nnef.tgz``/``.tgz``/``.tar.gz`` or ``.tar`` gives an archive (files
    at its root), anything else a folder. The asset is written once, next to ``path``, checked
    there, and renamed to ``path`` only once it has passed the target's checks; on a numerical
    mismatch a debug bundle is kept and its path is given in the error. The weights are read
    from the model's own tensors while they are written (no copy of the model in memory).

    ``compression_level`` (0-9) sets the gzip level of a ``.tgz``; the default, 0, stores
    (float weights shrink by a few percent only, at a tenth of the speed). ``progress``:
    None shows a progress bar (tqdm) over lowering and writing when the weights exceed
    100 MiB and stderr is a terminal; False never, True always.

    ``max_loop_iterations`` bounds every ``torch._higher_order_ops.while_loop``: NNEF has no
    while loop, so the loop becomes that many steps, the extra ones leaving the carries
    unchanged. Without it, a loop is exported only when a size of its carried tensors bounds
    its trip count (``while i < x.size(0)``).

    ``branches``: what becomes of the forward's Python decisions.

    - None (default): a Python ``if`` on the dynamic sizes (``if x.shape[1] < 7:``) whose other
      outcome computes otherwise would make the export valid on the example's side only; it is
      traced both ways instead and, where both outcomes give outputs of the same shapes and
      dtypes, the outputs are merged with select on the same comparison of the sizes, so the
      asset holds on both sides (checked there by the probes and by check_io). Where they cannot
      be merged, the range stays bounded and asserted; where tract fails on the merged graph, the
      export is made again as with ``"example"`` and a note says why. A graph that still differs
      from the model at S=1 only (a one-token step whose shapes hold at S=1) gets the forward
      traced at S=1 beside it, selected where S == 1. A decision on tensor data keeps the
      example's outcome.
    - ``"select"``: in addition, a Python ``if`` on tensor data (``if x.sum() > 0:``,
      ``if t.item() > 0.5:``) is traced both ways and merged with select on the traced condition,
      so the asset is right for either outcome (at most 8 paths through such decisions).
    - ``"example"``: every decision keeps the example's outcome; one on sizes bounds the range.

    ``result.guards`` marks each decision "merged", or says why it could not be merged.

    ``scalars_as_inputs=True``: top-level ``int``/``float`` arguments of ``args``/``kwargs`` become
    rank-0 inputs (int64 / float32, named after the forward's parameters) instead of constants,
    so the asset takes other values of them. A Python decision on such a scalar is a decision on
    input data (see ``result.guards``).
    """
    target = target if target is not None else TractNNEF()
    if path is None:
        raise InvalidArgumentError("export() needs an output path, e.g. 'model.nnef.tgz' or a folder name")
    check_compression_level(compression_level)
    if progress not in (None, True, False):
        raise InvalidArgumentError(f"progress must be None (automatic), True or False, got {progress!r}")
    if fallback not in (None, "piece_by_piece"):
        raise InvalidArgumentError(f"fallback must be None or 'piece_by_piece', got {fallback!r}")
    axes = chosen_dynamic_axes(dynamic_axes, target)
    if fallback == "piece_by_piece":
        if getattr(target, "weights", "native") != "native":
            raise InvalidArgumentError(
                f"{spell('fallback', 'piece_by_piece')} writes weights natively only; got "
                f"{spell('weights', target.weights)}. "
                f"Export without the fallback, or with {spell('weights', 'native')}")
        from .piece_by_piece import export_with_fallback

        if axes != (target.dynamic_axes or {}):  # the diagnosis reads them from the target
            target = copy.copy(target)
            target.dynamic_axes = dict(axes)
        return export_with_fallback(model, args, path, kwargs=kwargs, target=target, input_names=input_names,
                                    output_names=output_names, branches=branches,
                                    max_loop_iterations=max_loop_iterations)
    captured = CaptureOptions(input_names=input_names, output_names=output_names, dynamic_axes=axes,
                              check_io=bool(target.check_io), unroll_while=target.profile.unroll_while,
                              leaf_modules=tuple(leaf_modules) + tuple(registered_module_classes()),
                              max_loop_iterations=max_loop_iterations, branches=branches,
                              scalars_as_inputs=scalars_as_inputs)
    options = ExportOptions(target, captured, debug_bundle, compression_level, progress)
    return export_model(model, args, kwargs or {}, Path(path), options)


def chosen_dynamic_axes(dynamic_axes: Optional[dict], target: InferenceTarget) -> dict:
    """The dynamic axes of an export: export()'s ``dynamic_axes``, else the target's. Given both
    ways, they must be equal; a target of static shapes takes none."""
    own = target.dynamic_axes or {}
    if dynamic_axes is None:
        return own
    if not isinstance(dynamic_axes, dict):
        raise InvalidArgumentError(f"dynamic_axes must be a dict {{input_name: {{axis: 'SYMBOL'}}}}, got "
                                   f"{type(dynamic_axes).__name__}")
    if dynamic_axes and not target.dynamic_dims:
        raise InvalidArgumentError(f"dynamic_axes: {type(target).__name__} exports static shapes only; "
                                   "use TractNNEF for dynamic axes")
    if own and own != dynamic_axes:
        raise InvalidArgumentError(f"dynamic_axes given twice, {dynamic_axes!r} to export() and {own!r} to the "
                                   "target; give them once (export()'s dynamic_axes= is enough)")
    return dynamic_axes
