"""The IR's symbolic dims: arithmetic, printing and fitting from samples."""
from fx2nnef.ir import SymDim, fit_polynomial, sanitize
from fx2nnef.ir.dims import fit_floor_division

S, P = SymDim.symbol("S"), SymDim.symbol("P")


def test_arithmetic_and_printing():
    assert str(S + P) == "P + S"
    assert str(2 * S + 1) == "2*S + 1"
    assert str(5 - S) == "5 - S"          # a positive term first: tract cannot parse a leading '-'
    assert (S + 1) * (S - 1) == S * S - 1
    assert (S - S) == 0 and isinstance((S - S) + 0, int)


def test_fit_polynomials():
    samples = [({"S": s, "B": b}, b * s + 1) for s, b in [(8, 2), (9, 2), (8, 3), (9, 3), (10, 2), (8, 4), (11, 5)]]
    assert fit_polynomial(samples, ["S", "B"]) == SymDim({("B", "S"): 1, (): 1})
    assert fit_polynomial([({"S": s}, s // 3) for s in (37, 38, 39, 40, 42, 45)], ["S"]) is None


def test_fit_floor_division():
    samples = [({"S": s}, (s - 1) // 2 + 1) for s in (37, 38, 39, 40, 42, 45)]
    f = fit_floor_division(samples, ["S"])
    assert str(f) == "((S+1)/2)" and all(f.evaluate(e) == v for e, v in samples)
    assert str(2 * f + 1) == "2*((S+1)/2) + 1"


def test_sanitize():
    assert sanitize("model.layers.0.weight") == "model_layers_0_weight"
    assert sanitize("truediv") == "v_truediv" and sanitize("graph") == "v_graph" and sanitize("0x") == "v_0x"


def test_floor_division_of_constants_and_negated_sizes():
    """floor(n / d) of a constant is an int; of a size with negative coefficients (8 - S) it is
    written with a positive numerator (-floor((S - 1)/8)), equal to Python's floor everywhere."""
    from fx2nnef.ir.dims import SymDim, as_sym

    for n in range(-9, 10):
        for d in (2, 3, 4, 8):
            assert SymDim.floordiv(as_sym(n), d) == n // d
    s = SymDim.symbol("S")
    for expr in (8 - s, 3 - 2 * s, -s, 5 - s):
        q = SymDim.floordiv(expr, 4)
        assert "(0-" not in str(q) and "-S)" not in str(q), str(q)
        assert all(q.evaluate({"S": v}) == expr.evaluate({"S": v}) // 4 for v in range(1, 40))
