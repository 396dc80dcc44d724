"""Every in-place form on tensors of every origin, exported raw (``check_io=False``) and run in tract.

A tensor the tracer keeps as a constant (a plain attribute, a tensor made with constant sizes, a
closure's or a module global's tensor) must stop being one the moment anything writes to it or to
a view of it. The cases are a product: where the written tensor comes from x how it is written
(item assignment with every index form, ``_`` methods, ``out=``, ``copy_``, writes through views).
Each export is run in tract on the example and on other data, and compared with a fresh eager
model: the raw export is what a user gets, so nothing but tract and PyTorch decides.
"""
from __future__ import annotations

import copy
import itertools

import pytest
import torch

import fx2nnef
from harness import tract_matches_eager

SHAPE = (4, 4, 5)
_GLOBAL = torch.linspace(-1.0, 1.0, 80).reshape(SHAPE)


def _closure_tensor():
    t = torch.linspace(2.0, -2.0, 80).reshape(SHAPE)
    return lambda: t


_CLOSURE = _closure_tensor()


# where the written tensor comes from: origin(module, x) -> the tensor to write into --------------
def _input(m, x):
    return x.clone()


def _input_itself(m, x):
    return x  # the model writes into its own input


def _buffer(m, x):
    return m.buf.clone()


def _parameter(m, x):
    return m.weight.detach().clone()


def _plain_attribute(m, x):
    return m.plain.clone()


def _made_constant(m, x):
    return torch.arange(80, dtype=torch.float32).reshape(SHAPE) / 7


def _made_like(m, x):
    return torch.zeros_like(x) + 0.5


def _closure(m, x):
    return _CLOSURE().clone()


def _module_global(m, x):
    return _GLOBAL.clone()


ORIGINS = {f.__name__[1:]: f for f in (_input, _input_itself, _buffer, _parameter, _plain_attribute,
                                       _made_constant, _made_like, _closure, _module_global)}


# how it is written: form(y, x, idx, mask) -> None (writes y in place) ----------------------------
def _setitem(index_of, value_of, augmented=False):
    def write(y, x, idx, mask):
        index = index_of(idx, mask)
        value = value_of(x, y[index])
        if augmented:
            y[index] += value
        else:
            y[index] = value
    return write


INDEXES = {
    "slice": lambda idx, mask: (slice(None), slice(1, 3)),
    "int": lambda idx, mask: (1,),
    "ellipsis_int": lambda idx, mask: (Ellipsis, 2),
    "ellipsis_tensor": lambda idx, mask: (Ellipsis, idx),
    "tensor_first": lambda idx, mask: (idx[:2],),
    "mask": lambda idx, mask: (mask,),
    "advanced_slice_advanced": lambda idx, mask: (idx[:2], slice(None), idx[1:3]),
    "advanced_range_advanced": lambda idx, mask: (idx[:2], slice(1, 3), idx[1:3]),
    "none_then_tensor": lambda idx, mask: (slice(None), None, idx[:3]),
    "int_tensor": lambda idx, mask: (0, idx[:3]),
    "stepped": lambda idx, mask: (slice(None), slice(0, 4, 2)),
}
VALUES = {
    "scalar": lambda x, region: 0.25,
    "tensor": lambda x, region: torch.tanh(x.sum()) + torch.arange(region.numel(), dtype=x.dtype).reshape(region.shape),
}


def _method(name, *args):
    def write(y, x, idx, mask):
        getattr(y, name)(*[a(x, y) if callable(a) else a for a in args])
    return write


def _out(y, x, idx, mask):
    torch.mul(x, 3.0, out=y)


def _view_then(view, inner):
    def write(y, x, idx, mask):
        inner(view(y), x, idx, mask)
    return write


FORMS = {f"setitem_{i}_{v}": _setitem(INDEXES[i], VALUES[v]) for i, v in itertools.product(INDEXES, VALUES)
         if not (i == "mask" and v == "tensor")}  # as many items as the mask holds: a size from data
FORMS.update({f"augmented_{i}": _setitem(INDEXES[i], VALUES["tensor"], augmented=True)
              for i in ("slice", "ellipsis_tensor", "advanced_range_advanced", "none_then_tensor")})
FORMS.update({
    "add_": _method("add_", lambda x, y: x),
    "mul_scalar_": _method("mul_", 1.5),
    "clamp_": _method("clamp_", -0.2, 0.3),
    "copy_": _method("copy_", lambda x, y: x * 2),
    "fill_": _method("fill_", 0.125),
    "zero_": _method("zero_"),
    "masked_fill_": lambda y, x, idx, mask: y.masked_fill_(mask, -1.0),
    "index_put_": lambda y, x, idx, mask: y.index_put_((idx[:2],), x[0, :1] + 1),
    "index_fill_": lambda y, x, idx, mask: y.index_fill_(2, idx[:2], 3.0),
    "out": _out,
    "view_reshape_slice": _view_then(lambda y: y.view(-1), _setitem(lambda i, m: (slice(3, 9),), VALUES["scalar"])),
    "view_transpose_row": _view_then(lambda y: y.transpose(0, 2), _setitem(lambda i, m: (1,), VALUES["tensor"])),
    "view_select_add_": _view_then(lambda y: y[1], _method("add_", lambda x, y: x[0])),
    "view_narrow_mul_": _view_then(lambda y: y.narrow(1, 1, 2), _method("mul_", -2.0)),
    "view_unsqueeze_tensor_index": _view_then(lambda y: y.unsqueeze(0),
                                              _setitem(lambda i, m: (0, Ellipsis, i[:2]), VALUES["tensor"])),
})


class Written(torch.nn.Module):
    def __init__(self, origin, form):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.register_buffer("buf", torch.randn(SHAPE, generator=gen))
        self.weight = torch.nn.Parameter(torch.randn(SHAPE, generator=gen))
        self.plain = torch.randn(SHAPE, generator=gen)  # neither parameter nor buffer
        self.origin, self.form = origin, form

    def forward(self, x, idx, mask):
        y = self.origin(self, x)
        self.form(y, x, idx, mask)
        return y * 1.0, x + 0.0


def _inputs(seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(SHAPE, generator=gen)
    idx = torch.randperm(4, generator=gen)
    mask = torch.randn(SHAPE, generator=gen) > 0.3
    return [x, idx, mask]


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("origin", list(ORIGINS))
def test_written_tensor_of_every_origin(origin, form, tmp_path):
    model = Written(ORIGINS[origin], FORMS[form]).eval()
    pristine = copy.deepcopy(model)
    example = _inputs(0)
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, tuple(t.clone() for t in example), out, input_names=["x", "idx", "mask"],
                   target=fx2nnef.TractNNEF(check_io=False))
    tract_matches_eager(out, pristine, [_inputs(0), _inputs(1)])


def _inputs_at(seed: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n,) + SHAPE[1:], generator=gen)
    return [x, torch.randperm(4, generator=gen), torch.randn(x.shape, generator=gen) > 0.3]


@pytest.mark.parametrize("form", [f for f in FORMS if f.startswith(("setitem", "augmented", "view_"))])
@pytest.mark.parametrize("origin", ["input", "made_like"])
def test_written_on_a_dynamic_axis(origin, form, tmp_path):
    """The same writes with the first axis dynamic: the raw asset holds at sizes other than the example's."""
    model = Written(ORIGINS[origin], FORMS[form]).eval()
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, tuple(_inputs_at(0, 4)), out, input_names=["x", "idx", "mask"],
                   target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {0: "B"}, "mask": {0: "B"}}))
    tract_matches_eager(out, copy.deepcopy(model), [_inputs_at(1, 4), _inputs_at(2, 6), _inputs_at(3, 9)])
