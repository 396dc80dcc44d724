"""TractNNEF: assets for the tract engine, tract extensions allowed, checked in tract."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import InvalidArgumentError
from ..ir import Graph
from .base import CheckReport, InferenceTarget
from .tolerance import compare_outputs, resolve_tolerance
from .tract_runner import run_tract_many

DEFAULT_TRACT_VERSION = "0.23.9"


class TractNNEF(InferenceTarget):
    """Export for tract.

    Args:
        version: tract version the asset is written for (recorded in the properties).
        check_io: run the asset in tract (in a child process) and compare with PyTorch.
        dynamic_axes: ``{input_name: {axis: "SYMBOL"}}``; symbols become ``tract_symbol``.
        check_io_tolerance: one of tract's levels (exact, close, approximate, very, super, ultra;
            see fx2nnef.targets.tolerance)
            or a Tolerance.
        specific_properties: extra ``key: value`` strings written in ``tract_core_properties``.
        dump_identity_properties: also record exporter identity (versions) in the properties.
        with_transformers: load with tract_transformers (default: when the asset uses it).
    """

    name = "tract"

    def __init__(self, version: str = DEFAULT_TRACT_VERSION, check_io: bool = True,
                 dynamic_axes: Optional[dict] = None, check_io_tolerance="approximate",
                 specific_properties: Optional[dict] = None, dump_identity_properties: bool = False,
                 with_transformers: Optional[bool] = None, timeout: float = 600.0):
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

    def properties(self) -> dict:
        props = {"tract_target_version": self.version}
        if self.dump_identity_properties:
            import platform

            import torch

            from .._version import __version__

            props.update({"exporter": "fx2nnef", "exporter_version": __version__,
                          "torch_version": torch.__version__, "python_version": platform.python_version()})
        props.update({k: str(v) for k, v in self.specific_properties.items()})
        return props

    def specific_fragments(self, graph: Graph) -> dict:
        """The ``tract_core_properties`` fragment, as tract itself writes it."""
        items = ", ".join(f'("{k}", "{_quote(v)}")' for k, v in sorted(self.properties().items()))
        text = ("fragment tract_core_properties(\n) -> (properties: (string, tensor<scalar>)[])\n{\n"
                f"  properties = [{items}];\n}}")
        return {"tract_core_properties": text}

    def post_export(self, asset: Path, input_names, output_names, cases) -> Optional[CheckReport]:
        if not self.check_io:
            return None
        transformers = self.with_transformers
        if transformers is None:
            transformers = _uses_transformers(asset)
        outputs = run_tract_many(asset, [c.inputs for c in cases], with_transformers=transformers, timeout=self.timeout)
        return CheckReport("tract", [(c.label, compare_outputs(output_names, c.expected, got, self.check_io_tolerance))
                                     for c, got in zip(cases, outputs)])


def _quote(v) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"')


def _uses_transformers(asset: Path) -> bool:
    import tarfile

    path = Path(asset)
    if path.is_dir():
        text = (path / "graph.nnef").read_text()
    else:
        with tarfile.open(path) as tar:
            text = tar.extractfile("graph.nnef").read().decode()
    return "tract_registry tract_transformers" in text
