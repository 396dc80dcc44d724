"""Module extractors: lower a whole ``nn.Module`` call as one unit.

Some modules are easier to export as a whole than op by op: a recurrent layer (nn.LSTM,
nn.GRU, ...) whose forward runs cuDNN-style kernels, or a user module whose forward leaves
torch (numpy calls, data-dependent Python control flow). The tracer can keep such a module
as a single ``call_module`` node. In the IR that node has kind ``op_key(ModuleClass)``
(``"nn.LSTM"``, ``"module:pkg.mod.MyModule"``), the module call's arguments, and a
``module`` keyword holding what the tracer read from the instance::

    {"type": "LSTM",
     "config": {"hidden_size": 16, "num_layers": 2, ...},   # plain attributes of the instance
     "params": {"weight_ih_l0": Value(constant), ...}}       # named_parameters() and named_buffers()

Its outputs are the tensors of the module's result, flattened in order (for nn.LSTM:
output, h_n, c_n).

A :class:`ModuleInfoExtractor` subclass names its module class in ``MODULE_CLASS`` and
lowers one call in :meth:`ModuleInfoExtractor.convert_to_nnef`. :func:`register_extractor`
puts it in the op registry under ``op_key(MODULE_CLASS)``, for all targets or for one
(``target=PROFILE``, a target's declared profile, overrides the common rule, as for op converters).

Layering: ``nnef_emit`` and ``fx_tracer`` never import each other, so registering an
extractor here does not tell the tracer to keep the module whole. The caller joins the two:
:func:`registered_module_classes` lists the classes that have an extractor, and the
top-level API passes them to the tracer as leaf modules (a user module can also be given
to ``fx2nnef.export(..., leaf_modules=(MyModule,))`` directly)::

    class MyExtractor(ModuleInfoExtractor):
        MODULE_CLASS = MyModule

        def convert_to_nnef(self, ctx, inputs, module):
            (x,) = inputs
            return ctx.op("tanh", x, out_shape=x.shape)

    register_extractor(MyExtractor)
    fx2nnef.export(model, (x,), "out.nnef.tgz", leaf_modules=(MyModule,))
"""
from __future__ import annotations

import inspect
from typing import Optional, Union

import torch

from ..errors import EmitError
from ..ir import Value
from .context import EmitContext
from .registry import REGISTRY, Target

EXTRACTOR_CLASSES: list = []
"""Module classes that have a registered extractor, in registration order."""


class ModuleInfoExtractor:
    """Lowers calls of one ``nn.Module`` class to NNEF as a single unit.

    Subclasses set ``MODULE_CLASS`` and implement :meth:`convert_to_nnef`.
    """

    MODULE_CLASS: Optional[type] = None

    def convert_to_nnef(self, ctx: EmitContext, inputs: list, module: dict) -> Union[Value, tuple]:
        """Emit the module call and return its result tensors in the order of the flattened result.

        ``inputs`` holds the forward's arguments in the order of its signature (defaults filled
        in, the ``self`` parameter left out): Values, tuples of Values, None or Python
        constants. ``module`` is the info dict described in this module's docstring.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement convert_to_nnef")

    def bind_inputs(self, args: tuple, kwargs: dict) -> list:
        """The call's arguments in the order of ``MODULE_CLASS.forward``'s parameters."""
        sig = inspect.signature(self.MODULE_CLASS.forward)
        try:
            bound = sig.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise EmitError(f"{self.MODULE_CLASS.__name__} was called with arguments that do not match "
                            f"forward{sig}: {exc}") from None
        bound.apply_defaults()
        values = list(bound.arguments.values())[1:]
        params = list(sig.parameters.values())[1:]
        out = []
        for p, v in zip(params, values):
            out.extend(v if p.kind is inspect.Parameter.VAR_POSITIONAL else [v])
        return out


def register_extractor(extractor, target: Target = None):
    """Register a ModuleInfoExtractor (class or instance) for its ``MODULE_CLASS``.

    Returns ``extractor`` unchanged, so it can decorate the class. Registering a module class
    twice for the same target raises :class:`~fx2nnef.nnef_emit.registry.RegistryError`.
    """
    instance = extractor() if isinstance(extractor, type) else extractor
    cls = instance.MODULE_CLASS
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"{type(instance).__name__}.MODULE_CLASS must be an nn.Module subclass, got {cls!r}")

    def convert(ctx: EmitContext, *args, module: dict, **kwargs):
        return instance.convert_to_nnef(ctx, instance.bind_inputs(args, kwargs), module)

    convert.__module__ = type(instance).__module__
    convert.__qualname__ = f"{type(instance).__qualname__}.convert_to_nnef"
    REGISTRY.add(cls, convert, target)
    if cls not in EXTRACTOR_CLASSES:
        EXTRACTOR_CLASSES.append(cls)
    return extractor


def registered_module_classes(builtin_only: bool = False) -> tuple:
    """Module classes with an extractor: the leaf modules the tracer must keep whole.

    ``builtin_only``: only torch's own module classes (nn.LSTM, ...); the diagnoser traces with
    these first and offers the extractors of a user's classes as replacements where a module fails."""
    if builtin_only:
        return tuple(c for c in EXTRACTOR_CLASSES if c.__module__.split(".")[0] == "torch")
    return tuple(EXTRACTOR_CLASSES)
