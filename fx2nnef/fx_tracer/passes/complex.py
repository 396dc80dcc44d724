"""Complex tensors as real pairs: a complex value of shape ``[..., n]`` becomes the real tensor
``[..., n, 2]`` that ``torch.view_as_real`` gives, and every op on it is rewritten on the pair.

NNEF has no complex type. Models use complex numbers for rotary embeddings
(``torch.polar``, ``view_as_complex``, a complex product, ``view_as_real``), which this pass
covers together with the shape ops met on the way; any other op on a complex value is refused
with its source line.
"""
from __future__ import annotations

import builtins
import operator

import torch
import torch.fx as fx

from ...errors import TraceError

_MUL = {operator.mul, torch.mul, "mul"}
_ADD_SUB = {operator.add: operator.add, torch.add: operator.add, "add": operator.add,
            operator.sub: operator.sub, torch.sub: operator.sub, "sub": operator.sub}
_SAME = {"contiguous", "clone", "detach"}
_RESHAPE = {"reshape", "view"}
_UNSQUEEZE = {torch.unsqueeze, "unsqueeze"}


def _is_complex(v) -> bool:
    return isinstance(v, torch.Tensor) and v.is_complex()


def _name(node: fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else f"{getattr(t, '__module__', '')}.{getattr(t, '__name__', t)}"


class _Rewriter:
    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.pair: dict = {}  # complex node -> its real-pair node
        self.at: fx.Node = None

    # building ---------------------------------------------------------------------------------
    def value(self, a):
        if isinstance(a, fx.Node):
            return a.meta["value"]
        if isinstance(a, (tuple, list)):
            return type(a)(self.value(x) for x in a)
        return a

    def call(self, target, *args, **kwargs) -> fx.Node:
        """A new node before the node being rewritten, with its concrete value and source."""
        with self.gm.graph.inserting_before(self.at):
            kind = "call_method" if isinstance(target, str) else "call_function"
            node = self.gm.graph.create_node(kind, target, args, kwargs)
        vals, kvals = self.value(args), self.value(kwargs)
        node.meta["value"] = getattr(vals[0], target)(*vals[1:], **kvals) if kind == "call_method" else \
            target(*vals, **kvals)
        for key in ("source", "module_path", "module_type", "nn_module_stack"):
            if key in self.at.meta:
                node.meta[key] = self.at.meta[key]
        return node

    def parts(self, z: fx.Node):
        return self.call(operator.getitem, z, (Ellipsis, 0)), self.call(operator.getitem, z, (Ellipsis, 1))

    def fail(self, node: fx.Node, why: str):
        raise TraceError(f"complex tensors: {why} ('{_name(node)}' at {node.meta.get('source') or node.name}); "
                         "NNEF has no complex type: write the computation on real and imaginary parts")

    # rules ------------------------------------------------------------------------------------
    def rewrite(self, node: fx.Node):
        """The replacement of ``node`` and whether it stands for a complex value."""
        t, args, kw = node.target, node.args, node.kwargs
        p = [self.pair.get(a, a) if isinstance(a, fx.Node) else a for a in args]
        cplx = [isinstance(a, fx.Node) and a in self.pair for a in args]
        if t is torch.polar:
            magnitude, angle = args[0], args[1]
            re = self.call(operator.mul, magnitude, self.call(torch.cos, angle))
            im = self.call(operator.mul, magnitude, self.call(torch.sin, angle))
            return self.call(torch.stack, [re, im], dim=-1), True
        if t is torch.view_as_complex:
            return args[0], True
        if t is torch.view_as_real:
            return p[0], False
        if t in _MUL:
            return self.multiply(node, p, cplx), True
        if t in _ADD_SUB and all(cplx[:2]) and not kw:
            return self.call(_ADD_SUB[t], p[0], p[1]), True
        if t in _SAME or (t == "to" and not any(isinstance(a, torch.dtype) and not a.is_complex
                                                 for a in list(args[1:]) + list(kw.values()))):
            return p[0], True
        if t in _UNSQUEEZE:
            d = args[1] if len(args) > 1 else kw["dim"]
            return self.call(torch.unsqueeze, p[0], d - 1 if d < 0 else d), True
        if t is operator.getitem:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            return self.call(operator.getitem, p[0], tuple(index) + (slice(None),)), True
        if t in _RESHAPE:
            sizes = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
            return self.call("reshape", p[0], tuple(sizes) + (2,)), True
        if t is builtins.getattr and args[1] in ("real", "imag"):
            return self.call(operator.getitem, p[0], (Ellipsis, 0 if args[1] == "real" else 1)), False
        if t in (torch.real, torch.imag):
            return self.call(operator.getitem, p[0], (Ellipsis, 0 if t is torch.real else 1)), False
        self.fail(node, "this op is not supported on complex values")

    def multiply(self, node, p, cplx):
        a, b = p[0], p[1]
        if cplx[0] and cplx[1]:
            (ar, ai), (br, bi) = self.parts(a), self.parts(b)
            re = self.call(operator.sub, self.call(operator.mul, ar, br), self.call(operator.mul, ai, bi))
            im = self.call(operator.add, self.call(operator.mul, ar, bi), self.call(operator.mul, ai, br))
            return self.call(torch.stack, [re, im], dim=-1)
        z, s = (a, b) if cplx[0] else (b, a)
        if isinstance(s, complex) or _is_complex(self.value(s)):
            self.fail(node, "a product with a complex constant is not supported")
        if isinstance(s, fx.Node) and isinstance(self.value(s), torch.Tensor) and self.value(s).dim() > 0:
            s = self.call(torch.unsqueeze, s, -1)
        return self.call(operator.mul, z, s)

    def run(self) -> bool:
        nodes = list(self.gm.graph.nodes)
        touched = []
        for node in nodes:
            uses_complex = any(isinstance(a, fx.Node) and a in self.pair for a in node.all_input_nodes)
            if node.op == "output":
                if uses_complex:
                    self.fail(node, "a complex output is not supported")
                continue
            if not (uses_complex or _is_complex(node.meta.get("value"))):
                continue
            if node.op not in ("call_function", "call_method"):
                self.fail(node, "a complex input or constant is not supported")
            self.at = node
            new, is_complex = self.rewrite(node)
            touched.append(node)
            if is_complex:
                self.pair[node] = new
            else:
                node.replace_all_uses_with(new)
        for node in reversed(touched):
            if not node.users:
                self.gm.graph.erase_node(node)
        return bool(touched)


def complex_to_real(gm: fx.GraphModule) -> bool:
    """Rewrite complex values as real pairs. Returns True if changed."""
    changed = _Rewriter(gm).run()
    if changed:
        gm.recompile()
    return changed
