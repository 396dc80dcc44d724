"""The package's layers hold: no module imports from a layer above its own.

The layer order lives here and nowhere else (docs/architecture.md points to it). Every import is
read, including those inside functions, relative or absolute.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fx2nnef"

# Bottom first. Parts of one layer do not import each other: the tracer knows nothing of NNEF and
# the emitter nothing of torch.fx.
LAYERS = [
    {"errors", "_version", "progress"},
    {"ir"},
    {"fx_tracer", "nnef_emit"},
    {"targets"},
    {"piece_by_piece"},
    {"api"},
    {"llm", "examples"},
    {"docs", "__init__"},
    {"cli"},
    {"__main__"},
]
LEVEL = {part: i for i, layer in enumerate(LAYERS) for part in layer}


def _part(module: str) -> str:
    """``fx2nnef.fx_tracer.capture`` -> ``fx_tracer``; the package itself, or a name defined in
    its ``__init__`` (``fx2nnef.export``), -> ``__init__``."""
    parts = module.split(".")
    if len(parts) > 1 and ((PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "__init__"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        is_package = rel.name == "__init__"
        name = ".".join(rel.parts[:-1] if is_package else rel.parts)
        package = name if is_package else name.rsplit(".", 1)[0]
        yield path, name, package


def _imports(path: Path, package: str):
    """``(line, imported module)`` for every import of the package in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "fx2nnef":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "fx2nnef":
                continue
            if node.module is None or module == "fx2nnef":  # `from . import x`, `from .. import x`
                for alias in node.names:
                    yield node.lineno, f"{module}.{alias.name}"
            else:
                yield node.lineno, module


def test_every_part_of_the_package_has_a_layer():
    parts = {_part(name) for _, name, _ in _modules()}
    unknown = sorted(parts - set(LEVEL))
    assert not unknown, f"add these to LAYERS in {__file__}: {unknown}"


def test_no_module_imports_from_a_layer_above_or_beside_it():
    bad = []
    for path, name, package in _modules():
        src = _part(name)
        for line, module in _imports(path, package):
            dst = _part(module)
            if dst == src:
                continue
            if LEVEL[dst] >= LEVEL[src]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} "
                           f"({src} is layer {LEVEL[src]}, {dst} is layer {LEVEL[dst]})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


@pytest.mark.parametrize("source,package,expected", [
    ("from ..ir import Graph", "fx2nnef.targets", "fx2nnef.ir"),
    ("from .. import __version__", "fx2nnef.targets", "fx2nnef.__version__"),
    ("from fx2nnef import export", "fx2nnef.llm", "fx2nnef.export"),
    ("from . import structures", "fx2nnef.fx_tracer", "fx2nnef.fx_tracer.structures"),
    ("def f():\n    import fx2nnef.api", "fx2nnef.targets", "fx2nnef.api"),
])
def test_imports_are_read_inside_functions_and_relative(source, package, expected, tmp_path):
    f = tmp_path / "m.py"
    f.write_text(source)
    assert [m for _, m in _imports(f, package)] == [expected]


def test_a_name_of_the_package_root_is_the_root_layer():
    assert _part("fx2nnef.__version__") == "__init__"
    assert _part("fx2nnef.export") == "__init__"
    assert _part("fx2nnef.ir.dims") == "ir"
    assert _part("fx2nnef._version") == "_version"
