"""Shape and layout ops: one-op modules exported and run in tract and nnef_tools."""
import pytest
import torch

from harness import OpCase, randbool, randint, randn, run_case

F32 = randn(2, 3, 4)
F16 = randn(2, 3, 4, dtype=torch.float16)
I64 = randint(-5, 5, 2, 3, 4)
B = randbool(2, 3, 4)
UNIT = randn(2, 1, 4)
DYN0 = {"x0": {0: "B"}}
DYN1 = {"x0": {1: "S"}}
TRACT = dict(khronos=False)  # no standard NNEF form, or covered by a sibling case
TRACT_ONLY = dict(khronos=False)


def pieces(fn):
    """Multi-output ops return a tuple of tensors."""
    return lambda x: tuple(fn(x))


CASES = [
    # reshapes
    OpCase("view", lambda x: x.view(6, 4), [F32]),
    OpCase("view_minus1", lambda x: x.view(-1, 4), [F32], **TRACT),
    OpCase("view_tuple", lambda x: x.view((2, 12)), [F32], **TRACT),
    OpCase("reshape_list", lambda x: torch.reshape(x, [4, -1]), [F32]),
    OpCase("view_dyn", lambda x: x.view(x.shape[0], -1), [F32], dynamic_axes=DYN0, **TRACT),
    OpCase("reshape_dyn_sizes", lambda x: x.reshape(x.size(0), 3, 2, 2), [F32], dynamic_axes=DYN0, **TRACT),
    OpCase("view_dyn_minus1_first", lambda x: x.view(-1, 4), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("view_as", lambda x, y: x.view_as(y), [F32, randn(4, 6)]),
    OpCase("reshape_as_i64", lambda x, y: x.reshape_as(y), [I64, randn(24)], **TRACT),
    OpCase("flatten", lambda x: x.flatten(), [F32], **TRACT),
    OpCase("flatten_1", lambda x: torch.flatten(x, 1), [F32]),
    OpCase("flatten_dyn", lambda x: x.flatten(0, 1), [F32], dynamic_axes=DYN0, **TRACT),
    OpCase("unflatten", lambda x: x.unflatten(2, (2, 2)), [F32], **TRACT),
    OpCase("unflatten_minus1", lambda x: torch.unflatten(x, -1, (-1, 2)), [F32]),
    OpCase("nn_flatten", None, [F32], module=torch.nn.Flatten()),
    OpCase("squeeze_all", lambda x: x.squeeze(), [UNIT]),
    OpCase("squeeze_dim", lambda x: x.squeeze(1), [UNIT], **TRACT),
    OpCase("squeeze_noop", lambda x: x.squeeze(0) + 1, [UNIT], **TRACT),
    OpCase("squeeze_list", lambda x: torch.squeeze(x, (0, 1)), [randn(1, 1, 4)], **TRACT),
    OpCase("unsqueeze", lambda x: x.unsqueeze(1), [F32]),
    OpCase("unsqueeze_neg", lambda x: torch.unsqueeze(x, -1), [F32], **TRACT),
    OpCase("unsqueeze_bool", lambda x: x.unsqueeze(0), [B], **TRACT),
    # permutations
    OpCase("permute", lambda x: x.permute(2, 0, 1), [F32]),
    OpCase("permute_list", lambda x: x.permute([1, 2, 0]), [F32], **TRACT),
    OpCase("torch_permute", lambda x: torch.permute(x, (0, 2, 1)), [F32], **TRACT),
    OpCase("transpose", lambda x: x.transpose(1, 2), [F32]),
    OpCase("transpose_neg_f16", lambda x: torch.transpose(x, -1, 0), [F16], **TRACT_ONLY),
    OpCase("swapaxes", lambda x: x.swapaxes(0, 1), [F32], **TRACT),
    OpCase("swapdims", lambda x: torch.swapdims(x, 0, 2), [I64], **TRACT),
    OpCase("t", lambda x: x.t(), [randn(3, 5)]),
    OpCase("t_1d", lambda x: torch.t(x) * 2, [randn(5)], **TRACT),
    OpCase("movedim", lambda x: x.movedim(0, -1), [F32], **TRACT),
    OpCase("movedim_list", lambda x: torch.movedim(x, (0, 1), (2, 0)), [F32]),
    OpCase("transpose_dyn", lambda x: x.transpose(0, 1), [F32], dynamic_axes=DYN1, **TRACT),
    # broadcasting and repetition
    OpCase("expand", lambda x: x.expand(2, 3, 4), [UNIT], **TRACT),
    OpCase("expand_minus1", lambda x: x.expand(5, -1, 3, -1), [UNIT]),
    OpCase("expand_list", lambda x: x.expand([2, 3, 4]), [UNIT], **TRACT),
    OpCase("expand_as", lambda x, y: x.expand_as(y), [randn(3, 1), randn(2, 3, 4)]),
    OpCase("expand_i64", lambda x: x.expand(2, 3, 4), [randint(0, 9, 2, 1, 4)], **TRACT),
    OpCase("expand_bool", lambda x: x.expand(2, 3, 4), [randbool(2, 1, 4)], **TRACT),
    OpCase("expand_dyn", lambda x: x[:, :1].expand(2, x.shape[1], 4), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("expand_as_dyn", lambda x: x[:, :1].expand_as(x), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("broadcast_to", lambda x: torch.broadcast_to(x, (3, 2, 3, 4)), [randn(3, 1)]),
    OpCase("repeat", lambda x: x.repeat(2, 1, 3), [F32], **TRACT),
    OpCase("repeat_more", lambda x: x.repeat(2, 1, 1, 2), [F32]),
    OpCase("repeat_f16", lambda x: x.repeat(1, 2, 1), [F16], **TRACT_ONLY),
    OpCase("tile", lambda x: torch.tile(x, (2,)), [F32]),
    OpCase("repeat_dyn", lambda x: x.repeat(1, 2, 1), [F32], dynamic_axes=DYN1, **TRACT),
    # joining
    OpCase("cat", lambda x, y: torch.cat([x, y], dim=1), [F32, randn(2, 5, 4)]),
    OpCase("cat_neg", lambda x: torch.cat((x, x, x), -1), [F32], **TRACT),
    OpCase("cat_axis", lambda x: torch.concat([x, x], axis=0), [F32], **TRACT),
    OpCase("concatenate", lambda x: torch.concatenate([x, x * 2], 2), [F32], **TRACT),
    OpCase("cat_one", lambda x: torch.cat([x]) + 1, [F32], **TRACT),
    OpCase("cat_i64", lambda x: torch.cat([x, x], 0), [I64], **TRACT),
    OpCase("cat_bool", lambda x: torch.cat([x, x], 1), [B], **TRACT),
    OpCase("cat_f16", lambda x: torch.cat([x, x], 1), [F16], **TRACT_ONLY),
    OpCase("cat_dyn", lambda x: torch.cat([x, x[:, :1]], dim=1), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("cat_dyn_two_symbols", lambda x, y: torch.cat([x, y], dim=1), [F32, randn(2, 2, 4)], dynamic_axes={"x0": {1: "S"}, "x1": {1: "P"}}, **TRACT),
    OpCase("stack", lambda x, y: torch.stack([x, y]), [F32, randn(2, 3, 4, seed=1)]),
    OpCase("stack_last", lambda x: torch.stack([x, x * 2], dim=-1), [F32], **TRACT),
    OpCase("stack_i64", lambda x: torch.stack([x, x], 1), [I64], **TRACT),
    OpCase("stack_dyn", lambda x: torch.stack([x, x], 1), [F32], dynamic_axes=DYN1, **TRACT),
    # splitting
    OpCase("split_int", pieces(lambda x: torch.split(x, 2, dim=2)), [F32], **TRACT),
    OpCase("split_uneven", pieces(lambda x: x.split(2, 1)), [F32], **TRACT),
    OpCase("split_list", pieces(lambda x: torch.split(x, [1, 3], -1)), [F32]),
    OpCase("split_dyn_list", pieces(lambda x: x.split([1, x.shape[1] - 1], 1)), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("split_i64", pieces(lambda x: x.split(1, 0)), [I64], **TRACT),
    OpCase("chunk", pieces(lambda x: x.chunk(2, -1)), [F32], **TRACT),
    OpCase("chunk_uneven", pieces(lambda x: torch.chunk(x, 2, 1)), [F32]),
    OpCase("chunk_dyn_other_axis", pieces(lambda x: x.chunk(2, 2)), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("unbind", pieces(lambda x: x.unbind(1)), [F32]),
    OpCase("unbind_0", pieces(lambda x: torch.unbind(x)), [F32], **TRACT),
    OpCase("unbind_bool", pieces(lambda x: x.unbind(2)), [B], **TRACT),
    # identities and casts
    OpCase("contiguous", lambda x: x.transpose(0, 1).contiguous(), [F32], **TRACT),
    OpCase("clone", lambda x: torch.clone(x) + 1, [F32], **TRACT),
    OpCase("clone_output", lambda x: x.clone(), [F32]),
    OpCase("detach", lambda x: x.detach() * 2, [F32], **TRACT),
    OpCase("to_f16", lambda x: x.to(torch.float16), [F32], **TRACT_ONLY),
    OpCase("to_device", lambda x: x.to("cpu") + 1, [F32], **TRACT),
    OpCase("to_device_dtype", lambda x: x.to("cpu", torch.int64), [F32 * 3], **TRACT),
    OpCase("to_kw", lambda x: x.to(dtype=torch.float32) + 1, [I64], **TRACT),
    OpCase("to_other", lambda x, y: x.to(y), [F32 * 3, I64], **TRACT),
    OpCase("float", lambda x: x.float(), [I64], **TRACT),
    OpCase("half", lambda x: x.half(), [F32], **TRACT_ONLY),
    OpCase("double", lambda x: x.double(), [F32], **TRACT),
    OpCase("long", lambda x: x.long(), [F32 * 3], **TRACT),
    OpCase("int", lambda x: x.int(), [F32 * 3], **TRACT),
    OpCase("bool", lambda x: x.bool(), [I64], **TRACT),
    OpCase("bool_to_float", lambda x: x.float(), [B]),
    OpCase("float_to_bool", lambda x: x.bool(), [F32], **TRACT),
    OpCase("type", lambda x: x.type(torch.int32), [F32 * 3], **TRACT),
    OpCase("type_as", lambda x, y: x.type_as(y), [I64, F32], **TRACT),
    OpCase("type_as_f16", lambda x, y: x.type_as(y), [F32, F16], **TRACT_ONLY),
    # reversals and rotations
    OpCase("flip", lambda x: x.flip(2), [F32], **TRACT),
    OpCase("flip_many", lambda x: torch.flip(x, (0, -1)), [F32]),
    OpCase("flip_i64", lambda x: x.flip(1), [I64], **TRACT),
    OpCase("flip_dyn", lambda x: x.flip(1), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("roll", lambda x: x.roll(1, 2), [F32], **TRACT),
    OpCase("roll_neg", lambda x: torch.roll(x, -1, 1), [F32], **TRACT),
    OpCase("roll_many", lambda x: torch.roll(x, (5, -2), (1, 2)), [F32]),
    OpCase("roll_flat", lambda x: torch.roll(x, 3), [F32], **TRACT),
    OpCase("roll_dyn", lambda x: x.roll(1, 1), [F32], dynamic_axes=DYN1, **TRACT),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_view_dtype_is_refused(tmp_path):
    import fx2nnef
    from harness import check_op

    with pytest.raises(fx2nnef.UnsupportedOpError, match="reinterprets bits"):
        check_op(lambda x: x.view(torch.int32), [F32], tmp_path)


def test_chunk_of_dynamic_axis_is_refused(tmp_path):
    import fx2nnef
    from harness import check_op

    # at S=1 the model returns one chunk, the graph indexes a second one: refused at that line
    with pytest.raises(fx2nnef.GuardError, match=r"test_ops_shape.py:\d+"):
        check_op(pieces(lambda x: x.chunk(2, 1)), [F32], tmp_path, dynamic_axes=DYN1)
