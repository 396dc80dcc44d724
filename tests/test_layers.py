"""The package's layers hold: no module imports from a layer above its own.

The layer order lives here and nowhere else (docs/architecture.md points to it). Every import is
read, including those inside functions, relative or absolute.
"""
import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fx2nnef"

# Bottom first. Parts of one layer do not import each other: the tracer knows nothing of NNEF and
# the emitter nothing of torch.fx.
LAYERS = [
    {"errors", "_version"},
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


# A target's name ("tract", "khronos") compared or given as ``target=``: only its own package
# (``targets/<name>/``) spells it; everything else asks the target's profile.
_TARGET_NAME = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](tract|khronos)["']|["'](tract|khronos)["']\s*(==|!=)"""
                          r"""|target\s*=\s*["'](tract|khronos)["']""")


def test_no_target_name_outside_the_targets_package():
    found = []
    for path, name, _ in _modules():
        if _part(name) == "targets":
            continue
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if _TARGET_NAME.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{k}: {line.strip()}")
    assert not found, ("a target's name outside fx2nnef/targets/ (ask ctx.profile, or register the rule "
                       "under the target's profile in fx2nnef/targets/<name>/lowering/):\n" + "\n".join(found))


def _folder_cycles(folder: str) -> list:
    """The import cycles between the modules of the package folder ``folder`` (dotted), each a
    sorted list of module names; imports inside functions count."""
    known = {name: path for path, name, _ in _modules() if path.name != "__init__.py"}
    graph = {m: set() for m in known if m.rsplit(".", 1)[0] == folder}
    for path, name, package in _modules():
        if name not in graph:
            continue
        for _, module in _imports(path, package):
            while module and module not in known:
                module = module.rsplit(".", 1)[0] if "." in module else ""
            if module in graph and module != name:
                graph[name].add(module)
    cycles, index, low, stack, on = [], {}, {}, [], set()

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


# Folders whose modules still import each other in a circle (issue 40 part 3 unties them).
_KNOWN_CYCLES = {"fx2nnef.fx_tracer"}


@pytest.mark.parametrize("folder", sorted({package for path, name, package in _modules()
                                          if path.name != "__init__.py"} - _KNOWN_CYCLES))
def test_no_import_cycle_inside_a_package_folder(folder):
    cycles = _folder_cycles(folder)
    assert not cycles, (f"modules of {folder} import each other in a circle: "
                        + "; ".join(" -> ".join(c) for c in cycles)
                        + " (move what two modules share down into a third)")


def test_a_cycle_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "fx2nnef" / "loop"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from .a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "fx2nnef")
    assert _folder_cycles("fx2nnef.loop") == [["fx2nnef.loop.a", "fx2nnef.loop.b"]]
