"""Fourier transforms and STFT: ``torch.fft.*`` and ``torch.stft`` become DFT matmuls with cosine
and sine matrices built from ``torch.arange`` (complex results as real pairs, see
fx2nnef/fx_tracer/passes/complex.py), so audio front-ends (power spectrogram, mel filterbank,
log) and FNet's token mixing export, with dynamic lengths; checked in tract against PyTorch.

A DFT by matmul sums in another order than torch's FFT: the rounding differences are of the
order of 1e-6 relative to the largest value, which the default ``approximate`` level covers
for inputs of unit scale; each looser level below says why it is needed."""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from harness import FnModule, OpCase, check_op, randn, run_case, tract_matches_eager


def real_pair(z):
    return torch.view_as_real(z)


CASES = [
    OpCase("rfft", lambda x: real_pair(torch.fft.rfft(x)), [randn(2, 16)]),
    OpCase("rfft_odd_n_pad_ortho", lambda x: real_pair(torch.fft.rfft(x, n=21, norm="ortho")), [randn(3, 16)]),
    OpCase("rfft_n_cut_forward_dim0", lambda x: real_pair(torch.fft.rfft(x, n=8, dim=0, norm="forward")),
           [randn(12, 3)]),
    OpCase("fft_of_real", lambda x: real_pair(torch.fft.fft(x)), [randn(2, 3, 10)]),
    OpCase("fft_complex_n_ortho", lambda x: real_pair(torch.fft.fft(torch.view_as_complex(x), n=12, norm="ortho")),
           [randn(2, 9, 2)]),
    OpCase("ifft_middle_dim", lambda x: real_pair(torch.fft.ifft(torch.view_as_complex(x), dim=1)),
           [randn(2, 7, 5, 2)]),
    OpCase("ifft_n_forward", lambda x: real_pair(torch.fft.ifft(torch.view_as_complex(x), n=6, norm="forward")),
           [randn(3, 8, 2)]),
    OpCase("irfft_even", lambda x: torch.fft.irfft(torch.fft.rfft(x) * 0.5), [randn(2, 16)]),
    OpCase("irfft_of_complex", lambda x: torch.fft.irfft(torch.view_as_complex(x)), [randn(3, 9, 2)]),
    OpCase("irfft_odd_n_ortho", lambda x: torch.fft.irfft(torch.view_as_complex(x), n=15, norm="ortho"),
           [randn(3, 9, 2)]),
    OpCase("irfft_n_pad_forward", lambda x: torch.fft.irfft(torch.view_as_complex(x), n=20, norm="forward", dim=0),
           [randn(6, 4, 2)]),
    OpCase("hfft_ihfft", lambda x: torch.fft.hfft(torch.fft.ihfft(x) * 2.0, n=x.shape[-1]), [randn(2, 11)]),
    OpCase("fft2_real", lambda x: torch.fft.fft2(x).real, [randn(2, 6, 8)]),
    OpCase("fftn_dims_s", lambda x: real_pair(torch.fft.fftn(x, s=(5, 10), dim=(0, 2))), [randn(4, 3, 8)]),
    OpCase("ifftn_complex", lambda x: real_pair(torch.fft.ifftn(torch.view_as_complex(x), norm="ortho")),
           [randn(3, 4, 5, 2)]),
    OpCase("rfft2_irfft2", lambda x: torch.fft.irfft2(torch.fft.rfft2(x) * 2, s=x.shape[-2:]), [randn(2, 6, 9)]),
    # ops on complex results: abs, angle, conj, powers, products, sums, transposes, reductions
    OpCase("complex_elementwise", lambda x: torch.stack([
        torch.fft.rfft(x).abs(), torch.abs(torch.fft.rfft(x) ** 2), (torch.fft.rfft(x) * 1j).imag,
        (torch.fft.rfft(x) / (torch.fft.rfft(x.flip(-1)) + 3.0)).real, torch.fft.rfft(x).conj().imag,
        (2.0 - torch.fft.rfft(x)).imag, torch.exp(torch.fft.rfft(x) * 0.1).real]), [randn(2, 12)]),
    OpCase("complex_shapes", lambda x: torch.view_as_real(
        torch.fft.fft(x).transpose(0, 1).permute(1, 0, 2).flatten(1).sum(0, keepdim=True)), [randn(2, 3, 4)]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_fft_tract(case, tmp_path):
    assert run_case(case, tmp_path).check.ok


def test_angle_tract(tmp_path):
    """``angle`` is ``atan2(im, re)``. Where a bin's imaginary part is 0 in torch (the DC and
    Nyquist bins of a real signal) a DFT by matmul gives +-0 or +-1e-7, and the angle of a
    negative real part jumps between pi and -pi: the test reads bins 1..5 only."""
    def fn(x):
        return torch.fft.rfft(x)[..., 1:6].angle()
    assert check_op(fn, [randn(2, 12)], tmp_path).check.ok


def test_fft_dynamic_length(tmp_path):
    """A transform over a dynamic axis: the DFT matrices are computed in the graph from the length."""
    def fn(x, y):
        product = torch.fft.rfft(x) * torch.fft.rfft(y)  # a circular convolution
        return torch.fft.irfft(product, n=x.shape[-1]), torch.fft.fft(x, norm="ortho").abs()
    r = check_op(fn, [randn(2, 12), randn(2, 12, seed=1)], tmp_path, dynamic_axes={"x0": {1: "N"}, "x1": {1: "N"}})
    assert r.check.ok and len(r.check.cases) >= 3
    tract_matches_eager(r.path, FnModule(fn), [[randn(2, 31), randn(2, 31, seed=2)],
                                               [randn(2, 2), randn(2, 2, seed=3)]])


def test_fft_n_fixed_over_dynamic_length(tmp_path):
    """``n`` given and the input length dynamic: shorter inputs are padded, longer ones cut, by the same graph."""
    def fn(x):
        return torch.view_as_real(torch.fft.rfft(x, n=10))
    r = check_op(fn, [randn(2, 8)], tmp_path, dynamic_axes={"x0": {1: "N"}})
    assert r.check.ok
    tract_matches_eager(r.path, FnModule(fn), [[randn(2, 10)], [randn(2, 17)], [randn(2, 3)]])


class MelFrontEnd(torch.nn.Module):
    """A log-mel front-end as audio models compute it inside forward (Whisper's recipe): power
    STFT with a Hann window (frames at 25 ms / 10 ms of 16 kHz audio, n_fft 400), drop the
    last frame, mel filterbank matmul, log10 with a floor, dynamic range clamp."""

    def __init__(self, n_fft=400, hop=160, n_mels=24):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        fb = torch.rand(n_mels, n_fft // 2 + 1, generator=torch.Generator().manual_seed(3))
        self.register_buffer("filters", fb * (fb > 0.8))  # sparse positive rows like a mel bank

    def forward(self, audio):
        stft = torch.stft(audio, self.n_fft, self.hop, window=self.window, return_complex=True)
        magnitudes = stft[..., :-1].abs() ** 2
        mel = self.filters @ magnitudes
        log_spec = torch.clamp(mel, min=1e-10).log10()
        return (torch.maximum(log_spec, log_spec.max() - 8.0) + 4.0) / 4.0


def test_stft_log_mel_dynamic_samples(tmp_path):
    """Power spectrogram + mel matmul + log of a dynamic number of samples (the export checks
    itself at two other lengths; the asset is then run at more lengths). log10 of the power
    turns a relative error of the power into an absolute one: ``approximate`` holds."""
    model = MelFrontEnd().eval()
    audio = randn(1, 3200) * 0.1
    r = fx2nnef.export(model, (audio,), tmp_path / "mel.nnef.tgz", input_names=["audio"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"audio": {1: "T"}}))
    assert r.check.ok and len(r.check.cases) >= 3, r
    tract_matches_eager(r.path, model, [[randn(1, 4801, seed=5) * 0.1], [randn(1, 1000, seed=6) * 0.1]])


def test_stft_hann_short_window_power(tmp_path):
    """``win_length < n_fft`` (the window padded centred), batch of signals, constant and
    replicate padding, normalized, no window, and the onesided=False two-sided spectrum."""
    window = torch.hann_window(20)

    def fn(x):
        a = torch.stft(x, 32, hop_length=8, win_length=20, window=window, pad_mode="constant",
                       normalized=True, return_complex=True)
        b = x.stft(16, 5, window=torch.hann_window(16), center=False, onesided=False, return_complex=True)
        c = torch.stft(x, 32, 8, win_length=20, pad_mode="replicate", return_complex=True)  # no window: ones
        return a.abs().pow(2), b.real, b.imag, c.abs()
    r = check_op(fn, [randn(3, 150)], tmp_path, dynamic_axes={"x0": {0: "B", 1: "T"}})
    assert r.check.ok


def test_stft_legacy_real_output_and_1d(tmp_path):
    """``return_complex=False`` (the real pair ``[..., 2]``), a 1-D signal, no window, the
    default hop, reflect padding."""
    def fn(x):
        return torch.stft(x, 16, return_complex=False, window=torch.ones(16))
    assert check_op(fn, [randn(100)], tmp_path, dynamic_axes={"x0": {0: "T"}}).check.ok


def test_istft_round_trip_dynamic(tmp_path):
    """torch.istft: irfft of each frame, window, overlap-add in blocks of gcd(n_fft, hop) (here
    400 and 160: blocks of 80), divided by the overlap-added squared window; ``length`` read from
    the input's size, past the last frame (zeros there, as torch)."""
    window = torch.hann_window(400)

    def fn(x):
        z = torch.stft(x, 400, 160, window=window, return_complex=True)
        z = z * torch.linspace(1.0, 0.5, 201)[:, None]  # a filter
        return torch.istft(z, 400, 160, window=window, length=x.shape[-1] - 3)
    r = check_op(fn, [randn(1, 2000)], tmp_path, dynamic_axes={"x0": {1: "T"}})
    assert r.check.ok and len(r.check.cases) >= 3


def test_istft_short_window_normalized(tmp_path):
    def fn(x):
        z = torch.stft(x, 32, 8, win_length=24, window=torch.hann_window(24), normalized=True, return_complex=True)
        a = torch.istft(z, 32, 8, win_length=24, window=torch.hann_window(24), normalized=True)
        z = torch.stft(x[0], 12, 3, window=torch.ones(12), return_complex=True)
        return a, torch.istft(z, 12, 3, length=120)
    assert check_op(fn, [randn(2, 150)], tmp_path, dynamic_axes={"x0": {1: "T"}}).check.ok


def test_unsupported_complex_op_is_refused_with_its_line(tmp_path):
    """fftshift of a complex spectrum is not rewritten: the error names the op and the source line."""
    def fn(x):
        return torch.fft.fftshift(torch.fft.fft(x)).real
    with pytest.raises(fx2nnef.errors.TraceError, match=r"complex tensors: this op is not supported on "
                                                        r"complex values .*fftshift.*test_ops_fft.py:\d+"):
        check_op(fn, [randn(1, 16)], tmp_path)


def test_istft_two_sided_is_refused(tmp_path):
    def fn(x):
        z = torch.stft(x, 16, 4, window=torch.hann_window(16), onesided=False, return_complex=True)
        return torch.istft(z, 16, 4, window=torch.hann_window(16), onesided=False)
    with pytest.raises(fx2nnef.errors.TraceError, match=r"complex tensors: torch.istft is supported for a complex "
                                                        r"onesided spectrum.*istft.*test_ops_fft.py:\d+"):
        check_op(fn, [randn(1, 100)], tmp_path)


def test_complex_output_is_refused(tmp_path):
    with pytest.raises(fx2nnef.errors.TraceError, match=r"complex tensors: a complex output"):
        check_op(lambda x: torch.fft.rfft(x), [randn(2, 8)], tmp_path)


def tiny_fnet():
    from transformers import FNetConfig, FNetModel

    torch.manual_seed(0)
    config = FNetConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                        max_position_embeddings=64, type_vocab_size=2, use_tpu_fourier_optimizations=False)
    model = FNetModel(config).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model


def test_fnet_dynamic_sequence(tmp_path):
    """transformers' FNet: ``torch.fft.fftn(x, dim=(1, 2)).real`` mixes tokens over a dynamic
    sequence length (its DFT matrix is built in the graph) and the hidden size (constant)."""
    model = tiny_fnet()
    ids = torch.randint(0, 100, (2, 11), generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (ids,), tmp_path / "fnet.nnef.tgz", input_names=["input_ids"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3, r
    more = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(1))

    class Hidden(torch.nn.Module):
        def forward(self, input_ids):
            out = model(input_ids)
            return out.last_hidden_state, out.pooler_output
    tract_matches_eager(r.path, Hidden(), [[more], [more[:, :3]]])


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("rfft_odd_n_pad_ortho", "irfft_odd_n_ortho",
                                                                 "fft2_real", "complex_elementwise")], ids=str)
def test_fft_khronos(case, tmp_path):
    """Static transforms are constant matrices: standard NNEF (the nnef_tools interpreter) runs them too."""
    assert run_case(case, tmp_path, "khronos").check.ok


def test_stft_khronos(tmp_path):
    window = torch.hann_window(16)
    assert check_op(lambda x: torch.stft(x, 16, 4, window=window, return_complex=True).abs(), [randn(2, 64)],
                    tmp_path, target="khronos").check.ok


def test_huge_transform_is_refused(tmp_path):
    """A DFT by matmul is O(N^2): an rfft of 20000 points (matrices of 20000 x 10001) is refused
    with the op and its line rather than written as gigabytes of constants."""
    with pytest.raises(fx2nnef.errors.TraceError, match=r"complex tensors: a Fourier transform of 20000 points.*"
                                                        r"fft_rfft.*test_ops_fft.py:\d+"):
        check_op(lambda x: torch.fft.rfft(x).abs(), [randn(1, 20000)], tmp_path)
