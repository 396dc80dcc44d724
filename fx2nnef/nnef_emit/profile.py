"""Target profiles: what the lowering asks of a target, and the targets declared so far.

A target (``fx2nnef.targets``) declares one :class:`TargetProfile`: its name (the rule set its
converter overrides are registered under, see :mod:`.registry`) and its capabilities, each named
by what it changes in the lowering. Converters ask ``ctx.profile.<capability>``; none compares a
target's name. Every capability defaults to what standard NNEF needs, so that a profile lists
only what its engine does differently.

A variant (:func:`add_target`: a newer engine, a stricter profile) names its parent: it has the
parent's capabilities unless told otherwise, and a lookup for it tries its own rules, then its
parent's, then the common ones.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Optional, Union


class RegistryError(Exception):
    """A registration or a target declaration conflicts with an existing one."""


@dataclasses.dataclass(frozen=True)
class TargetProfile:
    """What the emitter needs to know of a target, besides its rules."""

    name: str
    parent: Optional["TargetProfile"] = None  # rules not registered for this target come from the parent
    fragment_extensions: tuple = ()  # extensions graph.nnef declares when it defines fragments
    # a while loop on data is unrolled when traced, up to max_loop_iterations (no loop op to lower it to)
    unroll_while: bool = False
    # sigmoid is written 1 / (1 + exp(-x)): the engine's own op is not within a relative error
    exact_sigmoid: bool = False
    # a float quotient that is then rounded or compared is taken through f64 (the engine's is an ulp off)
    rounded_quotients: bool = False
    # the engine folds operands it knows to be uniform (and loses their sizes): those are made opaque
    uniform_folding: bool = False
    # an integer ``gt`` is written as ``lt`` with swapped operands (the engine's is wrong on uniform operands)
    integer_gt_as_lt: bool = False
    # a size holding a floor division is the shape of a range (the engine cannot simplify it otherwise)
    sizes_as_range_shapes: bool = False
    # reductions over axes that may be empty pad them with the neutral item, and a mean over a
    # dynamic count is a sum times the count's reciprocal (the engine's are wrong or slow there)
    guarded_reductions: bool = False
    # strided slices and kernel-1 strides are taken without a Downsample the engine could misplace
    strides_without_downsample: bool = False
    # an operand of a product with weights that is a tile merged by a reshape is made opaque
    opaque_tiles_in_products: bool = False
    # a product of two computed values in a loop body is a broadcast multiply and a sum
    loop_products_summed: bool = False
    # a select's uniform condition computed from the sizes alone is made opaque (the engine folds it wrongly)
    opaque_size_conditions: bool = False
    # a count read from data (a mask's true items) is a symbol the engine makes at run time (tract_onnx_non_zero)
    data_sized_counts: bool = False
    # a size that multiplies or divides data is made opaque (the engine takes it for a mask)
    opaque_sizes_in_products: bool = False
    # a linear's weight of more than twice this many bytes is multiplied by blocks of rows of at most
    # this many, the products concatenated (the engine holds a weight twice while it loads or packs
    # it); 0: never
    weight_block_bytes: int = 0

    def __repr__(self) -> str:
        return f"TargetProfile({self.name!r})"

    def lineage(self) -> list:
        """This profile's name, its parent's, the parent's parent's..."""
        out, p = [], self
        while p is not None:
            out.append(p.name)
            p = p.parent
        return out


TARGETS: dict = {}
"""Declared targets by name, in declaration order (the built-in ones have no parent)."""


def declare_target(profile: TargetProfile) -> TargetProfile:
    """Declare ``profile`` so that rules can be registered for it; returns it."""
    if profile.name in TARGETS:
        raise RegistryError(f"target {profile.name!r} is already declared")
    TARGETS[profile.name] = profile
    return profile


def add_target(name: str, parent: str, fragment_extensions: Optional[tuple] = None) -> TargetProfile:
    """Declare a target variant of ``parent``: its capabilities, and its rules as the fallback of the variant's."""
    if name in TARGETS:
        raise RegistryError(f"target {name!r} is already declared")
    load_target_package(parent)
    if parent not in TARGETS:
        raise RegistryError(f"unknown parent target {parent!r}; known: {tuple(TARGETS)}")
    base = TARGETS[parent]
    ext = base.fragment_extensions if fragment_extensions is None else tuple(fragment_extensions)
    return declare_target(dataclasses.replace(base, name=name, parent=base, fragment_extensions=ext))


COMMON = TargetProfile("common")
"""The profile of no particular target: standard NNEF's capabilities and the common rules only."""

_LOADED: set = set()  # names whose built-in target package was looked for (and imported if there)


def load_target_package(name: str) -> None:
    """Import the built-in target package ``fx2nnef.targets.<name>`` when there is one: it declares
    the target's profile and registers its lowering overrides, so that no caller can get a target's
    profile or rules without them (importing it twice is free)."""
    if name in _LOADED:
        return
    package = f"{__name__.split('.')[0]}.targets.{name}"
    if name.isidentifier() and importlib.util.find_spec(package) is not None:
        importlib.import_module(package)
    _LOADED.add(name)


def profile_of(target: Union[TargetProfile, str]) -> TargetProfile:
    """The profile of ``target`` (a profile, or a declared name), its rules loaded: asking for a
    built-in target imports its package first. An unknown name is an error (a wrong lowering
    would be silent); ``"common"`` is no particular target."""
    name = target.name if isinstance(target, TargetProfile) else target
    if name == COMMON.name and not isinstance(target, TargetProfile):
        return COMMON
    lineage = target.lineage() if isinstance(target, TargetProfile) else [name]
    for each in lineage:
        load_target_package(each)
    if isinstance(target, TargetProfile):
        return target
    if name not in TARGETS:
        raise RegistryError(f"unknown target {name!r}; known: {tuple(TARGETS)} (declare a variant with add_target)")
    return TARGETS[name]


def target_lineage(name: str) -> list:
    """``name``, its parent, the parent's parent... (an undeclared name stands alone)."""
    return profile_of(name).lineage()


def base_targets() -> list:
    """The declared targets that are not variants of another, in declaration order."""
    return [t for t, p in TARGETS.items() if p.parent is None]
