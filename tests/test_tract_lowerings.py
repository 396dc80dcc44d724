"""Lowerings chosen around tract 0.23.9's load-time rewrites (declutter), each found by the fuzz
test: the graph must load and give torch's values at sizes below and above the example.

check_io runs the example and one size below and one above it, so a shape that tract loses
(a broadcast dropped by a folding) fails here even where the example size would pass.
"""
import pytest
import torch
import torch.nn.functional as F

from harness import OpCase, randn, run_case


def ints(*shape, seed=0):
    return torch.randint(-9, 10, shape, generator=torch.Generator().manual_seed(seed))


DYN0 = {"x0": {0: "S"}}
ZERO = torch.tensor(0)
W1X1 = torch.randn(3, 1, 1, 1, generator=torch.Generator().manual_seed(3))
W_CAT = torch.randn(4, 16, generator=torch.Generator().manual_seed(4))
W_ROWS = torch.randn(9, 9, generator=torch.Generator().manual_seed(5))

def _and_zero_twice(y, then):
    """``y & 0`` read by an integer add and by a float product: tract knows it is a uniform zero."""
    v = y & ZERO.reshape(1, 1, 1)
    return (2 + v).reshape(1, 5, y.shape[2], 1), then(v)


def _strided_after_chain(y):
    """A dynamic strided slice of a long chain's difference: tract pulled the Downsample up
    through it and failed at run time ("Can not broadcast 2 against 3", fuzz seed 4040066)."""
    v1 = y * 0.7
    v3 = torch.where(v1 > 0.3, torch.tensor(-0.4), v1)
    v4 = torch.div(v3, -(v1.abs() + 0.5), rounding_mode="trunc")
    v6 = v4 % 1.19
    v7 = v6[::2]
    v6.sub_(v4 * v3)
    return v7


CASES = [
    # tract drops the broadcast of an integer `mul` by a uniform constant 1 (ones(S) * c has shape [1])
    OpCase("int_ones_like_times_size", lambda y: torch.ones_like(y) * y.shape[0], [ints(9)], dynamic_axes=DYN0),
    OpCase("int_ones_like_times_number", lambda y: torch.ones_like(y) * 3, [ints(9)], dynamic_axes=DYN0),
    OpCase("int_number_times_ones_like", lambda y: 3 * torch.ones_like(y), [ints(9)], dynamic_axes=DYN0),
    OpCase("int_new_ones_times_slice", lambda y: y.new_ones(2, y.shape[0]) * y[:1], [ints(9)], dynamic_axes=DYN0),
    OpCase("int_zeros_like_floordiv", lambda y: torch.zeros_like(y) // (y[:1].abs() + 1), [ints(9)], dynamic_axes=DYN0),
    OpCase("int_ones_like_pow_times", lambda y: torch.ones_like(y) ** 2 * y[:1], [ints(9)], dynamic_axes=DYN0),
    OpCase("int_and_zero_times", lambda y: (y & ZERO) * (y[:, :1] + 1), [ints(2, 9)],
           dynamic_axes={"x0": {1: "S"}}),
    # the same fold on a float product of an integer tensor tract knows to be zero
    OpCase("float_of_and_zero_div_number", lambda y: _and_zero_twice(y, lambda v: torch.div(v, -2)), [ints(1, 5, 9)],
           dynamic_axes={"x0": {2: "S"}}),
    # the same quotient floored is taken exactly in f64: the guard looks through the f32 -> f64 cast
    OpCase("float_of_and_zero_div_then_floor", lambda y: _and_zero_twice(y, lambda v: torch.floor(v.float() / -2)),
           [ints(1, 5, 9)], dynamic_axes={"x0": {2: "S"}}),
    OpCase("float_of_and_zero_times_item", lambda y: _and_zero_twice(y, lambda v: v.float() * y[:1, :1, :1].float()),
           [ints(1, 5, 9)], dynamic_axes={"x0": {2: "S"}}),
    # both operands of one shape known to be zero: the product folded to shape [1] (fuzz seed 913282)
    OpCase("int_square_of_times_zero", lambda y: torch.square((y ^ 3)[1:] * 0), [ints(9)], dynamic_axes=DYN0),
    # a matmul contracting a broadcast axis: tract summed one item of it (a third of torch's, fuzz seed 5050638)
    OpCase("matmul_contracting_an_expand", lambda y: y.expand(3, -1).mT @ y.expand(3, -1), [torch.randn(7)]),
    OpCase("matmul_contracting_an_expand_dyn", lambda y: y.expand(3, -1).mT @ y.expand(3, -1), [torch.randn(7)],
           dynamic_axes=DYN0),
    OpCase("matmul_contracting_one_expand", lambda x, y: x @ y[None].expand(3, -1), [torch.randn(4, 3), torch.randn(5)]),
    # a strided 1x1 conv below the reshapes of a flat roll: tract failed to pull its Downsample (fuzz 5050622)
    OpCase("strided_1x1_conv_after_roll", lambda x: F.conv2d(x.roll(1), W1X1, stride=2),
           [torch.randn(1, 1, 6, 4)]),
    OpCase("strided_1x1_conv_after_roll_dyn", lambda x: F.conv2d(x.roll(1), W1X1,
                                                                  stride=2), [torch.randn(1, 1, 6, 4)],
           dynamic_axes={"x0": {2: "S"}}),
    # ... also with elementwise ops between the roll and the conv (fuzz seed 8090762)
    OpCase("strided_1x1_conv_after_roll_clamp_dyn", lambda x: F.conv2d(x.roll(1).clamp(-0.5, 0.5) * 2, W1X1, stride=2),
           [torch.randn(1, 1, 6, 4)], dynamic_axes={"x0": {2: "S"}}),
    # ... or below a 1x1 conv, which tract makes an EinSum and a reshape (fuzz seed 24000)
    OpCase("strided_1x1_conv_after_1x1_conv_dyn", lambda x: F.conv2d(F.conv2d(x, W1X1), W1X1.reshape(1, 3, 1, 1), stride=2),
           [torch.randn(1, 1, 9, 8)], dynamic_axes={"x0": {2: "S", 3: "T"}}),
    OpCase("strided_1x1_conv_after_1x1_conv_relu_dyn",
           lambda x: F.conv2d(F.relu(F.conv2d(x, W1X1.reshape(1, 3, 1, 1))), W1X1, stride=(2, 3)),
           [torch.randn(1, 3, 9, 8)], dynamic_axes={"x0": {2: "S", 3: "T"}}),
    # ... or below a matmul (an EinSum in tract) and a transpose: an FFT along the rows (fuzz seed 13360)
    OpCase("strided_1x1_conv_after_matmul_transpose_dyn",
           lambda x: F.conv2d((x.mT @ W_ROWS).mT * 0.5, W1X1.reshape(1, 3, 1, 1), stride=2),
           [torch.randn(1, 3, 9, 8)], dynamic_axes={"x0": {3: "T"}}),
    OpCase("strided_dynamic_after_chain", _strided_after_chain, [torch.randn(3) * 2], dynamic_axes=DYN0),
    # a linear of a concatenation holding an expanded piece (DPT's "project" readout): tract split
    # the product per piece and failed at load ("Trying to substitute a B,6,4,F32 by B,1,4,F32")
    OpCase("linear_of_concat_with_expanded_piece",
           lambda h: F.linear(torch.cat([h[:, 1:], h[:, :1].expand_as(h[:, 1:])], -1), W_CAT),
           [torch.randn(2, 7, 8)], dynamic_axes=DYN0),
    OpCase("bool_ones_like_and", lambda b: torch.ones_like(b) & b[:1], [torch.rand(9) > 0.5], dynamic_axes=DYN0),
    OpCase("bool_ones_like_mul", lambda b: torch.ones_like(b) * b[:1], [torch.rand(9) > 0.5], dynamic_axes=DYN0),
    OpCase("int_arange_mask_times", lambda y: (torch.arange(y.shape[0]) < 3).long() * y[:1], [ints(9)],
           dynamic_axes=DYN0),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract_lowering(case, tmp_path):
    run_case(case, tmp_path, "tract")


def _setitem_then_matmul(x):
    x[..., -1:] = -2.91
    return x @ torch.ones(4, 3)


def _setitem_then_linear(x, y):
    y[2:] = -1.35
    x[:, ..., -1:] = -2.91
    return torch.nn.functional.linear(x, torch.linspace(-1, 1, 12).reshape(3, 4))


# a matmul of a concatenation with a constant tiled to a dynamic size: tract's declutter splits the
# matmul over the pieces and loses the dynamic dim of the tiled one ("Trying to substitute a S,3,3,F32
# by 1,1,3,F32 ... EinSum")
SETITEM_MATMUL_CASES = [
    OpCase("setitem_then_matmul", _setitem_then_matmul, [randn(3, 3, 4)], dynamic_axes=DYN0),
    OpCase("setitem_then_linear", _setitem_then_linear, [randn(3, 3, 4), randn(4, seed=1)], dynamic_axes=DYN0),
    OpCase("cat_full_then_matmul", lambda x: torch.cat([x, x.new_full((x.shape[0], 3, 1), 0.5)], -1) @ torch.ones(5, 2),
           [randn(3, 3, 4)], dynamic_axes=DYN0),
]


@pytest.mark.parametrize("case", SETITEM_MATMUL_CASES, ids=str)
def test_setitem_then_matmul(case, tmp_path):
    run_case(case, tmp_path, "tract")


W86 = torch.linspace(-1, 1, 48).reshape(8, 6)
DYN1 = {"x0": {1: "S"}}
# flip on a dynamic axis after a matmul: tract's declutter cannot pull the reversing downsample through
# the matmul ("Pulling Downsample over matmul.unmerge_out Reshape: Invalid axis"); roll on a dynamic axis
# with a shift that may exceed the size (torch reduces it modulo the size)
FLIP_ROLL_CASES = [
    OpCase("matmul_then_flip_dyn", lambda x: torch.matmul(x, W86).flip(1), [randn(2, 5, 8)], dynamic_axes=DYN1),
    OpCase("flip_varargs", lambda x: x.flip(0, 1) * 2, [randn(5, 3)], dynamic_axes=DYN0),
    OpCase("flip_dyn_int", lambda x: x.flip(0), [ints(5, 3)], dynamic_axes=DYN0),
    OpCase("roll_dyn_past_size", lambda x: torch.roll(x, 3, 1), [randn(2, 5)], dynamic_axes=DYN1),
    OpCase("roll_dyn_negative", lambda x: torch.roll(x, -4, 1) + 1, [randn(2, 5)], dynamic_axes=DYN1),
    OpCase("roll_dyn_flat", lambda x: torch.roll(x, 3), [randn(2, 5)], dynamic_axes=DYN1),
    OpCase("roll_dyn_two_axes", lambda x: torch.roll(x, (1, -7), (0, 1)), [ints(5, 5)],
           dynamic_axes={"x0": {0: "S", 1: "S"}}),
]


@pytest.mark.parametrize("case", FLIP_ROLL_CASES, ids=str)
def test_flip_roll(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("size", [1, 2, 3])
def test_roll_dynamic_at_small_sizes(size, tmp_path):
    """check_io's size below the example avoids 1: the sizes below the shift are run here by hand."""
    import numpy as np

    from fx2nnef.targets.tract_runner import run_tract_many

    r = run_case(OpCase("roll", lambda x: torch.roll(x, 3, 1), [randn(2, 5)], dynamic_axes=DYN1), tmp_path, "tract")
    x = randn(2, size, seed=size)
    got = run_tract_many(r.path, [[x.numpy()]])[0][0]
    np.testing.assert_array_equal(got, torch.roll(x, 3, 1).numpy())


W22 = torch.tensor([[0.5, -1.0], [2.0, 0.25]])
# a strided slice of an expanded tensor (tract pulls the downsample over the broadcast and fails at
# load), and a matmul with a constant after repeat_interleave (tract pushes the merge of the tiled axes
# through the matmul onto the constant and fails at load)
TILE_CASES = [
    OpCase("expand_then_strided_slice", lambda x: x.expand(3, -1, -1, -1)[:, ::3] * 2, [randn(2, 9, 4)]),
    OpCase("expand_then_strided_slice_dyn", lambda x: x.expand(3, -1, -1, -1)[:, ::3] * 2, [randn(2, 9, 4)],
           dynamic_axes={"x0": {2: "S"}}),
    OpCase("expand_then_strided_slice_of_tiled_axis", lambda x: x.expand(7, -1, -1, -1)[::3, ::2] * 2, [randn(2, 9, 4)]),
    OpCase("repeat_then_strided_slice", lambda x: x.repeat(2, 1, 1)[::3] * 2, [randn(2, 9, 4)]),
    OpCase("repeat_interleave_then_matmul", lambda x: x.repeat_interleave(3, dim=0) @ W22, [randn(5, 3, 4, 2)]),
    OpCase("repeat_interleave_dyn_then_matmul", lambda x: x.repeat_interleave(2, dim=2) @ W22, [randn(5, 3, 4, 2)],
           dynamic_axes={"x0": {2: "S"}}),
    OpCase("repeat_interleave_then_linear", lambda x: torch.nn.functional.linear(x.repeat_interleave(3, 0), W22),
           [randn(4, 3, 2)], dynamic_axes=DYN0),
]


@pytest.mark.parametrize("case", TILE_CASES, ids=str)
def test_tiles(case, tmp_path):
    run_case(case, tmp_path, "tract")


W_CONV = torch.linspace(-1, 1, 2).reshape(1, 2, 1, 1)
# a matmul or a 1x1 conv (a matmul in tract) whose batch is made by an expand: tract's declutter moves the
# broadcast after the product and loses it (batch 1 on a dynamic size, a load failure on a static one)
BATCH_TILE_CASES = [
    OpCase("conv1x1_of_expand_dyn", lambda x: torch.conv2d(x.expand(x.shape[2], -1, -1, -1), W_CONV),
           [randn(1, 2, 8, 3)], dynamic_axes={"x0": {2: "S"}}),
    OpCase("conv1x1_of_expand", lambda x: torch.conv2d(x.expand(4, -1, -1, -1), W_CONV, torch.ones(1)) * 2,
           [randn(1, 2, 5, 3)]),
    OpCase("matmul_of_expand_batch_dyn", lambda x: x.expand(x.shape[2], -1, -1, -1) @ torch.ones(3, 2),
           [randn(1, 2, 8, 3)], dynamic_axes={"x0": {2: "S"}}),
    OpCase("matmul_of_expand_batch", lambda x, y: x.expand(3, 4, 5) @ y, [randn(1, 4, 5), randn(1, 5, 2, seed=1)]),
    OpCase("conv1x1_of_transposed_expand_dyn", lambda x: torch.conv2d(x.expand(x.shape[2], -1, -1, -1).mT, W_CONV),
           [randn(1, 2, 8, 3)], dynamic_axes={"x0": {2: "S", 3: "T"}}),
    OpCase("matmul_of_permuted_expand", lambda x: x.expand(3, -1, -1, -1).permute(0, 1, 3, 2) @ torch.ones(4, 2),
           [randn(1, 2, 4, 5)], dynamic_axes={"x0": {3: "S"}}),
]


@pytest.mark.parametrize("case", BATCH_TILE_CASES, ids=str)
def test_batch_made_by_expand(case, tmp_path):
    run_case(case, tmp_path, "tract")


# tract pulls a strided slice's Downsample over a reshape above it and fails to load ("Pulling
# Downsample over Reshape: Invalid axis"): LeViT's subsampling of a token grid
def _subsample(x):
    b, n, c = x.shape
    return x.view(b, 4, 4, c)[:, ::2, ::2].reshape(b, -1, c) * 2


STRIDED_AFTER_RESHAPE = [
    OpCase("levit_subsample", _subsample, [randn(2, 16, 8)]),
    OpCase("levit_subsample_dynamic_batch", _subsample, [randn(2, 16, 8)], dynamic_axes={"x0": {0: "B"}}),
    # a step that does not divide the axis (its last item has no full row), with an offset
    OpCase("odd_rows_offset", lambda x: x.reshape(2, 7, 3)[:, 1::3] + 1, [randn(42)]),
    OpCase("two_steps_then_static", lambda x: x.reshape(-1, 6, 5)[:, ::4, 1:5:2], [randn(3, 30)],
           dynamic_axes={"x0": {0: "B"}}),
]


@pytest.mark.parametrize("case", STRIDED_AFTER_RESHAPE, ids=str)
def test_strided_slice_after_reshape(case, tmp_path):
    run_case(case, tmp_path, "tract")


W_UP = torch.linspace(-1, 1, 6).reshape(3, 2, 1, 1)
W_UP1 = torch.linspace(-1, 1, 6).reshape(3, 2, 1)
W_LIN = torch.linspace(-1, 1, 30).reshape(3, 10)
# an expand merged into its neighbour axis by a reshape, then a product with weights (a 1x1 conv, a
# linear): tract failed to load it ("Trying to substitute a 1,2,2,5,2,F32 by 1,2,1,5,1,F32 ... EinSum",
# fuzz seed 8419): a UNet or FPN decoder's nearest upsampling then projection
MERGED_TILE_CASES = [
    OpCase("nearest_then_conv1x1", lambda x: F.conv2d(F.interpolate(x, scale_factor=2), W_UP), [randn(1, 2, 4, 5)]),
    OpCase("nearest_then_conv1x1_dyn", lambda x: F.conv2d(F.interpolate(x, scale_factor=2), W_UP),
           [randn(1, 2, 4, 5)], dynamic_axes={"x0": {2: "H", 3: "W"}}),
    OpCase("nearest_rows_then_conv1x1_dyn", lambda x: F.conv2d(F.interpolate(x, scale_factor=(2, 1)), W_UP),
           [randn(2, 2, 4, 5)], dynamic_axes={"x0": {0: "B", 2: "H"}}),
    OpCase("nearest1d_then_conv1x1_dyn", lambda x: F.conv1d(F.interpolate(x, scale_factor=3), W_UP1),
           [randn(1, 2, 5)], dynamic_axes={"x0": {2: "T"}}),
    OpCase("nearest_then_linear_dyn", lambda x: F.linear(F.interpolate(x, scale_factor=2), W_LIN),
           [randn(1, 2, 4, 5)], dynamic_axes={"x0": {2: "H"}}),
    OpCase("expand_reshape_then_conv1x1_dyn",
           lambda x: F.conv2d(x[:, :, :, None].expand(-1, -1, -1, 2, -1).reshape(x.shape[0], 2, -1, 5), W_UP),
           [randn(1, 2, 4, 5)], dynamic_axes={"x0": {2: "H"}}),
    # the same with the constant on the left: an adaptive pool along the rows (fuzz seed 8936), a
    # cumsum (a product with a triangle of ones), an einsum with a weight
    OpCase("nearest_then_adaptive_pool_rows_dyn", lambda x: F.adaptive_avg_pool2d(F.interpolate(x, scale_factor=2), (7, None)),
           [randn(1, 3, 6, 4)], dynamic_axes={"x0": {3: "S"}}),
    OpCase("nearest_then_cumsum_dyn", lambda x: F.interpolate(x, scale_factor=2).cumsum(-1),
           [randn(1, 2, 4, 5)], dynamic_axes={"x0": {2: "H"}}),
    OpCase("nearest_then_einsum_dyn", lambda x: torch.einsum("bchw,dw->bchd", F.interpolate(x, scale_factor=2), W_LIN),
           [randn(1, 2, 4, 5)], dynamic_axes={"x0": {2: "H"}}),
    # the fuzz case itself: a dynamic slice of one row, upsampled, then a 1x1 conv with a bias
    OpCase("last_row_nearest_then_conv1x1_dyn",
           lambda x: F.conv2d(F.interpolate(x[:, :, x.shape[2] - 1:], scale_factor=2), W_UP, torch.ones(3)),
           [randn(1, 2, 9, 5)], dynamic_axes={"x0": {2: "S"}}),
]


@pytest.mark.parametrize("case", MERGED_TILE_CASES, ids=str)
def test_merged_expand_then_weights(case, tmp_path):
    run_case(case, tmp_path, "tract")


# an integer comparison ``a > b`` on operands tract knows to be uniform (a product by a zero
# constant, a tensor of zeros, a tiled constant) read by a select or an ``and``: tract 0.23.9 took
# it as true whatever the values (0 > 0, 0 > 1), so ``v[v > 0] = 1`` after ``v = x * 0`` gave ones
# (fuzz seeds 19139, 20353); an integer ``gt`` is emitted as ``lt`` with the operands swapped
UNIFORM_GT_CASES = [
    OpCase("int_product_by_zero_gt_where_dyn", lambda x: torch.where(x * 0 > 0, 1, x * 0), [ints(9)], dynamic_axes=DYN0),
    OpCase("int_product_by_zero_gt_one_where_dyn", lambda x: torch.where(x * 0 > 1, 1, x), [ints(9)], dynamic_axes=DYN0),
    OpCase("int_zeros_gt_where_dyn", lambda x: torch.where(torch.zeros_like(x) > 0, 1, x), [ints(9)], dynamic_axes=DYN0),
    OpCase("int_zero_lt_product_and_dyn", lambda x: torch.where((0 < x * 0) & (x >= x), 1, x), [ints(9)], dynamic_axes=DYN0),
    OpCase("int32_product_by_zero_gt_where_dyn", lambda x: torch.where(x.int() * 0 > 0, x.int(), 0), [ints(9)],
           dynamic_axes=DYN0),
    OpCase("int_masked_fill_after_product_by_zero", lambda x: (x * ZERO).masked_fill(x * ZERO > 0, 1), [ints(3, 5)]),
]


@pytest.mark.parametrize("case", UNIFORM_GT_CASES, ids=str)
def test_integer_gt_of_uniform_operands(case, tmp_path):
    run_case(case, tmp_path, "tract")
