"""What the diagnoser does with each module: the four strategies, and how a user sets them.

``strategies`` maps a module path (``"model.layers.0"``), a module class, or a class name
(``"LlamaDecoderLayer"``) to a :class:`Strategy`; a path wins over a class. Modules not
named there get ``ONLY_IF_FAILING``.
"""
from __future__ import annotations

import enum
from typing import Optional

import torch

from ..errors import InvalidArgumentError


class Strategy(enum.Enum):
    """How a module is exported.

    NONE: left alone. It is not exported on its own, never becomes a custom op, and its
        submodules are not visited: it stays inline in its parent.
    ONLY_IF_FAILING (default): exported on its own; it becomes a custom op in its parent only
        when it fails inline and has a working replacement (a registered module extractor,
        or its own export with failing children encapsulated).
    ALWAYS: like ONLY_IF_FAILING, and always a custom op (an NNEF fragment, or its
        extractor) in its parent, even when it exports fine inline. Identical modules then
        share one fragment definition.
    LOCAL: exported on its own, but its submodules are never examined: a failure is
        reported at this module, and only a registered extractor can replace it.
    """

    NONE = "NONE"
    ONLY_IF_FAILING = "ONLY_IF_FAILING"
    ALWAYS = "ALWAYS"
    LOCAL = "LOCAL"


def resolve_strategy(strategies: Optional[dict], path: str, module: torch.nn.Module) -> Strategy:
    """The strategy of ``module`` at ``path``: by path, then by class, then by class name."""
    if not strategies:
        return Strategy.ONLY_IF_FAILING
    if path in strategies:
        return Strategy(strategies[path])
    for cls in type(module).__mro__:
        if cls in strategies:
            return Strategy(strategies[cls])
    name = type(module).__name__
    if name in strategies:
        return Strategy(strategies[name])
    return Strategy.ONLY_IF_FAILING


def check_strategies(strategies: Optional[dict]) -> dict:
    """Validate keys (str or nn.Module class) and values (Strategy or its name)."""
    out: dict = {}
    for key, value in (strategies or {}).items():
        if not isinstance(key, str) and not (isinstance(key, type) and issubclass(key, torch.nn.Module)):
            raise InvalidArgumentError(f"strategies keys must be module paths, class names or nn.Module "
                                       f"classes, got {key!r}")
        try:
            out[key] = value if isinstance(value, Strategy) else Strategy(str(value).upper())
        except ValueError:
            raise InvalidArgumentError(f"unknown strategy {value!r} for {key!r}; use one of "
                                       f"{[s.value for s in Strategy]}") from None
    return out
