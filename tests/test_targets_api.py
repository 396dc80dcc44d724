"""A target is one class: what its engine can do, how it runs an asset; variants inherit rules."""
import pytest
import torch

import fx2nnef
from fx2nnef.nnef_emit.registry import TARGETS, Registry, RegistryError, add_target, target_lineage
from fx2nnef.targets import TARGET_CLASSES, KhronosNNEF, TractNNEF
from fx2nnef.targets.tolerance import compare_outputs

VARIANT = "tract_test_variant"


def _variant():
    if VARIANT not in TARGETS:
        add_target(VARIANT, parent="tract")
    return VARIANT


def test_a_variant_finds_its_own_rule_then_its_parents_then_the_common_one():
    name = _variant()
    reg = Registry()
    reg.add("torch.relu", lambda: "common")
    reg.add("torch.relu", lambda: "tract", target="tract")
    reg.add("torch.exp", lambda: "common")
    reg.add("torch.sin", lambda: "variant", target=name)
    assert target_lineage(name) == [name, "tract"]
    assert reg.lookup("torch.relu", name)() == "tract"
    assert reg.lookup("torch.exp", name)() == "common"
    assert reg.lookup("torch.sin", name)() == "variant"
    assert reg.lookup("torch.sin", "tract") is None
    assert reg.lookup("torch.relu", "khronos")() == "common"


def test_a_child_registry_rule_wins_over_its_parents_override():
    name = _variant()
    parent = Registry()
    parent.add("torch.relu", lambda: "parent tract", target="tract")
    child = parent.child()
    child.add("torch.relu", lambda: "child common")
    assert child.lookup("torch.relu", name)() == "child common"


def test_variants_are_declared_once_and_under_a_known_parent():
    _variant()
    with pytest.raises(RegistryError, match="already declared"):
        add_target(VARIANT, parent="tract")
    with pytest.raises(RegistryError, match="unknown parent"):
        add_target("another", parent="trakt")
    with pytest.raises(RegistryError, match="unknown target"):
        Registry().register("torch.relu", target="trakt")


class VariantTract(TractNNEF):
    name = VARIANT


def test_an_export_for_a_variant_uses_its_override_and_the_rest_of_tract(tmp_path):
    _variant()
    from fx2nnef.nnef_emit import REGISTRY

    if REGISTRY.lookup("torch.tanh", VARIANT) is REGISTRY.lookup("torch.tanh", "tract"):
        @REGISTRY.register(torch.tanh, target=VARIANT)
        def tanh_by_exp(ctx, input):
            """tanh(x) = (e - 1) / (e + 1) with e = exp(2x) (a stand-in for a target's own form)."""
            from fx2nnef.nnef_emit.helpers import ew, un

            e = un(ctx, "exp", ew(ctx, "mul", input, 2.0))
            return ew(ctx, "div", ew(ctx, "sub", e, 1.0), ew(ctx, "add", e, 1.0))

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x).relu() + x.softmax(-1)

    x = torch.randn(2, 5)
    r = fx2nnef.export(M(), (x,), tmp_path / "m.nnef.tgz", target=VariantTract(dynamic_axes={"x": {0: "B"}}))
    assert r.check.ok and "exp(" in r.nnef_text and "tanh(" not in r.nnef_text and "softmax(" in r.nnef_text


@pytest.mark.parametrize("name", list(TARGET_CLASSES))
def test_every_built_in_target_is_declared_and_runs_an_asset(name, tmp_path):
    cls = TARGET_CLASSES[name]
    assert name in TARGETS and TARGETS[name].parent is None
    x = torch.randn(3, 4)
    r = fx2nnef.export(torch.nn.Softplus(), (x,), tmp_path / ("m" + cls.asset_suffix), target=cls())
    target = cls()
    target.validate(r.path)
    got = target.run(r.path, [[x.numpy()], [(2 * x).numpy()]])
    expected = [[torch.nn.functional.softplus(inp).numpy()] for inp in (x, 2 * x)]
    assert all(d.ok for e, g in zip(expected, got) for d in compare_outputs(None, e, g, "approximate"))


def test_capabilities_say_what_each_engine_takes():
    assert TractNNEF.dynamic_dims and not KhronosNNEF.dynamic_dims
    assert TractNNEF.asset_suffix == ".nnef.tgz" and KhronosNNEF.asset_suffix == ""
    assert (TractNNEF.bool_bits, KhronosNNEF.bool_bits) == (8, 1)


def test_tract_fold_workaround_stays_out_of_khronos(tmp_path):
    """tract's uniform-mask folding is worked around with a runtime zero (an i64 cast of an
    input), which standard NNEF cannot cast: a broadcast bool and of two computed masks exports
    for Khronos as the plain op (before: "no standard cast from f32 to i64")."""
    from harness import check_op, randn

    r = check_op(lambda x, y: ((x > 0) & (y > 0)).float(), [randn(3, 1), randn(1, 4, seed=1)], tmp_path,
                 target="khronos")
    assert r.check.ok


_EMIT_SILU_ALONE = """
import sys
from fx2nnef.ir import DType, Graph, Node
from fx2nnef.nnef_emit.emitter import emit_graph

g = Graph("g")
x = g.add_input("x", DType.F32, (2, 3))
y = g.new_value("y", DType.F32, (2, 3))
g.add_node(Node("F.silu", (x,), {}, [y]))
g.outputs, g.output_names = [y], ["y"]
assert "fx2nnef.targets.tract" not in sys.modules, "this check needs a process that did not load the target"
print(emit_graph(g, sys.argv[1]).text)
"""


@pytest.mark.parametrize("target", ["tract", "khronos"])
def test_emitting_for_a_target_by_name_loads_its_overrides_in_a_fresh_process(target):
    """emit_graph(graph, "tract") in a process that never imported fx2nnef.targets lowers with the
    target's own rules (its package is loaded when its profile is asked for), as export() does."""
    import subprocess
    import sys

    from fx2nnef.nnef_emit.emitter import emit_graph
    from fx2nnef.ir import DType, Graph, Node

    fresh = subprocess.run([sys.executable, "-c", _EMIT_SILU_ALONE, target], capture_output=True, text=True,
                           timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    g = Graph("g")
    x = g.add_input("x", DType.F32, (2, 3))
    y = g.new_value("y", DType.F32, (2, 3))
    g.add_node(Node("F.silu", (x,), {}, [y]))
    g.outputs, g.output_names = [y], ["y"]
    assert fresh.stdout.strip() == emit_graph(g, target).text.strip()
    assert ("tract_core_silu" in fresh.stdout) == (target == "tract")


def test_an_unknown_target_name_is_an_error_not_the_common_rules():
    from fx2nnef.ir import DType, Graph
    from fx2nnef.nnef_emit.emitter import emit_graph

    g = Graph("g")
    x = g.add_input("x", DType.F32, (2,))
    g.outputs, g.output_names = [x], ["y"]
    with pytest.raises(RegistryError, match="unknown target 'trakt'"):
        emit_graph(g, "trakt")
