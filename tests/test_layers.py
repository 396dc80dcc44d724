"""The package's layers hold: no module imports from a layer above its own, no sub-package of
a part imports one above it, and the modules of one folder import each other without a cycle.

The layer order lives here and nowhere else (docs/architecture.md points to it). Every import is
read, including those inside functions, relative or absolute: an import moved into a function
does not hide a cycle.
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
    {"errors", "_version", "progress"},
    {"ir"},
    {"fx_tracer", "nnef_emit"},
    {"targets"},
    {"pipeline"},
    {"piece_by_piece"},
    {"api", "runtime"},
    {"llm", "examples", "compat"},
    {"docs", "__init__"},
    {"cli"},
    {"__main__"},
]
LEVEL = {part: i for i, layer in enumerate(LAYERS) for part in layer}

# Inside a part, its sub-packages in order, bottom first; "" is the part's own folder (its modules
# outside any sub-package), which sits on top. A sub-package imports only from those below it.
SUBLAYERS = {
    # tracer, proxy, guards, scoped patches < graph passes < fake replay, probes, ranges < IR building
    # < capture (which runs them all), branches, random_draws, stored_values
    "fx_tracer": ["tracing", "passes", "shapes", "to_ir", ""],
}

# Cycles among the modules of one folder that are known and not yet undone (each a set of module
# names). Remove an entry once its cycle is gone; a cycle not listed fails the test.
KNOWN_CYCLES: dict = {}


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


def _sublayer(module: str) -> str:
    """``fx2nnef.fx_tracer.shapes.probe`` (or the sub-package ``fx2nnef.fx_tracer.shapes``) -> ``shapes``;
    a module of the part's own folder, or the part itself, -> ``""``."""
    parts = module.split(".")
    if len(parts) > 2 and (PACKAGE / parts[1] / parts[2]).is_dir():
        return parts[2]
    return ""


def test_every_sub_package_has_a_sublayer():
    unknown = sorted({f"{name.split('.')[1]}.{_sublayer(name)}" for _, name, _ in _modules()
                      if name.split(".")[1:2] and name.split(".")[1] in SUBLAYERS
                      and _sublayer(name) not in SUBLAYERS[name.split(".")[1]]})
    assert not unknown, f"add these to SUBLAYERS in {__file__}: {unknown}"


def test_no_sub_package_imports_from_one_above_it():
    bad = []
    for path, name, package in _modules():
        part = _part(name)
        if part not in SUBLAYERS:
            continue
        order = SUBLAYERS[part]
        src = _sublayer(name)
        for line, module in _imports(path, package):
            if _part(module) != part:
                continue
            dst = _sublayer(module)
            if order.index(dst) > order.index(src):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} "
                           f"({part}.{src or '(top)'} is below {part}.{dst or '(top)'})")
    assert not bad, "imports against the order of sub-packages:\n" + "\n".join(bad)


def _folder_graphs() -> dict:
    """For each package folder, ``{module: {modules of the same folder it imports}}`` (module names
    without the folder; ``__init__`` left out, sub-packages left out)."""
    graphs: dict = {}
    for path, name, package in _modules():
        if path.name == "__init__.py":
            continue
        folder, mod = name.rsplit(".", 1)
        edges = graphs.setdefault(folder, {}).setdefault(mod, set())
        for _, module in _imports(path, package):
            if module.startswith(folder + "."):
                other = module[len(folder) + 1:].split(".")[0]
                if (path.parent / f"{other}.py").is_file() and other != mod:
                    edges.add(other)
    return graphs


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    out: list = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.add(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(scc)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_inside_a_folder():
    bad = []
    for folder, graph in sorted(_folder_graphs().items()):
        for cycle in _cycles(graph):
            if cycle not in KNOWN_CYCLES.get(folder, []):
                bad.append(f"{folder}: {', '.join(sorted(cycle))}")
    assert not bad, ("import cycles among the modules of one folder (the module two of them share moves down, "
                     "or the shared piece moves to a lower module):\n" + "\n".join(bad))


def test_a_cycle_is_found_through_an_import_inside_a_function():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []


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


def test_a_module_of_a_part_has_its_sub_package():
    assert _sublayer("fx2nnef.fx_tracer.shapes.probe") == "shapes"
    assert _sublayer("fx2nnef.fx_tracer.capture") == ""
    assert _sublayer("fx2nnef.fx_tracer") == ""
    assert _sublayer("fx2nnef.fx_tracer.passes") == "passes"  # the sub-package, as in `from .passes import x`


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
