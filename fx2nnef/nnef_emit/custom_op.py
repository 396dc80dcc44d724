"""Custom ops: a submodule exported on its own, called from its parent's graph as an NNEF fragment.

The tracer keeps such a submodule as one ``call_module`` node (``leaf_names``). Its own IR
graph (traced on the arguments the parent passes it) becomes the body of a fragment whose
parameters are the call's tensors followed by the module's weights; the parent graph
declares each call's weights as variables and calls the fragment::

    fragment custom_Block( x: tensor<scalar>, lin_weight: tensor<scalar>, ... ) -> ( output: tensor<scalar> )
    { ... }
    graph net( x ) -> ( y )
    {
        block0_lin_weight = variable<scalar>(shape = [8, 8], label = 'block0_lin_weight');
        ...
        h = custom_Block(x, block0_lin_weight, ...);
        y = custom_Block(h, block1_lin_weight, ...);
    }

Identical submodules (same class and the same lowered body: same signature, shapes, ops)
share one definition; each call passes its own weights. tract expands fragments at load
time, so a fragment costs nothing at run time.
"""
from __future__ import annotations

import dataclasses

from ..errors import EmitError
from ..ir import Graph, Value, flat_values, unique_name
from .context import EmitContext
from .emitter import emit_fragment
from .profile import TargetProfile
from .registry import REGISTRY, Registry

CUSTOM_OP_PREFIX = "custom_op:"
_NAME_PLACEHOLDER = "__FX2NNEF_FRAGMENT__"


@dataclasses.dataclass
class ModulePlan:
    """How one module is exported: its IR graph, and the submodules it calls as fragments.

    ``children`` maps the module path of a leaf node in ``graph`` (relative to this module)
    to its own plan. Leaf nodes not in ``children`` are lowered by the registry (a module
    extractor).
    """

    class_name: str
    graph: Graph
    children: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class FragmentDef:
    """One module lowered as a fragment: the definition it uses and what its calls need."""

    name: str
    n_inputs: int
    weights: list  # (parameter name, constant Value), passed after the inputs
    used_ops: dict  # NNEF ops of the body (the parent declares their extensions)
    requires: set  # fragment names the body needs, nested ones included
    symbols: list  # tract symbols the body uses


class FragmentLibrary:
    """The fragment definitions of one asset, shared between identical modules."""

    def __init__(self, target: TargetProfile | str, registry: Registry = REGISTRY):
        self.target = target
        self.registry = registry
        self.texts: dict = {}  # fragment name -> definition text
        self.calls: dict = {}  # fragment name -> number of modules using it
        self._by_body: dict = {}  # definition with a placeholder name -> fragment name
        self._requires: dict = {}  # fragment name -> fragments it needs
        self._names: dict = {}  # id(plan) -> fragment name

    def registry_for(self, plan: ModulePlan) -> Registry:
        """A registry lowering ``plan.graph``, with a rule for each fragment-encapsulated leaf.

        Defines the fragments of ``plan.children`` (recursively), renames those leaf nodes'
        kind to ``custom_op:<path>`` and adds the symbols their bodies use to the graph.
        """
        registry = self.registry.child()
        defined: dict = {}
        for node in plan.graph.nodes:
            info = node.kwargs.get("module")
            path = info.get("path") if isinstance(info, dict) else None
            if path not in plan.children:
                continue
            if path not in defined:
                defined[path] = self.define(plan.children[path])
                registry.add(CUSTOM_OP_PREFIX + path, _caller(defined[path], path))
            node.kind = CUSTOM_OP_PREFIX + path
        for fdef in defined.values():
            plan.graph.symbols += [s for s in fdef.symbols if s not in plan.graph.symbols]
        return registry

    def define(self, plan: ModulePlan) -> FragmentDef:
        """Lower ``plan`` as a fragment, reusing an identical existing definition."""
        registry = self.registry_for(plan)
        body = emit_fragment(plan.graph, self.target, _NAME_PLACEHOLDER, registry=registry)
        name = self._by_body.get(body.text)
        if name is None:
            name = self._fresh(f"custom_{plan.class_name}")
            self._by_body[body.text] = name
            self.texts[name] = body.text.replace(_NAME_PLACEHOLDER, name, 1)
        self.texts.update(body.texts)  # loop bodies it defines
        self.calls[name] = self.calls.get(name, 0) + 1
        self._names[id(plan)] = name
        requires = set(body.fragments)
        for nested in body.fragments:
            requires |= self._requires.get(nested, set())
        self._requires[name] = requires
        return FragmentDef(name, len(plan.graph.inputs), body.weights, body.used_ops, requires,
                           list(plan.graph.symbols))

    def name_of(self, plan: ModulePlan) -> str:
        """The fragment that ``plan`` (a child plan already defined) is called as."""
        return self._names[id(plan)]

    def _fresh(self, base: str) -> str:
        return unique_name(base, set(self.texts), first=1)


def _caller(fdef: FragmentDef, path: str):
    """The converter of a leaf node calling module ``path``: declare its weights, call the fragment."""
    weights = [Value(f"{path}.{label}", v.dtype, v.shape, v.source) for label, v in fdef.weights]

    def call_fragment(ctx: EmitContext, *args, module: dict, **kwargs):
        inputs = flat_values((args, kwargs))
        if len(inputs) != fdef.n_inputs:
            raise EmitError(f"the call of '{path}' passes {len(inputs)} tensors but its own export "
                            f"(fragment {fdef.name}) takes {fdef.n_inputs}")
        node_outputs = ctx.node.outputs if ctx.node is not None else []
        outs = ctx.op(fdef.name, *inputs, *weights, n_out=max(len(node_outputs), 1))
        outs = outs if isinstance(outs, tuple) else (outs,)
        for out, ref in zip(outs, node_outputs):
            out.dtype, out.shape = ref.dtype, ref.shape
        for name in {fdef.name} | fdef.requires:
            ctx.use_fragment(name)
        for op, count in fdef.used_ops.items():
            ctx.used_ops[op] = ctx.used_ops.get(op, 0) + count
        return outs[0] if len(outs) == 1 else outs

    return call_fragment
