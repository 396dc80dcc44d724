"""torch_to_nnef's call on fx2nnef: switch by changing an import.

::

    # from torch_to_nnef import export_model_to_nnef, TractNNEF
    from fx2nnef.compat import export_model_to_nnef, TractNNEF

    export_model_to_nnef(model=model, args=(x,), file_path_export="model.nnef.tgz",
                         inference_target=TractNNEF(version="0.21.13", dynamic_axes={"x": {0: "B"}}),
                         input_names=["x"], output_names=["y"])

:func:`export_model_to_nnef` takes torch_to_nnef's keywords and calls :func:`fx2nnef.export`;
:class:`TractNNEF` and :class:`KhronosNNEF` take torch_to_nnef's constructor keywords and are
fx2nnef's targets. A torch_to_nnef target object (when torch_to_nnef is installed) is read
through its attributes. A keyword fx2nnef has no equivalent for raises
:class:`~fx2nnef.errors.InvalidArgumentError` naming it and saying what to do instead; nothing
is silently dropped.

What maps to what:

- ``file_path_export`` -> ``path``; ``model.nnef.tgz`` is written there (``model.nnef`` becomes
  ``model.nnef.tgz``, as torch_to_nnef writes it); other names follow :func:`fx2nnef.export`.
- ``inference_target`` -> ``target``; ``dynamic_axes`` and ``check_io``, given to the function,
  are set on (a copy of) the target.
- ``compression_level`` -> ``compression_level`` (0-9); ``debug_bundle_path`` -> ``debug_bundle``
  (a folder, written when the check fails); ``custom_extensions`` ``"extension tract_assert ..."``
  -> ``TractNNEF(asserts=[...])``; ``check_io_names_qte_match``: fx2nnef keeps every input, so
  the counts always match.
- ``TractNNEF(check_io_tolerance=, specific_properties=, dump_identity_properties=)`` as is;
  ``force_norm_in_f32`` / ``force_attention_inner_in_f32`` / ``force_linear_accumulation_in_f32``
  -> ``force_f32=["norms" / "attention" / "linear"]`` (a part the graph lacks is skipped, as
  torch_to_nnef does); ``reify_sdpa_operator`` -> ``fused=["sdpa"]``.
- Refused: ``log_level``, ``nnef_variable_naming_scheme``, other ``custom_extensions``,
  ``TractNNEF(feature_flags=, specific_tract_binary_path=, upsample_with_debox=True)``.

fx2nnef's own keywords (``fallback``, ``kwargs``, ``branches``...; ``weights``, ``asserts``,
``fused`` on the targets) are taken too. The function returns fx2nnef's ExportResult.
"""
from __future__ import annotations

import copy
import difflib
import inspect
from collections.abc import KeysView, ValuesView
from pathlib import Path
from typing import Optional

import torch

from .api import export
from .errors import InvalidArgumentError
from .ir import Graph
from .ir.precision import apply_f32_regions
from .targets import InferenceTarget
from .targets import KhronosNNEF as _KhronosNNEF
from .targets import TractNNEF as _TractNNEF
from .targets.tract.target import DEFAULT_TRACT_VERSION

__all__ = ["KhronosNNEF", "TractNNEF", "export_model_to_nnef"]

# torch_to_nnef's force_*_in_f32 flags -> fx2nnef's force_f32 regions
_F32_FLAGS = {"force_norm_in_f32": "norms", "force_attention_inner_in_f32": "attention",
              "force_linear_accumulation_in_f32": "linear"}


def _refused(where: str, keyword: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{where}: {keyword} is not supported by fx2nnef: {why}")


def _version_text(version) -> str:
    """torch_to_nnef's SemanticVersion (``to_str``) or a string."""
    to_str = getattr(version, "to_str", None)
    return to_str() if callable(to_str) else str(version)


def _plain(value):
    """An enum member of torch_to_nnef (``TractCheckTolerance.APPROXIMATE``) as its value."""
    return getattr(value, "value", value)


def _own_options(where: str, options: dict, cls) -> dict:
    """``options`` when they are keywords of fx2nnef's ``cls``; an error naming the first that is not."""
    known = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InvalidArgumentError(f"{where}: unknown keyword {key!r}{hint}; it takes torch_to_nnef's "
                                       f"keywords and fx2nnef's: {', '.join(known)}")
    return options


class TractNNEF(_TractNNEF):
    """fx2nnef's tract target built from torch_to_nnef's ``TractNNEF`` keywords.

    ``version`` is recorded in the asset's properties; the check runs in the tract Python
    package installed here. ``dump_identity_properties`` defaults to True, as in torch_to_nnef
    (fx2nnef records its own and torch's versions, not the host or user). fx2nnef's own
    keywords (``weights``, ``asserts``, ``fused``, ``force_f32``, ``timeout``...) are taken too.
    """

    def __init__(self, version=DEFAULT_TRACT_VERSION, feature_flags=None, check_io: bool = True,
                 dynamic_axes: Optional[dict] = None, specific_tract_binary_path=None,
                 check_io_tolerance="approximate", specific_properties: Optional[dict] = None,
                 dump_identity_properties: bool = True, force_attention_inner_in_f32: bool = False,
                 force_linear_accumulation_in_f32: bool = False, force_norm_in_f32: bool = False,
                 reify_sdpa_operator: bool = False, upsample_with_debox: bool = False, **fx2nnef_options):
        where = "TractNNEF()"
        if feature_flags:
            flags = sorted(str(_plain(f)) for f in feature_flags)
            raise _refused(where, f"feature_flags={flags}",
                           "it exports for tract's standard build and its checks run in the tract Python "
                           "package, which takes no feature flags; drop feature_flags")
        if specific_tract_binary_path is not None:
            raise _refused(where, "specific_tract_binary_path",
                           "the check runs in the tract Python package, not a tract binary; install the "
                           "tract package of the version you need (pip install tract==...) and drop "
                           "specific_tract_binary_path")
        if upsample_with_debox:
            raise _refused(where, "upsample_with_debox=True",
                           "upsampling is written with tract's standard ops; drop upsample_with_debox")
        options = _own_options(where, dict(fx2nnef_options), _TractNNEF)
        flags = {key: value for key, value in (("force_norm_in_f32", force_norm_in_f32),
                                               ("force_attention_inner_in_f32", force_attention_inner_in_f32),
                                               ("force_linear_accumulation_in_f32",
                                                force_linear_accumulation_in_f32)) if value}
        force = options.get("force_f32") or ()
        force = [force] if isinstance(force, str) else list(force)
        # the regions asked by torch_to_nnef's flags: one the graph does not have is no error there
        self._regions_from_flags = tuple(_F32_FLAGS[k] for k in flags if _F32_FLAGS[k] not in force)
        if flags:
            options["force_f32"] = force + list(self._regions_from_flags)
        if reify_sdpa_operator:
            fused = options.get("fused") or ()
            fused = [n.strip() for n in fused.split(",")] if isinstance(fused, str) else list(fused)
            if "all" not in fused and "sdpa" not in fused:
                fused.append("sdpa")
            options["fused"] = fused
        super().__init__(version=_version_text(version), check_io=check_io, dynamic_axes=dynamic_axes,
                         check_io_tolerance=_plain(check_io_tolerance),
                         specific_properties=specific_properties,
                         dump_identity_properties=dump_identity_properties, **options)

    def post_trace(self, graph: Graph) -> None:
        """As fx2nnef's, except that a region asked by a ``force_*_in_f32`` flag and absent from
        the graph is skipped (torch_to_nnef does so), not an error."""
        self.f32_regions_found = {}
        flagged = tuple(k for k in self.force_f32 if k in self._regions_from_flags)
        if not flagged:
            return super().post_trace(graph)
        found = apply_f32_regions(graph, flagged)
        regions, self.force_f32 = self.force_f32, tuple(k for k in self.force_f32 if k not in flagged)
        try:
            super().post_trace(graph)  # fx2nnef's own force_f32 regions, then the fused ops
        finally:
            self.force_f32 = regions
        self.f32_regions_found = {**{k: n for k, n in found.items() if n}, **self.f32_regions_found}

    @classmethod
    def latest_version(cls) -> str:
        """The tract version fx2nnef writes for and checks with."""
        return DEFAULT_TRACT_VERSION

    @classmethod
    def latest(cls) -> "TractNNEF":
        return cls(cls.latest_version())


class KhronosNNEF(_KhronosNNEF):
    """fx2nnef's Khronos target built from torch_to_nnef's ``KhronosNNEF(version, check_io)``
    (static shapes; fx2nnef writes ``version 1.0;`` whatever 1.0.x is asked). fx2nnef's own
    keywords (``check_io_tolerance``, ``weights``) are taken too."""

    def __init__(self, version="1.0.5", check_io: bool = True, **fx2nnef_options):
        options = _own_options("KhronosNNEF()", dict(fx2nnef_options), _KhronosNNEF)
        if "check_io_tolerance" in options:
            options["check_io_tolerance"] = _plain(options["check_io_tolerance"])
        super().__init__(version=_version_text(version), check_io=check_io, **options)

    @classmethod
    def latest(cls) -> "KhronosNNEF":
        return cls()


# attributes of torch_to_nnef's targets read into ours (those an object has)
_T2N_TRACT_ATTRIBUTES = ("version", "feature_flags", "check_io", "dynamic_axes", "check_io_tolerance",
                         "specific_properties", "dump_identity_properties", "force_attention_inner_in_f32",
                         "force_linear_accumulation_in_f32", "force_norm_in_f32", "reify_sdpa_operator",
                         "upsample_with_debox")
_T2N_KHRONOS_ATTRIBUTES = ("version", "check_io")


def _torch_to_nnef_kind(target) -> Optional[str]:
    """"TractNNEF" or "KhronosNNEF" when ``target`` is one of torch_to_nnef's target objects."""
    for cls in type(target).__mro__:
        if cls.__module__.split(".")[0] == "torch_to_nnef" and cls.__name__ in ("TractNNEF", "KhronosNNEF"):
            return cls.__name__
    return None


def as_target(inference_target) -> InferenceTarget:
    """fx2nnef's target for ``inference_target``: one of fx2nnef's targets (those of this module
    included) as it is, torch_to_nnef's ``TractNNEF`` / ``KhronosNNEF`` read through their
    attributes, None as ``TractNNEF()``."""
    if inference_target is None:
        return TractNNEF()
    if isinstance(inference_target, InferenceTarget):
        return inference_target
    kind = _torch_to_nnef_kind(inference_target)
    if kind == "TractNNEF":
        values = {a: getattr(inference_target, a) for a in _T2N_TRACT_ATTRIBUTES if hasattr(inference_target, a)}
        return TractNNEF(**values)
    if kind == "KhronosNNEF":
        values = {a: getattr(inference_target, a) for a in _T2N_KHRONOS_ATTRIBUTES if hasattr(inference_target, a)}
        return KhronosNNEF(**values)
    if isinstance(inference_target, type):
        hint = f"; call it: {inference_target.__name__}(...) or {inference_target.__name__}.latest()"
    else:
        hint = ""
    raise InvalidArgumentError(
        f"export_model_to_nnef(): inference_target must be a TractNNEF(...) or KhronosNNEF(...) (from "
        f"fx2nnef.compat, fx2nnef or torch_to_nnef), got {inference_target!r}{hint}")


# the keywords of fx2nnef.export that have no torch_to_nnef spelling, passed through
_EXPORT_OPTIONS = [p for p in inspect.signature(export).parameters
                   if p not in ("model", "args", "path", "target", "input_names", "output_names",
                                "debug_bundle", "compression_level")]
_T2N_KEYWORDS = ["model", "args", "file_path_export", "inference_target", "input_names", "output_names",
                 "compression_level", "debug_bundle_path", "custom_extensions", "check_io_names_qte_match",
                 "dynamic_axes", "check_io"]
_NOT_SET = object()


def export_model_to_nnef(model: torch.nn.Module, args, file_path_export, inference_target=None,
                         input_names: Optional[list] = None, output_names: Optional[list] = None,
                         compression_level: int = 0, log_level=_NOT_SET, nnef_variable_naming_scheme=_NOT_SET,
                         check_io_names_qte_match: bool = True, debug_bundle_path=None,
                         custom_extensions: Optional[list] = None, *, dynamic_axes: Optional[dict] = None,
                         check_io: Optional[bool] = None, **rest):
    """torch_to_nnef's ``export_model_to_nnef`` on :func:`fx2nnef.export` (see the module's
    docstring for what maps to what). ``dynamic_axes`` and ``check_io`` may be given here or to
    the target. Returns fx2nnef's ExportResult (torch_to_nnef returns None)."""
    where = "export_model_to_nnef()"
    if log_level is not _NOT_SET:
        raise _refused(where, "log_level", "it writes no log: the returned ExportResult and its errors say "
                                           "what happened (progress=True shows a progress bar); drop log_level")
    if nnef_variable_naming_scheme is not _NOT_SET:
        raise _refused(where, "nnef_variable_naming_scheme",
                       "it names variables one way, parameters by their path (fc1_weight) and values by "
                       "the op computing them (linear_1); drop nnef_variable_naming_scheme")
    options = {}
    for key, value in rest.items():
        if key in _EXPORT_OPTIONS:
            options[key] = value
            continue
        if key in ("target", "path"):
            mine = "inference_target" if key == "target" else "file_path_export"
            raise InvalidArgumentError(f"{where}: pass {mine}=..., not {key}= (or call fx2nnef.export)")
        if key in inspect.signature(TractNNEF.__init__).parameters:
            raise InvalidArgumentError(f"{where}: {key} is an option of the target: pass "
                                       f"inference_target=TractNNEF({key}=...)")
        known = _T2N_KEYWORDS + _EXPORT_OPTIONS
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InvalidArgumentError(f"{where}: unknown keyword {key!r}{hint}; it takes torch_to_nnef's keywords "
                                   f"({', '.join(_T2N_KEYWORDS)}) and fx2nnef.export's "
                                   f"({', '.join(_EXPORT_OPTIONS)})")

    target = copy.copy(as_target(inference_target))
    if check_io is not None:
        target.check_io = bool(check_io)
    if dynamic_axes is not None:
        if not target.dynamic_dims:
            raise InvalidArgumentError(f"{where}: dynamic_axes: {type(target).__name__} exports static "
                                       "shapes only; use TractNNEF for dynamic axes")
        if not isinstance(dynamic_axes, dict):
            raise InvalidArgumentError(f"{where}: dynamic_axes must be a dict {{input name: {{axis: 'NAME'}}}} "
                                       f"(or {{name: [axis, ...]}}), got {dynamic_axes!r}")
        if target.dynamic_axes and target.dynamic_axes != dynamic_axes:
            raise InvalidArgumentError(
                f"{where}: dynamic_axes given twice, {dynamic_axes!r} here and {target.dynamic_axes!r} to "
                "the target; give them once")
        target.dynamic_axes = dict(dynamic_axes)
    if custom_extensions is not None:
        target.asserts = list(getattr(target, "asserts", [])) + _asserts_of(where, custom_extensions, target)

    if isinstance(args, torch.Tensor) or isinstance(args, dict):
        args = (args,)
    elif isinstance(args, (list, ValuesView)):
        args = tuple(args)
    if isinstance(input_names, KeysView):
        input_names = list(input_names)
    if isinstance(output_names, KeysView):
        output_names = list(output_names)
    path = Path(file_path_export)
    if path.suffix == ".nnef":  # torch_to_nnef writes model.nnef as model.nnef.tgz
        path = path.with_name(path.name + ".tgz")
    del check_io_names_qte_match  # fx2nnef keeps every input and output: the counts always match
    return export(model, args, path, target=target, input_names=input_names, output_names=output_names,
                  compression_level=compression_level,
                  debug_bundle=None if debug_bundle_path is None else str(debug_bundle_path), **options)


def _asserts_of(where: str, extensions, target) -> list:
    """``custom_extensions`` as TractNNEF asserts: only ``extension tract_assert ...`` is taken."""
    if not isinstance(extensions, list):
        raise InvalidArgumentError(f"{where}: custom_extensions must be a list of strings (they may be order "
                                   f"sensitive), got {extensions!r}")
    asserts = []
    for text in extensions:
        body = text.strip().removeprefix("extension ").strip() if isinstance(text, str) else ""
        name, _, condition = body.partition(" ")
        if name != "tract_assert" or not condition.strip():
            raise _refused(where, f"custom_extensions entry {text!r}",
                           "it writes the extensions its graph uses itself, and takes only "
                           "'extension tract_assert <condition>' (as TractNNEF(asserts=[...])); drop the entry")
        if not hasattr(target, "asserts"):
            raise _refused(where, f"custom_extensions entry {text!r}",
                           f"{type(target).__name__} has no tract_assert; use TractNNEF or drop the entry")
        asserts.append(condition.strip().rstrip(";").strip())
    _TractNNEF(asserts=asserts)  # their form checked as TractNNEF checks its own
    return asserts
