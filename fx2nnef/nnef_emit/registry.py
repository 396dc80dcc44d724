"""The op registry: one converter per (op, target), keyed on the exact op.

Keys come from :func:`fx2nnef.ir.op_key`: ``torch.add``, ``operator.add`` and the method
``Tensor.add`` are three keys, and a converter may be registered for several of them at
once. A converter registered with ``target=None`` is the common rule; one registered with
``target=PROFILE`` (a declared :class:`~.profile.TargetProfile`, or its name) overrides it for
that target: each target package (``fx2nnef.targets.<name>``) registers its own overrides.
Registering a key twice for the same target is an error.

Targets form a tree (see :mod:`.profile`): a lookup for a variant tries its own rules, then its
parent's, and so on, then the common rule; the variant re-registers only what differs.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Iterable, Optional, Union

import torch
import torch.nn.functional as F

from ..ir import op_key
from .profile import (COMMON, TARGETS, RegistryError, TargetProfile, add_target, base_targets, load_target_package,
                      profile_of, target_lineage)

__all__ = ["REGISTRY", "TARGETS", "Registry", "RegistryError", "TargetProfile", "add_target", "base_targets",
           "register", "sources", "target_lineage"]

Target = Union[TargetProfile, str, None]


def _rule_set(target: Target) -> Optional[str]:
    """The name the rules of ``target`` (a profile, a name, or None: the common rules) are kept under."""
    return target.name if isinstance(target, TargetProfile) else target


class Registry:
    """Converters by (op key, target). A registry made with ``parent`` falls back to it."""

    def __init__(self, parent: Optional["Registry"] = None):
        self._rules: dict = {}
        self.parent = parent

    def child(self) -> "Registry":
        """A registry for one export that can add rules (e.g. custom ops) without touching this one."""
        return Registry(parent=self)

    def register(self, *ops, target: Target = None) -> Callable:
        """Decorator: ``@register(torch.add, operator.add, "Tensor.add")``; ``target=PROFILE``
        for an override."""
        name = _rule_set(target)
        if isinstance(target, str) and target != COMMON.name:
            load_target_package(target)  # a built-in target's package declares it (and registers its own rules)
        if name is not None and (name not in TARGETS or isinstance(target, TargetProfile) and TARGETS[name] is not target):
            raise RegistryError(f"unknown target {name!r}; known: {tuple(TARGETS)}")

        def deco(fn: Callable) -> Callable:
            for op in ops:
                self.add(op, fn, target)
            return fn

        return deco

    def add(self, op, fn: Callable, target: Target = None) -> None:
        key, target = op_key(op), _rule_set(target)
        if (key, target) in self._rules:
            other = self._rules[(key, target)]
            raise RegistryError(
                f"'{key}' is already registered for target {target or 'common'} by "
                f"{other.__module__}.{other.__qualname__}; remove one of the two registrations")
        self._rules[(key, target)] = fn

    def lookup(self, key: str, target: Target) -> Optional[Callable]:
        """The rule for ``key``: the target's own, its parent's..., then the common one."""
        found = None
        for t in profile_of(target).lineage() + [None]:
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

    def signature(self, key: str, target: Target) -> Optional[inspect.Signature]:
        fn = self.lookup(key, target)
        return None if fn is None else inspect.signature(fn)


def sources(name: str) -> list:
    """The torch callables named ``name`` (torch, F, torch.special) and the Tensor method, once per key."""
    found = {}
    for ns in (torch, F, torch.special):
        fn = getattr(ns, name, None)
        if callable(fn) and not isinstance(fn, type):
            found.setdefault(op_key(fn), fn)
    if hasattr(torch.Tensor, name):
        found.setdefault(f"Tensor.{name}", f"Tensor.{name}")
    return list(found.values())


REGISTRY = Registry()
register = REGISTRY.register
