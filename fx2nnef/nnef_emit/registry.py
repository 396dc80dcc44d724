"""The op registry: one converter per (op, target), keyed on the exact op.

Keys come from :func:`fx2nnef.ir.op_key`: ``torch.add``, ``operator.add`` and the method
``Tensor.add`` are three keys, and a converter may be registered for several of them at
once. A converter registered with ``target=None`` is the common rule; ``target="tract"``
or ``target="khronos"`` overrides it for that target. Registering a key twice for the
same target is an error.

Targets form a tree: a variant declared with :func:`add_target` (a newer tract, a stricter
profile) names its parent, and a lookup for it tries its own rules, then its parent's, and so
on, then the common rule; the variant re-registers only what differs.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Iterable, Optional

from ..ir import op_key



@dataclasses.dataclass(frozen=True)
class TargetProfile:
    """What the emitter needs to know of a target, besides its rules."""

    parent: Optional[str] = None  # rules not registered for this target come from the parent
    fragment_extensions: tuple = ()  # extensions graph.nnef declares when it defines fragments


TARGETS: dict = {
    "tract": TargetProfile(),
    "khronos": TargetProfile(fragment_extensions=("KHR_enable_fragment_definitions",
                                                   "KHR_enable_operator_expressions")),
}
"""Targets by name; the built-in ones have no parent."""


def add_target(name: str, parent: str, fragment_extensions: Optional[tuple] = None) -> TargetProfile:
    """Declare a target variant of ``parent`` (its rules are the fallback of the variant's)."""
    if name in TARGETS:
        raise RegistryError(f"target {name!r} is already declared")
    if parent not in TARGETS:
        raise RegistryError(f"unknown parent target {parent!r}; known: {tuple(TARGETS)}")
    ext = TARGETS[parent].fragment_extensions if fragment_extensions is None else tuple(fragment_extensions)
    TARGETS[name] = TargetProfile(parent, ext)
    return TARGETS[name]


def target_lineage(name: str) -> list:
    """``name``, its parent, the parent's parent... (an undeclared name stands alone)."""
    out = [name]
    while name in TARGETS and TARGETS[name].parent is not None:
        name = TARGETS[name].parent
        out.append(name)
    return out


def base_targets() -> list:
    """The declared targets that are not variants of another, in declaration order."""
    return [t for t, p in TARGETS.items() if p.parent is None]


class RegistryError(Exception):
    """A registration conflicts with an existing one."""


class Registry:
    """Converters by (op key, target). A registry made with ``parent`` falls back to it."""

    def __init__(self, parent: Optional["Registry"] = None):
        self._rules: dict = {}
        self.parent = parent

    def child(self) -> "Registry":
        """A registry for one export that can add rules (e.g. custom ops) without touching this one."""
        return Registry(parent=self)

    def register(self, *ops, target: Optional[str] = None) -> Callable:
        """Decorator: ``@register(torch.add, operator.add, "Tensor.add")``."""
        if target is not None and target not in TARGETS:
            raise RegistryError(f"unknown target {target!r}; known: {tuple(TARGETS)}")

        def deco(fn: Callable) -> Callable:
            for op in ops:
                self.add(op, fn, target)
            return fn

        return deco

    def add(self, op, fn: Callable, target: Optional[str] = None) -> None:
        key = op_key(op)
        if (key, target) in self._rules:
            other = self._rules[(key, target)]
            raise RegistryError(
                f"'{key}' is already registered for target {target or 'common'} by "
                f"{other.__module__}.{other.__qualname__}; remove one of the two registrations")
        self._rules[(key, target)] = fn

    def lookup(self, key: str, target: str) -> Optional[Callable]:
        found = None
        for t in target_lineage(target) + [None]:
            found = self._rules.get((key, t))
            if found is not None:
                break
        if found is None and self.parent is not None:
            return self.parent.lookup(key, target)
        return found

    def keys(self) -> list:
        return sorted({k for k, _ in self._rules})

    def rules(self) -> Iterable:
        return sorted(self._rules.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))

    def signature(self, key: str, target: str) -> Optional[inspect.Signature]:
        fn = self.lookup(key, target)
        return None if fn is None else inspect.signature(fn)


REGISTRY = Registry()
register = REGISTRY.register
