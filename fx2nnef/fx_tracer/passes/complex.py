"""Complex tensors as real pairs: a complex value of shape ``[..., n]`` becomes the real tensor
``[..., n, 2]`` that ``torch.view_as_real`` gives, and every op on it is rewritten on the pair.

NNEF has no complex type. Models use complex numbers for rotary embeddings
(``torch.polar``, ``view_as_complex``, a complex product, ``view_as_real``), for spectra
(``torch.stft`` in audio front-ends, ``torch.fft.rfft``/``irfft``) and for token mixing
(FNet's ``torch.fft.fftn(x, dim=(1, 2)).real``); ``torch.istft`` resynthesises audio. This pass
covers those (``fft``, ``ifft``, ``rfft``, ``irfft``, ``hfft``, ``ihfft``, ``fftn``/``fft2`` and
their inverse and real forms, with ``n``/``s``, ``dim`` and ``norm``), the elementwise
and shape ops met on the way (``abs``, ``angle``, ``real``/``imag``, ``conj``, products,
sums, powers, ``exp``, transposes, reductions), and refuses any other op on a complex value
with its source line.

Fourier transforms become matmuls with cosine and sine matrices (a DFT). The matrices are
built in the graph from ``torch.arange`` over the transformed length: the phase index
``(k * j) mod N`` is computed in integers and only then scaled by ``2*pi/N`` in floating point,
so every angle is in ``[0, 2*pi)`` and keeps float32 precision whatever N is. Building them from
ops rather than as constants is what lets the transformed length be a dynamic axis (FNet over
a dynamic sequence, an rfft of a whole signal of dynamic length); when the length is static
the whole construction depends on nothing dynamic and the IR folds it into constant matrices,
so a static transform costs the same as with hand-made constants. A DFT by matmul is O(N^2):
right for the sizes of model front-ends (n_fft of a few hundred, FNet sequences), not for
transforms of many thousands of points, which are refused (``_MAX_DFT_ENTRIES``). With ``n``
given, the matrices have a row per input point and the rows from ``n`` on are zero, so one graph
pads shorter inputs and cuts longer ones whatever the (dynamic) input length.

``torch.stft`` frames the (centre-padded) signal with ``Tensor.unfold`` and multiplies the frames
by the DFT matrices with the window folded in; ``torch.istft`` overlap-adds with pads of static
amounts, so the number of frames may be dynamic.

Inside this pass a complex value built here is kept as its (real, imaginary) pair of nodes
besides the stacked pair, so that an op reading only one part (``.real`` after ``fftn``,
``abs``) reads it directly and the parts nobody reads are removed.
"""
from __future__ import annotations

import builtins
import math
import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from ...errors import TraceError

_MUL = {operator.mul, torch.mul, "mul"}
_DIV = {operator.truediv, torch.div, torch.true_divide, "div", "true_divide"}
_ADD_SUB = {operator.add: operator.add, torch.add: operator.add, "add": operator.add,
            operator.sub: operator.sub, torch.sub: operator.sub, "sub": operator.sub}
_SAME = {"contiguous", "clone", "detach"}
_RESHAPE = {"reshape", "view"}
_UNSQUEEZE = {torch.unsqueeze, "unsqueeze"}
_ABS = {torch.abs, "abs"}
_ANGLE = {torch.angle, "angle"}
_CONJ = {torch.conj, "conj", torch.conj_physical, "conj_physical", torch.resolve_conj, "resolve_conj",
         torch.resolve_neg, "resolve_neg"}
_NEG = {operator.neg, torch.neg, "neg"}
_POW = {operator.pow, torch.pow, "pow"}
_EXP = {torch.exp, "exp"}
_TRANSPOSE = {torch.transpose, "transpose", torch.swapaxes, "swapaxes", torch.swapdims, "swapdims"}
_PERMUTE = {torch.permute, "permute"}
_MOVEDIM = {torch.movedim, "movedim", torch.moveaxis, "moveaxis"}
_FLATTEN = {torch.flatten, "flatten"}
_SQUEEZE = {torch.squeeze, "squeeze"}
_SIZE = {"size"}
_RANK = {"dim", "ndimension"}
_NUMEL = {"numel", torch.numel}
_REDUCE = {torch.sum: torch.sum, "sum": torch.sum, torch.mean: torch.mean, "mean": torch.mean}

# one-dimensional transforms: sign of the exponent, output kind, whether it is an inverse
# (for the normalisation); "c2c": complex out of N points, "r2c": onesided, N//2+1 points of a
# real input, "c2r": N real points from N//2+1 Hermitian bins
_FFT1 = {torch.fft.fft: (-1, "c2c", False), torch.fft.ifft: (1, "c2c", True),
         torch.fft.rfft: (-1, "r2c", False), torch.fft.ihfft: (1, "r2c", True),
         torch.fft.irfft: (1, "c2r", True), torch.fft.hfft: (-1, "c2r", False)}
# n-dimensional transforms: the 1-D transform of the other dims, that of the last dim, default dims
_FFTN = {torch.fft.fftn: (torch.fft.fft, torch.fft.fft, None),
         torch.fft.ifftn: (torch.fft.ifft, torch.fft.ifft, None),
         torch.fft.rfftn: (torch.fft.fft, torch.fft.rfft, None),
         torch.fft.irfftn: (torch.fft.ifft, torch.fft.irfft, None),
         torch.fft.fft2: (torch.fft.fft, torch.fft.fft, (-2, -1)),
         torch.fft.ifft2: (torch.fft.ifft, torch.fft.ifft, (-2, -1)),
         torch.fft.rfft2: (torch.fft.fft, torch.fft.rfft, (-2, -1)),
         torch.fft.irfft2: (torch.fft.ifft, torch.fft.irfft, (-2, -1))}
_STFT = {torch.functional.stft, torch.stft, "stft"}
_ISTFT = {torch.istft, "istft"}
_ISTFT_ARGS = ("input", "n_fft", "hop_length", "win_length", "window", "center", "normalized", "onesided",
               "length", "return_complex")
_STFT_ARGS = ("input", "n_fft", "hop_length", "win_length", "window", "center", "pad_mode", "normalized",
              "onesided", "return_complex", "align_to_window")
# the largest DFT matrix built (entries): a matmul DFT costs N^2 and its matrices, constants when
# N is static, are written into the asset (4096 x 4096 float32 is 64 MB each)
_MAX_DFT_ENTRIES = 1 << 24
# ops that this pass handles even when neither their inputs nor their output are complex
_ALWAYS = set(_FFT1) | set(_FFTN) | {torch.functional.stft, torch.stft}


def _is_complex(v) -> bool:
    return isinstance(v, torch.Tensor) and v.is_complex()


def _name(node: fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else f"{getattr(t, '__module__', '')}.{getattr(t, '__name__', t)}"


_SIZE_ARITH = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg, int,
               operator.getitem, math.ceil, math.floor, builtins.max, builtins.min}


def _from_sizes(node: fx.Node) -> bool:
    """Whether ``node`` is a number computed from tensor sizes and constants only (no tensor data)."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        v = n.meta.get("value")
        if n.op == "call_method" and n.target == "size" or \
                n.op == "call_function" and n.target is builtins.getattr and n.args[1] == "shape":
            continue  # the size of a tensor: its data is not read
        if n.op != "call_function" or n.target not in _SIZE_ARITH or isinstance(v, torch.Tensor) \
                or isinstance(v, bool):
            return False
        todo.extend(n.all_input_nodes)
    return True


def _bind(node: fx.Node, names: tuple, defaults: dict, aliases: dict = None) -> dict:
    """The arguments of ``node`` by name (positional ones first, after ``names``)."""
    out = dict(defaults)
    out.update(zip(names, node.args))
    for k, v in node.kwargs.items():
        out[(aliases or {}).get(k, k)] = v
    return out


class _Rewriter:
    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.pair: dict = {}  # complex node -> its real-pair node
        self.split: dict = {}  # real-pair node built here -> its (real, imaginary) nodes
        self.at: fx.Node = None
        self.created: list = []

    # building ---------------------------------------------------------------------------------
    def value(self, a):
        if isinstance(a, fx.Node):
            return a.meta["value"]
        if isinstance(a, (tuple, list)):
            return type(a)(self.value(x) for x in a)
        if isinstance(a, slice):
            return slice(self.value(a.start), self.value(a.stop), self.value(a.step))
        if isinstance(a, dict):
            return {k: self.value(v) for k, v in a.items()}
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
        self.created.append(node)
        return node

    def arith(self, op, a, b):
        """``op(a, b)`` on Python ints or size nodes: a number when both are numbers."""
        if isinstance(a, fx.Node) or isinstance(b, fx.Node):
            return self.call(op, a, b)
        return op(a, b)

    def parts(self, z: fx.Node):
        if z in self.split:
            return self.split[z]
        return self.call(operator.getitem, z, (Ellipsis, 0)), self.call(operator.getitem, z, (Ellipsis, 1))

    def make(self, re: fx.Node, im: fx.Node) -> fx.Node:
        """The pair ``[..., 2]`` of ``re`` and ``im``, remembering its parts."""
        z = self.call(torch.stack, [re, im], dim=-1)
        self.split[z] = (re, im)
        return z

    def size_int(self, v):
        """``v`` as a Python int where it is one or a number computed from tensor sizes only
        (``2 * int(z.shape[-2]) - 2`` of a spectrum's bins), its example value; else ``v``. A
        size that moves with a dynamic axis then makes the graph differ from the model at other
        sizes, which the probes see: the range ends, nothing silent."""
        if isinstance(v, int) or not (isinstance(v, fx.Node) and _from_sizes(v)):
            return v
        return int(v.meta["value"])

    def fail(self, node: fx.Node, why: str):
        raise TraceError(f"complex tensors: {why} ('{_name(node)}' at {node.meta.get('source') or node.name}); "
                         "NNEF has no complex type: write the computation on real and imaginary parts")

    def pair_dim(self, d: int, ndim: int) -> int:
        """The axis of a pair ``[..., 2]`` that is axis ``d`` of the complex value of rank ``ndim``."""
        return d + ndim if d < 0 else d

    # rules ------------------------------------------------------------------------------------
    def rewrite(self, node: fx.Node):
        """The replacement of ``node`` and whether it stands for a complex value."""
        t, args, kw = node.target, node.args, node.kwargs
        p = [self.pair.get(a, a) if isinstance(a, fx.Node) else a for a in args]
        cplx = [isinstance(a, fx.Node) and a in self.pair for a in args]
        ndim = args[0].meta["value"].dim() if args and isinstance(args[0], fx.Node) \
            and isinstance(args[0].meta.get("value"), torch.Tensor) else None
        if t in _FFT1 or t in _FFTN:
            return self.fft(node, t)
        if t in _STFT:
            return self.stft(node)
        if t is torch.polar:
            magnitude, angle = args[0], args[1]
            re = self.call(operator.mul, magnitude, self.call(torch.cos, angle))
            im = self.call(operator.mul, magnitude, self.call(torch.sin, angle))
            return self.make(re, im), True
        if t is torch.complex:
            return self.make(args[0], args[1]), True
        if t is torch.view_as_complex:
            return args[0], True
        if t is torch.view_as_real:
            return p[0], False
        if t in _MUL:
            return self.multiply(node, p, cplx), True
        if t in _DIV and not kw:
            return self.divide(node, p, cplx), True
        if t in _ADD_SUB and not kw:
            return self.add_sub(node, _ADD_SUB[t], p, cplx), True
        if t in _NEG:
            return self.call(operator.neg, p[0]), True
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
            return self.part(p[0], 0 if args[1] == "real" else 1), False
        if t in (torch.real, torch.imag):
            return self.part(p[0], 0 if t is torch.real else 1), False
        if t in _ABS and not kw:
            re, im = self.parts(p[0])
            square = self.call(operator.add, self.call(operator.mul, re, re), self.call(operator.mul, im, im))
            return self.call(torch.sqrt, square), False
        if t in _ANGLE and not kw:
            re, im = self.parts(p[0])
            return self.call(torch.atan2, im, re), False
        if t in _CONJ:
            re, im = self.parts(p[0])
            return self.make(re, self.call(operator.neg, im)), True
        if t in _POW and cplx[0] and not kw and isinstance(args[1], int) and not isinstance(args[1], bool) \
                and 1 <= args[1] <= 8:
            return self.power(p[0], args[1]), True
        if t in _EXP and not kw:
            re, im = self.parts(p[0])
            r = self.call(torch.exp, re)
            return self.make(self.call(operator.mul, r, self.call(torch.cos, im)),
                             self.call(operator.mul, r, self.call(torch.sin, im))), True
        if ndim is not None and cplx[0] and not any(cplx[1:]):
            shaped = self.shape_op(node, t, p, ndim)
            if shaped is not None:
                return shaped, True
        if t in _ISTFT:
            return self.istft(node), False
        if t is F.pad and cplx[0]:
            b = _bind(node, ("input", "pad", "mode", "value"), {"mode": "constant", "value": None})
            if b["mode"] == "constant" and not b["value"]:  # zeros: both parts padded with zeros
                return self.call(F.pad, p[0], (0, 0) + tuple(b["pad"])), True
        if cplx[0] and ndim is not None:
            meta = self.metadata(node, t, p[0], ndim)
            if meta is not None:
                return meta, False
        self.fail(node, "this op is not supported on complex values")

    def metadata(self, node, t, z, ndim):
        """Sizes and rank of a complex value read from its pair ``[..., 2]``, or None."""
        args = node.args
        if t in _SIZE and len(args) + len(node.kwargs) == 1 or (t is builtins.getattr and args[1] == "shape"):
            return self.call(operator.getitem, self.call("size", z), slice(0, ndim))
        if t in _SIZE:
            d = args[1] if len(args) > 1 else node.kwargs["dim"]
            return self.call("size", z, self.pair_dim(d, ndim))
        if t in _RANK or (t is builtins.getattr and args[1] == "ndim"):
            return self.call(operator.sub, self.call("dim", z), 1)
        if t in _NUMEL:
            return self.call(operator.floordiv, self.call("numel", z), 2)
        return None

    def part(self, z, i):
        if z in self.split:
            return self.split[z][i]
        return self.call(operator.getitem, z, (Ellipsis, i))

    def shape_op(self, node, t, p, ndim):
        """Transposes, permutations, flatten, squeeze and sum/mean over complex axes, or None."""
        args, kw = node.args, node.kwargs
        z = p[0]
        if t in _TRANSPOSE and not kw and len(args) == 3:
            return self.call(torch.transpose, z, self.pair_dim(args[1], ndim), self.pair_dim(args[2], ndim))
        if t in _PERMUTE and not kw:
            dims = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
            return self.call(torch.permute, z, tuple(self.pair_dim(d, ndim) for d in dims) + (ndim,))
        if t in _MOVEDIM and not kw and len(args) == 3:
            def dims(d):
                return tuple(self.pair_dim(x, ndim) for x in d) if isinstance(d, (tuple, list)) \
                    else self.pair_dim(d, ndim)
            return self.call(torch.movedim, z, dims(args[1]), dims(args[2]))
        if t in _FLATTEN:
            b = _bind(node, ("input", "start_dim", "end_dim"), {"start_dim": 0, "end_dim": -1})
            if ndim == 0:
                return self.call(torch.unsqueeze, z, 0)
            return self.call(torch.flatten, z, self.pair_dim(b["start_dim"], ndim), self.pair_dim(b["end_dim"], ndim))
        if t in _SQUEEZE:
            b = _bind(node, ("input", "dim"), {"dim": None})
            d = b["dim"]
            if d is None:
                d = tuple(i for i, s in enumerate(node.args[0].meta["value"].shape) if s == 1)
            d = tuple(self.pair_dim(x, ndim) for x in d) if isinstance(d, (tuple, list)) else self.pair_dim(d, ndim)
            return self.call(torch.squeeze, z, d)
        if t in _REDUCE:
            b = _bind(node, ("input", "dim", "keepdim"), {"dim": None, "keepdim": False})
            if set(b) - {"input", "dim", "keepdim"}:
                return None
            d = b["dim"]
            d = tuple(range(ndim)) if d is None else d
            d = tuple(self.pair_dim(x, ndim) for x in d) if isinstance(d, (tuple, list)) else self.pair_dim(d, ndim)
            return self.call(_REDUCE[t], z, d, keepdim=b["keepdim"])
        return None

    def multiply(self, node, p, cplx):
        a, b = p[0], p[1]
        if cplx[0] and cplx[1]:
            (ar, ai), (br, bi) = self.parts(a), self.parts(b)
            re = self.call(operator.sub, self.call(operator.mul, ar, br), self.call(operator.mul, ai, bi))
            im = self.call(operator.add, self.call(operator.mul, ar, bi), self.call(operator.mul, ai, br))
            return self.make(re, im)
        z, s = (a, b) if cplx[0] else (b, a)
        if isinstance(s, complex):
            re, im = self.parts(z)
            mul = operator.mul
            return self.make(self.call(operator.sub, self.call(mul, re, s.real), self.call(mul, im, s.imag)),
                             self.call(operator.add, self.call(mul, re, s.imag), self.call(mul, im, s.real)))
        if _is_complex(self.value(s)):
            self.fail(node, "a product with a complex constant tensor is not supported")
        return self.call(operator.mul, z, self.scalar_side(s))

    def scalar_side(self, s):
        """A real operand of an op on a pair, broadcast against the pair's last axis."""
        if isinstance(s, fx.Node) and isinstance(self.value(s), torch.Tensor) and self.value(s).dim() > 0:
            return self.call(torch.unsqueeze, s, -1)
        return s

    def divide(self, node, p, cplx):
        a, b = p[0], p[1]
        if cplx[1]:
            (br, bi) = self.parts(b)
            den = self.call(operator.add, self.call(operator.mul, br, br), self.call(operator.mul, bi, bi))
            if cplx[0]:
                ar, ai = self.parts(a)
                re = self.call(operator.add, self.call(operator.mul, ar, br), self.call(operator.mul, ai, bi))
                im = self.call(operator.sub, self.call(operator.mul, ai, br), self.call(operator.mul, ar, bi))
            elif isinstance(a, complex) or _is_complex(self.value(a)):
                self.fail(node, "a division of a complex constant is not supported")
            else:
                re = self.call(operator.mul, a, br)
                im = self.call(operator.neg, self.call(operator.mul, a, bi))
            return self.make(self.call(operator.truediv, re, den), self.call(operator.truediv, im, den))
        if isinstance(b, complex) or _is_complex(self.value(b)):
            self.fail(node, "a division by a complex constant is not supported")
        return self.call(operator.truediv, a, self.scalar_side(b))

    def add_sub(self, node, op, p, cplx):
        a, b = p[0], p[1]
        if cplx[0] and cplx[1]:
            return self.call(op, a, b)
        z, s = (a, b) if cplx[0] else (b, a)
        if _is_complex(self.value(s)):
            self.fail(node, "a sum with a complex constant tensor is not supported")
        re, im = self.parts(z)
        if isinstance(s, complex):
            s, si = s.real, s.imag
            im = self.call(op, im, si) if cplx[0] else self.call(op, si, im)
        elif not cplx[0] and op is operator.sub:
            im = self.call(operator.neg, im)
        return self.make(self.call(op, re, s) if cplx[0] else self.call(op, s, re), im)

    def power(self, z, k: int):
        result, base = None, z
        while k:
            if k & 1:
                result = base if result is None else self.product(result, base)
            k >>= 1
            if k:
                base = self.product(base, base)
        return result

    def product(self, a, b):
        (ar, ai), (br, bi) = self.parts(a), self.parts(b)
        re = self.call(operator.sub, self.call(operator.mul, ar, br), self.call(operator.mul, ai, bi))
        im = self.call(operator.add, self.call(operator.mul, ar, bi), self.call(operator.mul, ai, br))
        return self.make(re, im)

    # Fourier transforms ----------------------------------------------------------------------
    def fft(self, node: fx.Node, t):
        if t in _FFT1:
            b = _bind(node, ("input", "n", "dim", "norm"), {"n": None, "dim": -1, "norm": None}, {"axis": "dim"})
            if b.get("out") is not None:
                self.fail(node, "fft with out= is not supported")
            x = b["input"]
            re, im = self.real_parts(x)
            out = self.dft(node, re, im, t, b["dim"], b["n"], b["norm"])
        else:
            first, last, default = _FFTN[t]
            b = _bind(node, ("input", "s", "dim", "norm"), {"s": None, "dim": default, "norm": None},
                      {"axes": "dim"})
            x = b["input"]
            ndim = self.value(x).dim()
            s, dims = b["s"], b["dim"]
            if dims is None:
                dims = tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
            dims = (dims,) if isinstance(dims, int) else tuple(dims)
            s = (None,) * len(dims) if s is None else tuple(s)
            if len(s) != len(dims) or not dims:
                self.fail(node, "fftn needs as many sizes as dims")
            re, im = self.real_parts(x)
            order = list(range(len(dims)))
            if last is not torch.fft.irfft:  # an r2c transform (last dim) comes first, a c2r one last
                order = order[-1:] + order[:-1]
            out = None
            for i in order:
                kind = last if i == len(dims) - 1 else first
                out = self.dft(node, re, im, kind, dims[i], s[i], b["norm"])
                re, im = out if isinstance(out, tuple) else (out, None)
        if isinstance(out, tuple):
            return self.make(*out), True
        return out, False

    def real_parts(self, x):
        """``(real, imaginary or None)`` of an fft input (None for a real one)."""
        if isinstance(x, fx.Node) and x in self.pair:
            return self.parts(self.pair[x])
        v = self.value(x)
        if not isinstance(v, torch.Tensor):
            self.fail(self.at, "the input of a Fourier transform must be a tensor")
        if not v.is_floating_point():
            x = self.call("to", x, torch.float32)
        return x, None

    def size(self, x, d):
        """The size of axis ``d`` of ``x``, as a graph node (it may be a dynamic axis)."""
        return self.call("size", x, d)

    def dft(self, node, re, im, kind, dim, n, norm):
        """The 1-D transform ``kind`` (a torch.fft function) of ``re + i*im`` (``im`` may be None)
        along ``dim``: ``(re, im)`` of the result, or its real tensor for c2r transforms."""
        sign, mode, inverse = _FFT1[kind]
        if mode == "r2c" and im is not None:
            self.fail(node, f"{kind.__name__} of a complex tensor")
        if norm not in (None, "backward", "ortho", "forward"):
            self.fail(node, f"unknown norm {norm!r}")
        if isinstance(n, fx.Node) and not isinstance(self.value(n), int):
            self.fail(node, "the transform length must be a size")
        ndim = self.value(re).dim()
        if ndim == 0:
            self.fail(node, "a Fourier transform of a scalar")
        d = dim % ndim
        if d != ndim - 1:
            re = self.call(torch.movedim, re, d, -1)
            im = None if im is None else self.call(torch.movedim, im, d, -1)
        length = self.size(re, -1)  # points given along the axis
        if mode == "c2r":
            big_n = self.arith(operator.mul, self.arith(operator.sub, length, 1), 2) if n is None else n
            cols = big_n
        else:
            big_n = length if n is None else n
            cols = big_n if mode == "c2c" else self.arith(operator.add, self.arith(operator.floordiv, big_n, 2), 1)
        # rows: the input points; beyond the points used (n given) their rows are zero
        used = n
        if n is not None and mode == "c2r":
            used = self.arith(operator.add, self.arith(operator.floordiv, n, 2), 1)
        dtype = self.value(re).dtype if self.value(re).dtype in (torch.float32, torch.float64) else torch.float32
        if self.value(re).dtype != dtype:
            re = self.call("to", re, dtype)
            im = None if im is None else self.call("to", im, dtype)
        cos, sin = self.dft_matrices(length, cols, big_n, used, mode == "c2r", dtype)
        # the scale of the normalisation
        if norm == "ortho":
            cos, sin = self.scaled(cos, sin, big_n, dtype, root=True)
        elif (norm in (None, "backward")) == inverse:
            cos, sin = self.scaled(cos, sin, big_n, dtype, root=False)
        # out = (re + i im) (cos + i sign sin)
        mm = torch.matmul
        if mode == "c2r":
            out = self.call(mm, re, cos)
            if im is not None:
                out = self.call(operator.add if sign < 0 else operator.sub, out, self.call(mm, im, sin))
            return out if d == ndim - 1 else self.call(torch.movedim, out, -1, d)
        out_re = self.call(mm, re, cos)
        out_im = self.call(mm, re, sin)
        if sign < 0:
            out_im = self.call(operator.neg, out_im)
        if im is not None:
            ic, is_ = self.call(mm, im, cos), self.call(mm, im, sin)
            out_re = self.call(operator.add if sign < 0 else operator.sub, out_re, is_)
            out_im = self.call(operator.add, out_im, ic)
        if d != ndim - 1:
            out_re, out_im = self.call(torch.movedim, out_re, -1, d), self.call(torch.movedim, out_im, -1, d)
        return out_re, out_im

    def full_window(self, window, win: int, n_fft: int, dtype):
        """The window of an STFT as ``n_fft`` points of ``dtype``: ones when None, centred with zeros
        when shorter (``win_length < n_fft``), as torch.stft and torch.istft take it."""
        if window is None:
            window = self.call(torch.ones, win, dtype=dtype)
        elif self.value(window).dtype != dtype:
            window = self.call("to", window, dtype)
        if win < n_fft:
            left = (n_fft - win) // 2
            window = self.call(F.pad, window, (left, n_fft - win - left))
        return window

    def scaled(self, cos, sin, big_n, dtype, root: bool):
        if isinstance(big_n, int):
            f = 1.0 / (math.sqrt(big_n) if root else big_n)
            return self.call(operator.mul, cos, f), self.call(operator.mul, sin, f)
        nt = self.call(operator.mul, self.call(torch.ones, 1, dtype=dtype), big_n)
        f = self.call(torch.rsqrt, nt) if root else self.call(torch.reciprocal, nt)
        return self.call(operator.mul, cos, f), self.call(operator.mul, sin, f)

    def dft_matrices(self, rows, cols, big_n, used, halved: bool, dtype):
        """``cos`` and ``sin`` of ``2*pi*k*j/N`` for ``k < rows`` and ``j < cols`` (``[rows, cols]``).
        Rows from ``used`` on are zero (an input longer than the transform is cut); with
        ``halved`` (c2r), row k counts twice but for k = 0 and k = N/2 (the bins that are their
        own conjugate mirror)."""
        entries = self.value(rows) * self.value(cols)
        if entries > _MAX_DFT_ENTRIES:
            self.fail(self.at, f"a Fourier transform of {self.value(big_n)} points is computed here as a matmul "
                      f"with {self.value(rows)}x{self.value(cols)} cosine and sine matrices, beyond the "
                      f"{_MAX_DFT_ENTRIES} entries allowed (an FFT has no NNEF form); transform shorter frames")
        k = self.call(torch.arange, rows)
        j = self.call(torch.arange, cols)
        phase = self.call(operator.mul, self.call(operator.getitem, k, (slice(None), None)),
                          self.call(operator.getitem, j, (None, slice(None))))
        phase = self.call(torch.remainder, phase, big_n)  # exact, in integers
        angle = self.call(operator.mul, self.call("to", phase, dtype), 2 * math.pi)
        angle = self.call(operator.truediv, angle, big_n) if isinstance(big_n, fx.Node) else \
            self.call(operator.mul, angle, 1.0 / big_n)
        cos, sin = self.call(torch.cos, angle), self.call(torch.sin, angle)
        weight = None  # per row, in integers, without comparisons
        if halved:
            # 2 - [k == 0] - [2k == N], for 0 <= k <= N/2 (rows further on are cut below)
            is_zero = self.call(torch.clamp, self.call(operator.sub, 1, k), 0, 1)
            twice = self.call(operator.mul, k, 2)
            is_mirror = self.call(operator.sub, 1, self.call(torch.clamp, self.call(operator.sub, big_n, twice), 0, 1))
            weight = self.call(operator.sub, self.call(operator.sub, 2, is_zero), is_mirror)
        if used is not None:
            keep = self.call(torch.clamp, self.call(operator.sub, used, k), 0, 1)
            weight = keep if weight is None else self.call(operator.mul, weight, keep)
        if weight is not None:
            w = self.call(operator.getitem, self.call("to", weight, dtype), (slice(None), None))
            cos, sin = self.call(operator.mul, cos, w), self.call(operator.mul, sin, w)
        return cos, sin

    def stft(self, node: fx.Node):
        b = _bind(node, _STFT_ARGS, {"hop_length": None, "win_length": None, "window": None, "center": True,
                                     "pad_mode": "reflect", "normalized": False, "onesided": None,
                                     "return_complex": None, "align_to_window": None})
        if b.get("align_to_window"):
            self.fail(node, "stft with align_to_window=True is not supported")
        x, n_fft, window = b["input"], self.size_int(b["n_fft"]), b["window"]
        if x in self.pair or _is_complex(self.value(window)):
            self.fail(node, "stft of a complex signal or with a complex window is not supported")
        if not isinstance(n_fft, int):
            self.fail(node, "stft needs n_fft as a Python int")
        hop = self.size_int(b["hop_length"]) if b["hop_length"] is not None else n_fft // 4
        win = self.size_int(b["win_length"]) if b["win_length"] is not None else n_fft
        if not isinstance(hop, int) or not isinstance(win, int):
            self.fail(node, "stft needs hop_length and win_length as Python ints")
        v = self.value(x)
        if v.dim() not in (1, 2):
            self.fail(node, "stft takes a 1-D or 2-D signal")
        dtype = v.dtype if v.dtype in (torch.float32, torch.float64) else torch.float32
        if v.dtype != dtype:
            x = self.call("to", x, dtype)
        if v.dim() == 1:
            x = self.call(torch.unsqueeze, x, 0)
        if b["center"]:
            pad = n_fft // 2
            if b["pad_mode"] == "constant":
                x = self.call(F.pad, x, (pad, pad))
            else:  # torch pads a [1, B, L] view: reflect/replicate/circular pads of one axis
                x = self.call(torch.squeeze, self.call(F.pad, self.call(torch.unsqueeze, x, 0), (pad, pad),
                                                       mode=b["pad_mode"]), 0)
        frames = self.call("unfold", x, -1, n_fft, hop)  # [B, frames, n_fft]
        onesided = True if b["onesided"] is None else b["onesided"]
        cols = n_fft // 2 + 1 if onesided else n_fft
        cos, sin = self.dft_matrices(n_fft, cols, n_fft, None, False, dtype)
        window = self.full_window(window, win, n_fft, dtype)
        w = self.call(operator.getitem, window, (slice(None), None))
        if b["normalized"]:
            w = self.call(operator.mul, w, 1.0 / math.sqrt(n_fft))
        cos, sin = self.call(operator.mul, cos, w), self.call(operator.mul, sin, w)
        re = self.call(torch.transpose, self.call(torch.matmul, frames, cos), -1, -2)
        im = self.call(torch.transpose, self.call(operator.neg, self.call(torch.matmul, frames, sin)), -1, -2)
        if v.dim() == 1:
            re, im = self.call(torch.squeeze, re, 0), self.call(torch.squeeze, im, 0)
        z = self.make(re, im)
        return z, bool(b["return_complex"])

    def istft(self, node: fx.Node):
        """torch.istft of a onesided spectrum: an irfft of each frame, windowed, overlap-added (in
        blocks of gcd(n_fft, hop), with padding by static amounts, so the number of frames may be
        dynamic), divided by the overlap-added squared window, trimmed."""
        b = _bind(node, _ISTFT_ARGS, {"hop_length": None, "win_length": None, "window": None, "center": True,
                                      "normalized": False, "onesided": None, "length": None,
                                      "return_complex": False})
        z, n_fft, window = b["input"], self.size_int(b["n_fft"]), b["window"]
        if not (isinstance(z, fx.Node) and z in self.pair) or b["return_complex"] or b["onesided"] is False:
            self.fail(node, "torch.istft is supported for a complex onesided spectrum and a real output only")
        hop = self.size_int(b["hop_length"]) if b["hop_length"] is not None else n_fft // 4
        win = self.size_int(b["win_length"]) if b["win_length"] is not None else n_fft
        length = b["length"]
        if not all(isinstance(v, int) for v in (n_fft, hop, win)):
            self.fail(node, "torch.istft needs n_fft, hop_length and win_length as Python ints")
        ndim = self.value(z).dim()
        if ndim not in (2, 3) or self.value(z).shape[-2] != n_fft // 2 + 1:
            self.fail(node, "torch.istft takes a [B?, n_fft//2+1, frames] spectrum")
        g = math.gcd(n_fft, hop)
        r, s = n_fft // g, hop // g
        if r > 64:
            self.fail(node, f"torch.istft with n_fft {n_fft} and hop {hop}: the overlap-add would take {r} terms")
        re, im = self.parts(self.pair[z])
        re, im = self.call(torch.transpose, re, -1, -2), self.call(torch.transpose, im, -1, -2)  # [B?, F, bins]
        frames = self.dft(node, re, im, torch.fft.irfft, -1, n_fft, None)  # [B?, F, n_fft]
        dtype = self.value(frames).dtype
        if b["normalized"]:
            frames = self.call(operator.mul, frames, math.sqrt(n_fft))
        window = self.full_window(window, win, n_fft, dtype)
        frames = self.call(operator.mul, frames, window)
        # the squared window of every frame: the same shape as the frames, from the frames' shape
        first = self.call(operator.getitem, frames, (Ellipsis, slice(0, 1)))
        envelope = self.call(operator.mul, self.call(torch.ones_like, first), self.call(operator.mul, window, window))
        y = self.overlap_add(frames, r, s, g)
        env = self.overlap_add(envelope, r, s, g)
        start = n_fft // 2 if b["center"] else 0
        if length is not None:
            # where the frames end before ``length``, zeros as torch: a padding by a static amount
            # (the frames' length may be dynamic), enough at the example and for a length up to
            # a frame past the signal; a longer one would give a shorter output, which the
            # checks at other sizes see
            more = max(n_fft + hop, self.value(length) + start - self.value(y).shape[-1])
            y = self.call(F.pad, y, (0, more))
            env = self.call(F.pad, env, (0, more), value=1.0)
            end = self.arith(operator.add, length, start)
            y, env = (self.call(operator.getitem, t, (Ellipsis, slice(start, end))) for t in (y, env))
        elif start:
            y, env = (self.call(operator.getitem, t, (Ellipsis, slice(start, -start))) for t in (y, env))
        return self.call(operator.truediv, y, env)

    def overlap_add(self, frames, r: int, s: int, g: int):
        """``[..., F, r*g]`` frames every ``s*g`` items, added where they overlap: ``[..., (F-1)*s*g + r*g]``."""
        lead = self.value(frames).dim() - 2
        blocks = self.call(torch.unflatten, frames, -1, (r, g))  # [..., F, r, g]
        out = None
        for j in range(r):
            c = self.call(operator.getitem, blocks, (Ellipsis, slice(j, j + 1), slice(None)))  # [..., F, 1, g]
            if s > 1:  # block j of frame f lands at block f*s + j: s-1 empty blocks after each
                c = self.call(F.pad, c, (0, 0, 0, s - 1))
            c = self.call(torch.flatten, c, lead)  # [..., F*s*g]
            right = (r - s - j) * g
            c = self.call(F.pad, c, (j * g, max(right, 0)))
            if right < 0:
                c = self.call(operator.getitem, c, (Ellipsis, slice(0, right)))
            out = c if out is None else self.call(operator.add, out, c)
        return out

    def run(self) -> bool:
        nodes = list(self.gm.graph.nodes)
        touched = []
        for node in nodes:
            uses_complex = any(isinstance(a, fx.Node) and a in self.pair for a in node.all_input_nodes)
            if node.op == "output":
                if uses_complex:
                    self.fail(node, "a complex output is not supported")
                continue
            if not (uses_complex or _is_complex(node.meta.get("value"))
                    or (node.op in ("call_function", "call_method") and self._always(node))):
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
        for node in reversed(self.created):  # parts and matrices nobody reads
            if not node.users and node.graph is self.gm.graph:
                self.gm.graph.erase_node(node)
        return bool(touched)

    @staticmethod
    def _always(node: fx.Node) -> bool:
        t = node.target
        try:
            return t in _ALWAYS or t == "stft"
        except TypeError:  # an unhashable target
            return False


def complex_to_real(gm: fx.GraphModule) -> bool:
    """Rewrite complex values as real pairs. Returns True if changed."""
    changed = _Rewriter(gm).run()
    if changed:
        gm.recompile()
    return changed
