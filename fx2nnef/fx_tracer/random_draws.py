"""The random draws a forward makes, with their source lines.

An exported graph cannot reproduce torch's random generator. A draw whose values reach the
outputs is either kept as the example's values (``torch.rand(4)``: no tensor argument, so the
tracer sees a constant), or its op has no lowering, or the graph no longer reproduces the model
(the model draws again on every run). The last two used to fail with messages about something
else; the first passed silently. :func:`watch_random_draws` notes every call of torch's random
functions (and of dropout with ``training=True``) while the model runs, so that the export can
say which line draws, and note a draw kept in the graph.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from typing import Optional

import torch
import torch.nn.functional as F

from ..ir import SourceLoc
from .tracing.source import _OWN_DIR, _TORCH_DIR, user_frame_location

# torch functions whose result is a random draw
_TORCH = ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
          "multinomial", "normal", "poisson", "binomial")
# Tensor methods that fill or draw at random
_TENSOR = ("random_", "uniform_", "normal_", "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_",
           "bernoulli", "multinomial")
# functional ops that draw only when training (argument position and default of ``training``, of ``p``)
_TRAINING = {"dropout": (2, True, 1, 0.5), "dropout1d": (2, True, 1, 0.5), "dropout2d": (2, True, 1, 0.5),
             "dropout3d": (2, True, 1, 0.5), "alpha_dropout": (2, False, 1, 0.5),
             "feature_alpha_dropout": (2, False, 1, 0.5), "rrelu": (3, False, None, None),
             "gumbel_softmax": (None, True, None, None)}


@dataclasses.dataclass(frozen=True)
class RandomDraw:
    """A call of a random function: its name and the user's line."""

    name: str
    loc: Optional[SourceLoc]

    def __str__(self) -> str:
        where = f" at {self.loc}" if self.loc is not None else ""
        code = f" ({self.loc.code})" if self.loc is not None and self.loc.code else ""
        return f"{self.name}{where}{code}"


_TORCH_NN = os.path.join(_TORCH_DIR, "nn")
_ACTIVE: list = []  # the lists of draws being recorded (one per open watch)


def _note(name: str) -> None:
    """Note a draw of ``name`` called from the model (not from fx2nnef's own probes, which draw
    their inputs)."""
    caller = sys._getframe(2).f_code.co_filename
    # torch's own dispatch calls the method again (a tensor subclass's __torch_function__); its
    # modules (nn.Dropout) call the functional form for the model
    if _ACTIVE and not caller.startswith(_OWN_DIR) and (not caller.startswith(_TORCH_DIR) or caller.startswith(_TORCH_NN)):
        draw = RandomDraw(name, user_frame_location())
        for draws in _ACTIVE:
            if draw not in draws:
                draws.append(draw)


def _drawing(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _note(name)
        return fn(*args, **kwargs)
    return wrapper


def _drawing_when_training(name: str, fn, training_at: Optional[int], default: bool, p_at: Optional[int],
                           p_default):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        training = kwargs.get("training", args[training_at] if training_at is not None and len(args) > training_at
                              else default)
        p = kwargs.get("p", args[p_at] if p_at is not None and len(args) > p_at else p_default)
        if training and not (isinstance(p, (int, float)) and p == 0):
            _note(name)
        return fn(*args, **kwargs)
    return wrapper


@contextlib.contextmanager
def watch_random_draws():
    """Within the scope, each call of a random function is noted in the yielded list (once per
    function and line)."""
    draws: list = []
    patched = []
    if not _ACTIVE:  # the outermost watch patches; nested ones share the wrappers
        for name in _TORCH:
            fn = getattr(torch, name, None)
            if fn is not None:
                patched.append((torch, name, fn, True))
                setattr(torch, name, _drawing(f"torch.{name}", fn))
        for name in _TENSOR:
            fn = getattr(torch.Tensor, name, None)
            if fn is not None:
                patched.append((torch.Tensor, name, fn, name in torch.Tensor.__dict__))
                setattr(torch.Tensor, name, _drawing(f"Tensor.{name}", fn))
        for name, spec in _TRAINING.items():
            fn = getattr(F, name, None)
            if fn is not None:
                patched.append((F, name, fn, True))
                setattr(F, name, _drawing_when_training(f"F.{name}", fn, *spec))
    _ACTIVE.append(draws)
    try:
        yield draws
    finally:
        _ACTIVE.remove(draws)
        for owner, name, fn, own in reversed(patched):
            if own:
                setattr(owner, name, fn)
            else:
                delattr(owner, name)


def random_draws_text(draws: list) -> str:
    """The draws as a phrase naming their lines (the first three)."""
    text = "; ".join(str(d) for d in draws[:3])
    return text + (f"; and {len(draws) - 3} more" if len(draws) > 3 else "")


def random_draws_advice(draws: list) -> str:
    """Why a model that draws at random does not export as is, and what to do."""
    return (f"The forward draws random numbers: {random_draws_text(draws)}. An exported graph cannot reproduce "
            "torch's random generator: make the random tensor an input of the model, draw it outside the "
            "model, or switch the draw off for inference (model.eval() for dropout; training=self.training "
            "for F.dropout)")
