"""Symbolic dimensions: integer polynomials over named input symbols (``S``, ``P``, ``S*B + 1``).

A :class:`SymDim` is what a dynamic size becomes in the IR. Dims that do not depend on any
symbol are plain Python ints; :func:`simplify` turns a constant SymDim back into an int.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Union

Monomial = tuple  # sorted tuple of symbol names, () is the constant term


# Floor-division atoms: a name such as "((S+1)/2)" stands for floor(numerator / divisor) and
# is used like a symbol inside polynomials (tract parses the name itself as that expression).
_DIV_ATOMS: dict = {}
# Extremum atoms: a name such as "max(((S)/2),1)" stands for the larger (``max``) or smaller
# (``min``) of two dims, used like a symbol too (``max(1, S // 2)`` items, ``min(S, window)``);
# tract 0.23.9 reads ``min`` and ``max`` in sizes. name -> (max or min, (dim, dim))
_EXTREMA: dict = {}


class SymDim:
    """An integer-valued polynomial of symbols with integer coefficients.

    A "symbol" may also be a floor-division atom made by :meth:`floordiv`.
    """

    __slots__ = ("terms",)

    @classmethod
    def floordiv(cls, numerator, divisor: int):
        """floor(numerator / divisor) for a positive int divisor."""
        numerator = as_sym(numerator)
        if all(c % divisor == 0 for c in numerator.terms.values()):
            return simplify(SymDim({m: c // divisor for m, c in numerator.terms.items()}))
        common = math.gcd(divisor, *(c for m, c in numerator.terms.items() if m))
        if common > 1:
            # floor((g*p + c)/(g*d)) is floor((p + floor(c/g))/d): the form tract gives a pool of a
            # stepped size (a pool by 2 of H_8, where H = 8*H_8, is (H_8)/2, never (8*H_8+7)/16)
            reduced = {m: c // common for m, c in numerator.terms.items() if m}
            reduced[()] = numerator.terms.get((), 0) // common
            return cls.floordiv(SymDim(reduced), divisor // common)
        # symbol terms with a coefficient divisible by the divisor come out: (4*a + 1)/2 = 2*a + 1/2
        whole = {m: c // divisor for m, c in numerator.terms.items() if m and c % divisor == 0}
        if whole:
            rest = SymDim({m: c for m, c in numerator.terms.items() if m not in whole})
            part = rest.terms.get((), 0) // divisor if not rest.symbols else cls.floordiv(rest, divisor)
            return simplify(SymDim(whole) + part)
        if not numerator.symbols:
            return numerator.terms.get((), 0) // divisor
        # one canonical form per value, the one tract gives its own shapes (a reshape's -1 is
        # found by dividing polynomials, which needs the same atoms on both sides):
        # floor((floor(a/m) + p)/n) is floor((a + p*m)/(m*n)) for an integer polynomial p
        nested = [m for m, c in numerator.terms.items() if len(m) == 1 and m[0] in _DIV_ATOMS and c == 1]
        if len(nested) == 1:
            inner, m = _DIV_ATOMS[nested[0][0]]
            rest = SymDim({k: c for k, c in numerator.terms.items() if k != nested[0]})
            if all(s not in _DIV_ATOMS for s in rest.symbols):
                return cls.floordiv(inner + rest * m, m * divisor)
        # and a constant term in [0, divisor): floor((S - 80)/320) is floor((S + 240)/320) - 1
        whole_part = numerator.terms.get((), 0) // divisor
        if whole_part and any(c > 0 for m, c in numerator.terms.items() if m):
            return simplify(cls.floordiv(numerator - whole_part * divisor, divisor) + whole_part)
        if all(c < 0 for m, c in numerator.terms.items() if m):
            # floor((8 - S)/8) as -floor((S - 1)/8): an atom's numerator has positive symbol
            # terms, so that it is not negative at the sizes it is read at (tract's integer
            # division of a negative number may truncate where Python floors)
            return -cls.floordiv(-numerator + (divisor - 1), divisor)
        name = f"(({str(numerator).replace(' ', '')})/{divisor})"
        _DIV_ATOMS[name] = (numerator, divisor)
        return cls({(name,): 1})

    @classmethod
    def extremum(cls, pick, a, b):
        """``pick(a, b)`` (``pick``: the builtin ``max`` or ``min``) of two dims: the one that is
        larger (smaller) at every size when their difference is a constant, else an atom."""
        a, b = simplify(as_sym(a)), simplify(as_sym(b))
        gap = simplify(as_sym(a) - as_sym(b))
        if isinstance(gap, int):
            return a if (gap >= 0) == (pick is max) else b
        texts = sorted([(str(a).replace(" ", ""), a), (str(b).replace(" ", ""), b)], key=lambda t: t[0])
        name = f"{pick.__name__}({texts[0][0]},{texts[1][0]})"
        _EXTREMA[name] = (pick, (texts[0][1], texts[1][1]))
        return cls({(name,): 1})

    def __init__(self, terms: dict):
        self.terms = {m: int(c) for m, c in terms.items() if c != 0}

    @classmethod
    def symbol(cls, name: str) -> "SymDim":
        return cls({(name,): 1})

    @property
    def symbols(self) -> set:
        return {s for m in self.terms for s in m}

    @property
    def input_symbols(self) -> set:
        """The input sizes this dim reads, through its floor-division atoms too."""
        out = set()
        for s in self.symbols:
            if s in _DIV_ATOMS:
                out |= _DIV_ATOMS[s][0].input_symbols
            elif s in _EXTREMA:
                for d in _EXTREMA[s][1]:
                    out |= d.input_symbols if isinstance(d, SymDim) else set()
            else:
                out.add(s)
        return out

    def evaluate(self, env: dict) -> int:
        total = 0
        for mono, coef in self.terms.items():
            prod = coef
            for s in mono:
                prod *= _atom_value(s, env)
            total += prod
        return total

    # arithmetic -----------------------------------------------------------------------
    def __add__(self, other):
        other = as_sym(other)
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return simplify(SymDim(terms))

    __radd__ = __add__

    def __neg__(self):
        return SymDim({m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        return self + (-as_sym(other))

    def __rsub__(self, other):
        return as_sym(other) + (-self)

    def __mul__(self, other):
        other = as_sym(other)
        terms: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return simplify(SymDim(terms))

    __rmul__ = __mul__

    def __eq__(self, other):
        if isinstance(other, (int, SymDim)):
            return as_sym(other).terms == self.terms
        return NotImplemented

    def __hash__(self):
        return hash(tuple(sorted(self.terms.items())))

    def __repr__(self):
        return f"SymDim({self})"

    def __str__(self):
        def key(item):
            mono, coef = item
            return (coef < 0, len(mono) == 0, -len(mono), mono)  # positive terms first: tract cannot parse a leading '-'

        parts = []
        for mono, coef in sorted(self.terms.items(), key=key):
            if not mono:
                parts.append(str(coef))
                continue
            name = "*".join(mono)
            parts.append(name if coef == 1 else "-" + name if coef == -1 else f"{coef}*{name}")
        text = " + ".join(parts) or "0"
        if text.startswith("-"):
            text = "0 " + text
        return text.replace("+ -", "- ")


Dim = Union[int, SymDim]


def product(dims) -> Dim:
    """The product of sizes (ints or SymDims); 1 for none."""
    out = 1
    for d in dims:
        out = out * d
    return out


def substitute(x: Dim, mapping: dict) -> Dim:
    """``x`` with the symbols of ``mapping`` (name -> Dim) replaced, inside floor divisions too."""
    if not isinstance(x, SymDim):
        return x
    total: Dim = 0
    for mono, coef in x.terms.items():
        prod: Dim = coef
        for s in mono:
            if s in mapping:
                value = mapping[s]
            elif s in _DIV_ATOMS:
                numerator, divisor = _DIV_ATOMS[s]
                value = SymDim.floordiv(substitute(numerator, mapping), divisor)
            elif s in _EXTREMA:
                pick, (a, b) = _EXTREMA[s]
                value = as_sym(SymDim.extremum(pick, substitute(a, mapping), substitute(b, mapping)))
            else:
                value = SymDim.symbol(s)
            prod = prod * value
        total = total + prod
    return simplify(total)


def settle_extrema(x, ranges: dict):
    """``x`` (a dim, or a tuple of dims and None) with each extremum atom whose arguments compare
    the same way at every size of ``ranges`` (symbol -> :class:`SymRange`) replaced by the one
    chosen there: ``min(7,S)`` is ``7`` where S >= 7. Decided on bounds of the difference found
    term by term (:func:`_linear_bounds`, never narrower than its values); another atom is kept.
    The IR's shapes and the emitter's slice bounds go through here, so that both name a size the
    same way."""
    if isinstance(x, tuple):
        return tuple(settle_extrema(d, ranges) for d in x)
    if not isinstance(x, SymDim) or not any(s in _EXTREMA for s in x.symbols):
        return x
    mapping = {}
    for name in x.symbols & set(_EXTREMA):
        pick, (a, b) = _EXTREMA[name]
        a, b = settle_extrema(a, ranges), settle_extrema(b, ranges)
        lo, hi = _linear_bounds(simplify(as_sym(a) - as_sym(b)), ranges)
        if lo is not None and lo >= 0:
            mapping[name] = a if pick is max else b
        elif hi is not None and hi <= 0:
            mapping[name] = b if pick is max else a
        else:
            mapping[name] = SymDim.extremum(pick, a, b)
    return substitute(x, mapping)


def _linear_bounds(d, ranges: dict) -> tuple:
    """(least, greatest) of ``d`` over the sizes of ``ranges`` (a size is at least 1), None where
    unbounded or not known (a term of degree 2). A floor-division or extremum atom counts as a
    symbol bounded by its arguments' bounds (floor is monotone), so the bounds may be looser than
    the dim's own, never narrower: ``max((S/4) - 1, 0)`` is ``(S/4) - 1`` where S >= 4."""
    if isinstance(d, int):
        return d, d
    lo = hi = d.terms.get((), 0)
    for mono, c in d.terms.items():
        if not mono:
            continue
        if len(mono) != 1:
            return None, None
        least, most = _atom_bounds(mono[0], ranges)
        low_end, high_end = (least, most) if c > 0 else (most, least)
        lo = None if lo is None or low_end is None else lo + c * low_end
        hi = None if hi is None or high_end is None else hi + c * high_end
    return lo, hi


def _atom_bounds(name: str, ranges: dict) -> tuple:
    """(least, greatest) of one symbol or atom over ``ranges``, None where not known."""
    if name in _DIV_ATOMS:
        numerator, divisor = _DIV_ATOMS[name]
        lo, hi = _linear_bounds(numerator, ranges)
        return (None if lo is None else lo // divisor), (None if hi is None else hi // divisor)
    if name in _EXTREMA:
        pick, (a, b) = _EXTREMA[name]
        (lo_a, hi_a), (lo_b, hi_b) = _linear_bounds(a, ranges), _linear_bounds(b, ranges)
        if pick is max:  # at least the larger least; at most the larger greatest, if both are known
            lo = lo_a if lo_b is None else lo_b if lo_a is None else max(lo_a, lo_b)
            hi = None if hi_a is None or hi_b is None else max(hi_a, hi_b)
        else:
            lo = None if lo_a is None or lo_b is None else min(lo_a, lo_b)
            hi = hi_a if hi_b is None else hi_b if hi_a is None else min(hi_a, hi_b)
        return lo, hi
    r = ranges.get(name)
    # a size is at least 1, or 0 where the range says so (an export from an empty example)
    return max(0, r.lo if r is not None and r.lo is not None else 1), (r.hi if r is not None else None)


def exact_quotient(total: Dim, known: Dim):
    """``total / known`` when the polynomials divide exactly with integer coefficients
    (``12*B*L**2 - 24*B*L + 12*B`` by ``(L - 1)**2`` is ``12*B``), else None. Floor-division
    atoms are divided as symbols."""
    import sympy

    total, known = as_sym(total), as_sym(known)
    if not known.terms:
        return None
    names = sorted(total.symbols | known.symbols)
    if not names:
        t, k = total.terms.get((), 0), known.terms.get((), 0)
        return t // k if t % k == 0 else None
    gens = [sympy.Symbol(f"x{i}") for i in range(len(names))]
    by_name = dict(zip(names, gens))

    def poly(d: SymDim):
        return sympy.Poly(sum((c * sympy.Mul(*[by_name[s] for s in m]) for m, c in d.terms.items()), sympy.Integer(0)),
                          *gens, domain="QQ")

    quotient, remainder = sympy.div(poly(total), poly(known))
    if not remainder.is_zero:
        return None
    terms = {}
    for powers, coef in quotient.terms():
        if coef.q != 1:
            return None
        terms[tuple(sorted(n for n, p in zip(names, powers) for _ in range(p)))] = int(coef.p)
    return simplify(SymDim(terms))


def _atom_value(name: str, env: dict) -> int:
    if name in env:
        return env[name]
    if name in _EXTREMA:
        pick, (a, b) = _EXTREMA[name]
        return pick(*(d.evaluate(env) if isinstance(d, SymDim) else d for d in (a, b)))
    numerator, divisor = _DIV_ATOMS[name]
    return numerator.evaluate(env) // divisor


def as_sym(x) -> SymDim:
    if isinstance(x, SymDim):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"not an integer dimension: {x!r}")
    return SymDim({(): x})


def simplify(x: Dim) -> Dim:
    """A SymDim with no symbol becomes an int."""
    if isinstance(x, SymDim) and not x.symbols:
        return x.terms.get((), 0)
    return x


def is_static(x) -> bool:
    return isinstance(x, int)


def fit_polynomial(samples: list, symbols: list, max_degree: int = 2):
    """Find the integer polynomial of ``symbols`` that maps every sample env to its value.

    ``samples`` is a list of ``(env: dict[str, int], value: int)``. Returns an int, a SymDim,
    or ``None`` when no integer polynomial of degree <= max_degree fits exactly.
    """
    monos = _monomials(sorted(symbols), max_degree)
    rows = [[_mono_value(m, env) for m in monos] for env, _ in samples]
    rhs = [value for _, value in samples]
    coefs = _solve_least(rows, rhs)
    if coefs is None:
        return None
    if any(c.denominator != 1 for c in coefs):
        return None
    result = simplify(SymDim({m: int(c) for m, c in zip(monos, coefs)}))
    for env, value in samples:
        if (result if isinstance(result, int) else result.evaluate(env)) != value:
            return None
    return result


def fit_floor_division(samples: list, symbols: list, max_divisor: int = 1024):
    """Find ``floor((sum a_i*S_i + b) / d)`` mapping every sample env to its value, with the
    smallest divisor d and coefficients (what strided convs and pools give: a stack of
    strides s1, s2 gives d = s1*s2). None if none fits."""
    import itertools

    if len({value for _, value in samples}) < 3:
        # two values (``min(S, 2)``: 1 at S=1, 2 above) fit some division with a large divisor
        # over the probed sizes only; a real stride changes the size more often than that
        return None
    symbols = sorted(symbols)
    coef_range = range(1, 5) if len(symbols) == 1 else range(0, 3)
    for d in range(2, max_divisor + 1 if len(symbols) == 1 else 17):
        for coefs in itertools.product(coef_range, repeat=len(symbols)):
            if all(c % d == 0 for c in coefs):
                continue
            lows, highs = [], []
            for env, value in samples:
                lin = sum(c * env[s] for c, s in zip(coefs, symbols))
                lows.append(d * value - lin)
                highs.append(d * value + d - 1 - lin)
            b = max(lows)
            if b <= min(highs):
                numerator = SymDim({(s,): c for c, s in zip(coefs, symbols)}) + b
                return SymDim.floordiv(numerator, d)
    if all(value <= 0 for _, value in samples):
        # a negated division (``torch.roll(x, -(x.size(1) // 2), 1)``): -floor(N/d), which is
        # not floor(-N/d)
        negated = fit_floor_division([(env, -value) for env, value in samples], symbols, max_divisor)
        return None if negated is None else -negated
    return None


def fit_clamped(samples: list, symbols: list):
    """Find ``min(p, c)`` or ``max(p, c)`` mapping every sample env to its value, ``p`` a
    polynomial of degree 1 and ``c`` the greatest (least) value: a size cut to a constant
    (``x[:, :8]`` has ``min(S, 8)`` items, ``x[:, -8:]`` too). At least two samples on each side of
    the bend, so that the plateau is no lone value and ``p`` is fitted, not guessed. None if
    none fits."""
    values = [value for _, value in samples]
    for pick, c in ((min, max(values)), (max, min(values))):
        if pick is max and c <= 0:
            continue  # empty below some size (x[3:]): the range's lower bound, as tract refuses that slice
        off = [(env, value) for env, value in samples if value != c]
        if len(off) < 2 or len(samples) - len(off) < 2:
            continue
        p = fit_polynomial(off, symbols, max_degree=1)
        if p is None or isinstance(p, int):
            continue
        form = SymDim.extremum(pick, p, c)  # an atom: p has a symbol, so p - c is no constant
        if all(form.evaluate(env) == value for env, value in samples):
            return form
    return None


def fit_remainder(samples: list, symbols: list, max_divisor: int = 64):
    """Find ``a*S + b + c*floor((S + r)/d)`` (one symbol, ``0 <= r < d``, ``c != 0``) mapping every
    sample env to its value: a size padded to a multiple (``ceil(S/8)*8 - S`` items of padding is
    ``8*floor((S+7)/8) - S``), a remainder (``S % 2`` is ``S - 2*floor(S/2)``). At least six
    samples, the fit exact at each, and one form only (below). None if none fits."""
    if len(symbols) != 1 or len(samples) < 6 or len({value for _, value in samples}) < 2:
        return None
    (sym,) = symbols
    s = SymDim.symbol(sym)
    points = [(env[sym], value) for env, value in samples]
    fits = []
    for d in range(2, max_divisor + 1):
        for r in range(d):
            coefs = _three_exact([(1, n, (n + r) // d, v) for n, v in points])
            if coefs is None or coefs[2] == 0:
                continue
            b, a, c = coefs
            if all(a * n + b + c * ((n + r) // d) == v for n, v in points):
                fits.append((a, b, c, r, d))
    if not fits:
        return None
    # the samples may fit several (ceil(S/8)*8 - S and 8*floor((S+5)/7) - S agree at S = 3, 5, 6,
    # 7, 9, 12, 13 and 27): only a form all of them give at every size up to well past the samples
    top = 4 * max(n for n, _ in points) + 2 * max_divisor
    values = {tuple(a * n + b + c * ((n + r) // d) for n in range(1, top)) for a, b, c, r, d in fits}
    if len(values) != 1:
        return None
    a, b, c, r, d = fits[0]
    return simplify(b + a * s + c * SymDim.floordiv(s + r, d))


def _divisors_of(x: "SymDim") -> list:
    """The divisors of the floor-division atoms of ``x`` (nested ones too)."""
    out = []
    for name in x.symbols:
        if name in _DIV_ATOMS:
            numerator, d = _DIV_ATOMS[name]
            out += [d] + _divisors_of(numerator)
    return out


def with_fewer_divisions(x: Dim, lo: int = 1) -> Dim:
    """An equal form of the one-symbol size ``x`` with fewer floor-division atoms, or ``x``.

    tract proves sizes equal by their terms: it cannot tell that ``(3*H+1)/4 + H/2 + (H+2)/4 - H``
    (a centred crop's ``end - begin`` as torch's sympy writes it) is ``H/2``. A sum of floor
    divisions of one symbol is a line plus a function of period ``lcm`` of the divisors, so a form
    equal to it over two periods from ``lo`` on, and with the same slope, is equal from ``lo`` on."""
    import math

    if not isinstance(x, SymDim) or len(x.input_symbols) != 1 or x.symbols <= x.input_symbols:
        return x
    (sym,) = x.input_symbols
    if any(name not in _DIV_ATOMS and name != sym for name in x.symbols):
        return x  # min/max atoms: not a line plus a periodic part
    period = math.lcm(*_divisors_of(x))
    if period > 64:
        return x
    samples = [({sym: n}, x.evaluate({sym: n})) for n in range(lo, lo + 2 * period + 2)]
    for fit in (lambda: fit_polynomial(samples, [sym], max_degree=1), lambda: fit_remainder(samples, [sym], 64)):
        form = fit()
        if form is None or (isinstance(form, SymDim) and len(form.symbols) >= len(x.symbols)):
            continue
        far = lo + 7 * period
        if all((form if isinstance(form, int) else form.evaluate({sym: n})) == x.evaluate({sym: n})
               for n in range(far, far + period)):
            return form
    return x


def _three_exact(rows: list):
    """Integers ``(x, y, z)`` with ``x*p + y*q + z*t == v`` on three independent rows ``(p, q, t,
    v)`` of ``rows`` (Cramer's rule), or None: no three independent rows, or no integer solution
    there (the caller checks the other rows)."""
    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            for k in range(j + 1, len(rows)):
                m = [rows[i][:3], rows[j][:3], rows[k][:3]]
                D = det(m)
                if D == 0:
                    continue
                v = [rows[i][3], rows[j][3], rows[k][3]]
                out = []
                for col in range(3):
                    mc = [list(row) for row in m]
                    for x in range(3):
                        mc[x][col] = v[x]
                    num = det(mc)
                    if num % D:
                        return None
                    out.append(num // D)
                return tuple(out)
    return None


def clamp_bends(x) -> list:
    """``(symbol, size)`` pairs near which an extremum atom of ``x`` (a dim or a tuple of dims)
    between a polynomial of degree 1 in one symbol and a constant changes sides: the size where
    they meet (rounded both ways). The sizes to check a fitted clamp at."""
    out = []
    if isinstance(x, tuple):
        for d in x:
            out += [b for b in clamp_bends(d) if b not in out]
        return out
    if not isinstance(x, SymDim):
        return out
    for name in x.symbols & set(_EXTREMA):
        _pick, (a, b) = _EXTREMA[name]
        line, c = (a, b) if isinstance(b, int) else (b, a)
        if not isinstance(c, int) or not isinstance(line, SymDim) or len(line.input_symbols) != 1 \
                or line.symbols != line.input_symbols or any(len(m) > 1 for m in line.terms):
            continue
        (sym,) = line.symbols
        slope, rest = line.terms.get((sym,), 0), line.terms.get((), 0)
        if slope:
            meet = Fraction(c - rest, slope)
            for n in {math.floor(meet), math.ceil(meet)}:
                if n >= 1 and (sym, n) not in out:
                    out.append((sym, n))
    return out


def _monomials(symbols, max_degree):
    monos = [()]
    frontier = [()]
    for _ in range(max_degree):
        nxt = []
        for m in frontier:
            for s in symbols:
                if m and s < m[-1]:
                    continue
                nxt.append(m + (s,))
        monos += nxt
        frontier = nxt
    return monos


def _mono_value(mono, env):
    v = 1
    for s in mono:
        v *= env[s]
    return v


def _solve_least(rows, rhs):
    """Exact rational solve of an over-determined consistent system; prefer low-order terms.

    Columns whose values are linearly dependent on earlier ones are dropped (set to 0), so
    with few samples the simplest polynomial wins.
    """
    n_cols = len(rows[0])
    mat = [[Fraction(v) for v in row] + [Fraction(b)] for row, b in zip(rows, rhs)]
    pivots = []
    r = 0
    for c in range(n_cols):
        pivot = next((i for i in range(r, len(mat)) if mat[i][c] != 0), None)
        if pivot is None:
            continue
        mat[r], mat[pivot] = mat[pivot], mat[r]
        inv = 1 / mat[r][c]
        mat[r] = [v * inv for v in mat[r]]
        for i in range(len(mat)):
            if i != r and mat[i][c] != 0:
                f = mat[i][c]
                mat[i] = [a - f * b for a, b in zip(mat[i], mat[r])]
        pivots.append(c)
        r += 1
        if r == len(mat):
            break
    for i in range(r, len(mat)):
        if mat[i][-1] != 0:
            return None
    coefs = [Fraction(0)] * n_cols
    for i, c in enumerate(pivots):
        coefs[c] = mat[i][-1]
    return coefs


class SymRange:
    """The sizes of one symbol an export is valid for: ``lo <= S <= hi`` (None: unbounded),
    and, when the model accepts only every ``step``-th size, ``S % step == rest``."""

    __slots__ = ("symbol", "lo", "hi", "step", "rest", "why")

    def __init__(self, symbol: str, lo=None, hi=None, step: int = 1, rest: int = 0, why: str = ""):
        self.symbol, self.lo, self.hi, self.step, self.rest, self.why = symbol, lo, hi, step, rest, why

    @property
    def bounded(self) -> bool:
        return self.lo is not None or self.hi is not None or self.step > 1

    def contains(self, n: int) -> bool:
        return ((self.lo is None or n >= self.lo) and (self.hi is None or n <= self.hi)
                and n % self.step == self.rest % self.step)

    def asserts(self) -> list:
        """Bounds as tract assertion texts (``S >= 3``); sizes are >= 1 anyway."""
        out = []
        if self.lo is not None and self.lo > 1:
            out.append(f"{self.symbol} >= {self.lo}")
        if self.hi is not None:
            out.append(f"{self.symbol} <= {self.hi}")
        return out

    def __str__(self) -> str:
        if self.lo is not None and self.hi is not None:
            text = f"{self.lo} <= {self.symbol} <= {self.hi}"
        elif self.lo is not None:
            text = f"{self.symbol} >= {self.lo}"
        elif self.hi is not None:
            text = f"{self.symbol} <= {self.hi}"
        else:
            text = f"{self.symbol} >= 1"
        if self.step > 1:
            text += f", {self.symbol} % {self.step} == {self.rest % self.step}"
        return text + (f" ({self.why})" if self.why else "")

    def __repr__(self) -> str:
        return f"SymRange({self})"
