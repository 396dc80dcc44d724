"""Convolutions: conv1d/2d/3d and conv_transpose1d/2d/3d exported and run in tract and nnef_tools."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness import OpCase, randn, run_case


def mod(cls, *args, **kwargs) -> nn.Module:
    """A module with seeded random weights."""
    torch.manual_seed(0)
    return cls(*args, **kwargs)


def case(name, op, inputs, **kw) -> OpCase:
    """An OpCase for a module or a function."""
    if isinstance(op, nn.Module):
        return OpCase(name, None, inputs, module=op, **kw)
    return OpCase(name, op, inputs, **kw)


X1 = randn(2, 3, 11)
X2 = randn(2, 4, 9, 10)
X3 = randn(2, 3, 5, 6, 7)
W2 = randn(6, 4, 3, 3, seed=1)
WT = randn(4, 3, 3, 3, seed=2)  # conv_transpose weight [C_in=4, C_out/g=3, k, k]
TRACT_ONLY = {"khronos": False}


def conv_input_weight(x, w):
    return F.conv2d(x, w, stride=2, padding=1)


def deconv_input_weight(x, w):
    return F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2)


class SmallCNN(nn.Module):
    """conv -> relu -> max_pool -> depthwise conv -> upsample -> conv_transpose -> global pool -> linear."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.up = nn.ConvTranspose2d(8, 6, 2, stride=2)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.stem(x)), 2)
        y = F.interpolate(torch.relu(self.dw(y)), scale_factor=2)
        y = F.adaptive_avg_pool2d(self.up(y), 1)
        return self.head(torch.flatten(y, 1))


CASES = [
    case("conv1d", mod(nn.Conv1d, 3, 5, 3), [X1]),
    case("conv1d_stride_pad_dil", mod(nn.Conv1d, 3, 4, 3, stride=2, padding=2, dilation=2), [X1]),
    case("conv1d_same_even_k", mod(nn.Conv1d, 3, 4, 4, padding="same", dilation=2), [X1]),
    case("conv1d_valid_nobias", mod(nn.Conv1d, 3, 4, 3, padding="valid", bias=False), [X1]),
    case("conv1d_groups", mod(nn.Conv1d, 4, 6, 3, groups=2), [randn(2, 4, 11)]),
    case("conv1d_unbatched", mod(nn.Conv1d, 3, 5, 3, padding=1), [randn(3, 11)]),
    case("conv1d_dyn_time", mod(nn.Conv1d, 3, 5, 5, padding="same"), [X1], dynamic_axes={"x0": {2: "T"}}, **TRACT_ONLY),
    case("conv1d_input_weight_bias", F.conv1d, [X1, randn(4, 3, 2, seed=3), randn(4, seed=4)]),
    case("conv2d", mod(nn.Conv2d, 4, 6, 3), [X2]),
    case("conv2d_stride_pad", mod(nn.Conv2d, 4, 6, 3, stride=2, padding=1), [X2]),
    case("conv2d_tuple_args", mod(nn.Conv2d, 4, 5, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2)), [X2]),
    case("conv2d_same_dil", mod(nn.Conv2d, 4, 4, 4, padding="same", dilation=2), [X2]),
    case("conv2d_groups_nobias", mod(nn.Conv2d, 4, 6, 3, groups=2, bias=False), [X2]),
    case("conv2d_depthwise", mod(nn.Conv2d, 4, 8, 3, groups=4, padding=1), [X2]),
    case("conv2d_functional", lambda x: F.conv2d(x, W2, torch.ones(6), padding=(0, 1)), [X2]),
    case("conv2d_input_weight", conv_input_weight, [X2, W2]),
    case("conv2d_unbatched", mod(nn.Conv2d, 4, 6, 3), [randn(4, 9, 10)]),
    case("conv2d_reflect_mode", mod(nn.Conv2d, 4, 6, 3, padding=1, padding_mode="reflect"), [X2]),
    case("conv2d_circular_mode", mod(nn.Conv2d, 4, 6, 3, padding=(1, 2), padding_mode="circular"), [X2]),
    case("conv2d_f16", mod(nn.Conv2d, 4, 6, 3, padding=1).half(), [X2.half()], **TRACT_ONLY),
    case("conv2d_dyn_batch", mod(nn.Conv2d, 4, 6, 3, stride=2, padding=1), [X2], dynamic_axes={"x0": {0: "B"}},
         **TRACT_ONLY),
    case("conv3d", mod(nn.Conv3d, 3, 4, 3, padding=(1, 0, 1), stride=(1, 2, 1)), [X3]),
    # conv_transpose: C_in != C_out, groups > 1 and output_padding check the filter layout of each engine
    case("deconv1d_3to5", mod(nn.ConvTranspose1d, 3, 5, 3), [X1]),
    case("deconv1d_outpad_gt_pad", mod(nn.ConvTranspose1d, 3, 5, 3, stride=2, output_padding=1), [X1]),
    case("deconv1d_groups", mod(nn.ConvTranspose1d, 4, 6, 4, stride=3, padding=1, output_padding=2, groups=2),
         [randn(2, 4, 11)]),
    case("deconv2d_3to5", mod(nn.ConvTranspose2d, 3, 5, 3, stride=2, padding=1, output_padding=1), [randn(2, 3, 6, 7)]),
    case("deconv2d_groups_dil", mod(nn.ConvTranspose2d, 4, 6, (3, 2), stride=(2, 1), padding=(1, 0), groups=2,
                                    dilation=(1, 2), bias=False), [X2]),
    case("deconv2d_depthwise", mod(nn.ConvTranspose2d, 4, 8, 3, stride=2, groups=4), [X2]),
    case("deconv2d_input_weight", deconv_input_weight, [X2, WT]),
    case("deconv2d_unbatched", mod(nn.ConvTranspose2d, 3, 5, 3, stride=2), [randn(3, 6, 7)]),
    case("deconv2d_dyn_batch", mod(nn.ConvTranspose2d, 3, 5, 3, stride=2), [randn(2, 3, 6, 7)],
         dynamic_axes={"x0": {0: "B"}}, **TRACT_ONLY),
    case("deconv3d", mod(nn.ConvTranspose3d, 3, 2, 3, stride=(2, 1, 1), padding=1, output_padding=(1, 0, 0)), [X3]),
    case("small_cnn", SmallCNN(), [randn(2, 3, 16, 16)]),
    case("small_cnn_dyn_batch", SmallCNN(), [randn(2, 3, 16, 16)], dynamic_axes={"x0": {0: "B"}}, **TRACT_ONLY),
    case("deconv2d_f16", mod(nn.ConvTranspose2d, 4, 6, 3, stride=2, groups=2).half(), [X2.half()],
         **TRACT_ONLY),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")




@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")
