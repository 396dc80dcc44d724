"""``scalars_as_inputs=True``: Python ``int``/``float`` arguments become rank-0 graph inputs.

The example's scalar arguments are replaced by rank-0 tensors (int64 for ``int``, float32 for
``float``) that the tracer makes placeholders like any tensor input. The model still receives
Python numbers when it runs eagerly (references, probes): :class:`ScalarArgs` turns those
tensors back into ``int``/``float`` unless they are traced values. torch promotes a rank-0
tensor like a Python scalar of its kind, so ``x * scale`` keeps the dtype it had.
A decision the model takes on such a scalar (``if n > 2``, ``range(n)``) is a decision on
input data: it is kept as a guard ("baked"), or merged with ``branches="select"``.
"""
from __future__ import annotations

import torch
import torch.fx as fx

_DTYPES = {int: torch.int64, float: torch.float32}


def _is_scalar(v) -> bool:
    return type(v) in _DTYPES


class ScalarArgs(torch.nn.Module):
    """Calls ``model`` with Python numbers where the example had them; shares the model's
    children, parameters and buffers so that module paths are the model's own."""

    def __init__(self, model: torch.nn.Module, positions: dict, keywords: dict):
        super().__init__()
        self.__dict__["_modules"] = model._modules
        self.__dict__["_parameters"] = model._parameters
        self.__dict__["_buffers"] = model._buffers
        self.__dict__["inner"] = model
        self.__dict__["positions"] = positions  # index -> int | float
        self.__dict__["keywords"] = keywords  # name -> int | float

    def forward(self, *args, **kwargs):
        args = tuple(_number(a, self.positions[i]) if i in self.positions else a for i, a in enumerate(args))
        kwargs = {k: _number(v, self.keywords[k]) if k in self.keywords else v for k, v in kwargs.items()}
        if isinstance(args[0] if args else None, fx.Proxy) or any(isinstance(v, fx.Proxy) for v in kwargs.values()):
            return self.inner.forward(*args, **kwargs)  # traced: the tracer follows the model's own forward
        return self.inner(*args, **kwargs)


def _number(v, kind):
    if isinstance(v, fx.Proxy):
        return v
    return kind(v.item())


def scalars_to_inputs(model: torch.nn.Module, args: tuple, kwargs: dict):
    """``(model, args, kwargs)`` with top-level int/float arguments as rank-0 tensors, or the
    arguments unchanged when there is none."""
    positions = {i: type(a) for i, a in enumerate(args) if _is_scalar(a)}
    keywords = {k: type(v) for k, v in kwargs.items() if _is_scalar(v)}
    if not positions and not keywords:
        return model, args, kwargs
    args = tuple(torch.tensor(a, dtype=_DTYPES[type(a)]) if i in positions else a for i, a in enumerate(args))
    kwargs = {k: torch.tensor(v, dtype=_DTYPES[type(v)]) if k in keywords else v for k, v in kwargs.items()}
    cls = type(type(model).__name__, (ScalarArgs,), {})
    return cls(model, positions, keywords), args, kwargs
