"""Square roots of sizes (``h = w = int(N ** 0.5)``, ``int(math.sqrt(N))``, ``math.isqrt(N)``: a
grid of tokens made square again, as DiT's unpatchify or a ViT's position interpolation do).

NNEF and tract have no square root of a size. The root is a size only where its argument is the
square of one: ``(H // p) * (H // p)`` tokens of a square image whose height and width share a
symbol give the side ``H // p`` (:func:`integer_root`). Any other argument (``N`` itself, or
``(H // p) * (W // p)`` with two symbols) is whole at some sizes only, and a graph fitted to
probe runs there would be right at those sizes only: :class:`RootOfSize` says so, and the
replay turns it into a refusal that names the line (:func:`root_refusal`)."""
from __future__ import annotations

import math
from typing import Optional

import sympy

# how the ShapeEnv writes a float square root of an integer size
_ROOTS = ("OpaqueUnaryFn_sqrt", "FloatPow", "Pow")
_ROUNDINGS = ("TruncToInt", "FloorToInt", "CeilToInt", "RoundToInt")


class RootOfSize(ValueError):
    """A rounded square root of a size expression that is no square (``radicand``)."""

    def __init__(self, expr, radicand):
        super().__init__(str(expr))
        self.radicand = radicand


def _radicand(expr):
    """The integer expression ``e`` when ``expr`` is the float square root of ``e``, else None."""
    kind = type(expr).__name__
    if kind not in _ROOTS:
        return None
    if kind != "OpaqueUnaryFn_sqrt":
        if len(expr.args) != 2 or not expr.args[1].is_Number or float(expr.args[1]) != 0.5:
            return None
    inner = expr.args[0]
    if type(inner).__name__ == "ToFloat":
        inner = inner.args[0]
    return inner if inner.free_symbols else None


def _exact_root(e):
    """``r`` with ``r * r == e`` for a product of even powers of sizes and a square integer, else None."""
    root = sympy.Integer(1)
    for base, power in e.as_powers_dict().items():
        if base.is_Integer:
            value = int(base) ** int(power) if power.is_Integer else -1
            r = math.isqrt(value) if value >= 0 else -1
            if r < 0 or r * r != value:
                return None
            root = root * r
        elif power.is_Integer and int(power) % 2 == 0 and base.is_nonnegative is not False:
            root = root * base ** (int(power) // 2)
        else:
            return None
    return root


def integer_root(expr) -> Optional[object]:
    """For ``expr`` a rounded square root of a size (``TruncToInt(sqrt(ToFloat(e)))`` and its
    spellings): the sympy size ``r`` with ``r * r == e``; raise :class:`RootOfSize` when ``e`` is no
    such square. None when ``expr`` is no rounded root."""
    if type(expr).__name__ not in _ROUNDINGS or len(expr.args) != 1:
        return None
    radicand = _radicand(expr.args[0])
    if radicand is None:
        return None
    root = _exact_root(sympy.factor(radicand))
    if root is None:
        raise RootOfSize(expr, radicand)
    return root


def root_refusal(exc: RootOfSize, symbols: dict, source) -> str:
    """The one-line refusal of a root that is no size, ``symbols`` naming the sympy symbols."""
    named = exc.radicand.xreplace({s: sympy.Symbol(n) for s, n in symbols.items()})
    at = f" at {source}: `{source.code}`" if source is not None and getattr(source, "code", "") else \
        (f" at {source}" if source is not None else "")
    names = sorted(str(s) for s in named.free_symbols)
    return (f"the size computed{at} is the square root of {named}, which is a whole number only where "
            f"{'it is' if len(names) < 2 else 'that product is'} a square: tract has no square root of a "
            f"size, and a graph fitted at such sizes would be wrong at the others. Give the dynamic axes "
            f"a form whose root is a size (the same symbol for an image's height and width, so the "
            f"tokens are a square of the grid side), or keep {', '.join(names)} static.")
