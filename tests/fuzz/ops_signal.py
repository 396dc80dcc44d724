"""Statements on signals and images: the FFT family and STFT (through the complex pass, taken
back to real numbers with abs/real/imag), adaptive and ceil_mode pooling over dynamic sizes,
and F.interpolate in its nearest, linear and bicubic modes."""
from __future__ import annotations

from .builder import Builder, is_float
from .ops_shapes import feature_map
from .program import Dim, d_add, d_eval, d_floordiv, d_mul

_NORMS = ["", "", ", norm='ortho'", ", norm='forward'", ", norm='backward'"]


def _big(b: Builder, d: Dim) -> int:
    """The size of ``d`` at a large size of every symbol (to bound value ranges)."""
    return d_eval(d, {k: 20 for k in b.example})


def _norm_gain(norm: str, n: int) -> float:
    return 1.0 if "forward" in norm else n ** 0.5 if "ortho" in norm else float(n)


def g_fft(b: Builder) -> bool:
    """FFTs taken back to real numbers. Their results are marked strided: torch lays an FFT over a
    leading axis out with that axis innermost, so a reshape of it copies except at sizes where
    the layout happens to be contiguous (size 1), and an in-place update through it then
    reaches the FFT's result at those sizes only."""
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank >= 1 and b.numel_at_example(v.shape) <= 600)
    if v is None:
        return False
    v = b.tame(v, 4)
    a, spelled = b.rdim(v.rank)
    N = v.shape[a]
    norm = rng.choice(_NORMS)
    kind = rng.choice(["rfft_abs", "rfft_abs", "irfft_rfft", "irfft_plain", "fft_real", "fft_imag", "ifft_abs",
                       "rfft2_abs", "fft_n_abs", "ifft_imag", "ihfft_abs"])
    shape = list(v.shape)
    n_code, n_dim = "", N
    if kind in ("rfft_abs", "fft_n_abs", "fft_real") and rng.random() < 0.4:
        n_dim = rng.choice([4, 5, 6, 8])
        n_code = f", n={n_dim}"
    big = _big(b, n_dim)
    gain = _norm_gain(norm, big) * v.bound * 1.5
    # a two-sided transform of a real signal is Hermitian (|X[k]| = |X[n-k]|, Im X[0] = 0): exact
    # ties for a later argmax/sort that rounding breaks either way; a complex input has none
    cplx = f"torch.complex({v.name}, {v.name}.roll(1, {spelled}) * 0.5)"
    if kind == "rfft_abs":
        shape[a] = d_add(d_floordiv(n_dim, 2), 1)
        b.emit(f"torch.fft.rfft({v.name}{n_code}, dim={spelled}{norm}).abs()", shape, "float32", 0, gain, "fft", contiguous=False)
    elif kind == "fft_n_abs":
        shape[a] = n_dim
        b.emit(f"torch.fft.fft({cplx}{n_code}, dim={spelled}{norm}).abs()", shape, "float32", 0, gain, "fft", contiguous=False)
    elif kind in ("fft_real", "fft_imag"):
        shape[a] = n_dim
        part = "real" if kind == "fft_real" else "imag"
        b.emit(f"torch.fft.fft({cplx}{n_code}, dim={spelled}{norm}).{part}", shape, "float32", -gain, gain, "fft", contiguous=False)
    elif kind in ("ifft_abs", "ifft_imag", "ihfft_abs"):
        gain = v.bound * (big if "forward" in norm else big ** 0.5 if "ortho" in norm else 1.0)
        if kind == "ihfft_abs":
            shape[a] = d_add(d_floordiv(N, 2), 1)
        fn = "ihfft" if kind == "ihfft_abs" else "ifft"
        part = "imag" if kind == "ifft_imag" else "abs()"
        b.emit(f"torch.fft.{fn}({v.name if fn == 'ihfft' else cplx}, dim={spelled}{norm}).{part}", shape, "float32", -gain, gain, "fft", contiguous=False)
    elif kind == "irfft_rfft":
        # the round trip with n = the size read from the tensor gives x back
        n_read = b.dim_code(v, a)
        b.emit(f"torch.fft.irfft(torch.fft.rfft({v.name}, dim={spelled}{norm}), n={n_read}, dim={spelled}{norm})",
               shape, "float32", v.lo - 0.01, v.hi + 0.01, "fft", contiguous=False)
    elif kind == "irfft_plain":
        # without n the output has 2 * (N // 2) items (odd sizes lose their last one)
        if isinstance(N, int) and N < 2:
            return False
        shape[a] = d_mul(d_floordiv(N, 2), 2)
        if not isinstance(N, int):
            b.min_dims.append((N, 2))
        b.emit(f"torch.fft.irfft(torch.fft.rfft({v.name}, dim={spelled}), dim={spelled})", shape, "float32",
               -2 * v.bound, 2 * v.bound, "fft", contiguous=False)
    else:
        if v.rank < 2:
            return False
        shape[-1] = d_add(d_floordiv(shape[-1], 2), 1)
        gain = _norm_gain(norm, _big(b, v.shape[-1]) * _big(b, v.shape[-2])) * v.bound
        b.emit(f"torch.fft.rfft2({v.name}{norm}).abs()", shape, "float32", 0, gain, "fft", contiguous=False)
    return True


def g_stft(b: Builder) -> bool:
    """torch.stft(...).abs() of a 1-D or 2-D signal (the last axis is the time axis)."""
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank in (1, 2) and b.numel_at_example(v.shape) <= 300)
    if v is None:
        return False
    L = v.shape[-1]
    n_fft = rng.choice([4, 6, 8])
    hop = rng.choice([1, 2, n_fft // 2, n_fft // 4 or 1])
    center = rng.random() < 0.6
    pad_mode = rng.choice(["reflect", "reflect", "constant"]) if center else "reflect"
    need = n_fft // 2 + 1 if center else n_fft
    if isinstance(L, int) and L < need:
        return False
    v = b.tame(v, 4)
    win = rng.choice(["window", "window", "short", "none"])
    window = {"window": f", window=torch.hann_window({n_fft})",
              "short": f", win_length={n_fft // 2}, window=torch.hann_window({n_fft // 2})", "none": ""}[win]
    normalized = ", normalized=True" if rng.random() < 0.2 else ""
    frames = d_add(d_floordiv(L if center else d_add(L, -n_fft), hop), 1)
    shape = v.shape[:-1] + (n_fft // 2 + 1, frames)
    if not isinstance(L, int):
        b.min_dims.append((L, need))
    pad = f", pad_mode='{pad_mode}'" if center and pad_mode != "reflect" else ""
    expr = (f"torch.stft({v.name}, {n_fft}, hop_length={hop}{window}, center={center}{pad}{normalized}, "
            f"return_complex=True).abs()")
    hi = v.bound * n_fft
    if rng.random() < 0.3:
        expr = f"torch.log({expr} + 1.0)"
        hi = 5.0
    b.emit(expr, shape, "float32", 0, hi, "stft", contiguous=False)
    return True


def _ceil_pool_len(L: Dim, k: int, s: int, p: int) -> Dim:
    """torch's output size of a ceil_mode pool (the last window must start inside the input or left padding)."""
    if isinstance(L, int):
        out = -(-(L + 2 * p - k) // s) + 1
        return out - 1 if (out - 1) * s >= L + p else out
    first = f"(({L} + {2 * p - k + s - 1}) // {s} + 1)"
    return f"({first} - int(({first} - 1) * {s} >= {L} + {p}))"


def g_pool2(b: Builder) -> bool:
    """Adaptive pooling to a fixed size over dynamic sizes, and ceil_mode max/avg pooling."""
    rng = b.rng
    v = feature_map(b)
    if v is None:
        return False
    two = v.rank == 4
    sp = list(v.shape[2:])
    kind = rng.choice(["adaptive", "adaptive", "ceil_max", "ceil_avg"])
    if kind == "adaptive":
        op = rng.choice(["avg", "max"])
        fn = f"F.adaptive_{op}_pool{'2' if two else '1'}d"
        sizes = [rng.choice([2, 3, 4, 5, 7]) for _ in sp]
        out: list = list(sizes)
        if two and rng.random() < 0.3:
            keep = rng.randrange(2)
            out[keep] = sp[keep]
            arg = "(" + ", ".join("None" if i == keep else str(sizes[i]) for i in range(2)) + ")"
        else:
            arg = str(sizes[0]) if not two or sizes[0] == sizes[1] and rng.random() < 0.5 else f"({sizes[0]}, {sizes[1]})"
            if not two or arg == str(sizes[0]):
                out = [sizes[0]] * len(sp)
        b.emit(f"{fn}({v.name}, {arg})", (v.shape[0], v.shape[1], *out), "float32", v.lo, v.hi, "pool2")
        return True
    k = rng.choice([2, 3])
    s = rng.choice([2, 3, k])
    p = rng.choice([0, 1]) if k == 3 else rng.choice([0, 0, 1])
    for d in sp:
        if isinstance(d, int) and d + 2 * p < k:
            return False
        if not isinstance(d, int):
            b.min_dims.append((d, max(1, k - 2 * p)))
    out = [_ceil_pool_len(d, k, s, p) for d in sp]
    fn = f"F.{'max' if kind == 'ceil_max' else 'avg'}_pool{'2' if two else '1'}d"
    extra = ""
    if kind == "ceil_avg" and rng.random() < 0.5:
        extra = f", count_include_pad={rng.choice([True, False])}"
    lo = v.lo if kind == "ceil_max" else min(v.lo, 0)
    hi = v.hi if kind == "ceil_max" else max(v.hi, 0)
    b.emit(f"{fn}({v.name}, {k}, stride={s}, padding={p}, ceil_mode=True{extra})", (v.shape[0], v.shape[1], *out),
           "float32", lo, hi, "pool2")
    return True


def g_resize(b: Builder) -> bool:
    """F.interpolate: nearest to another tensor's size or by a scale factor, (bi)linear with either
    align_corners, bicubic; to fixed sizes too."""
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank in (3, 4) and isinstance(v.shape[1], int) and v.shape[1] <= 8
               and b.numel_at_example(v.shape) <= 400)
    if v is None:
        return False
    v = b.tame(v)
    two = v.rank == 4
    sp = list(v.shape[2:])
    modes = ["nearest", "nearest", "linear_ac", "linear", "nearest-exact", "area"] + (["bicubic", "bicubic_ac"] if two else [])
    mode = rng.choice(modes)
    torch_mode = {"nearest": "nearest", "linear": "bilinear" if two else "linear", "nearest-exact": "nearest-exact",
                  "area": "area", "linear_ac": "bilinear" if two else "linear", "bicubic": "bicubic",
                  "bicubic_ac": "bicubic"}[mode]
    extra = f", mode='{torch_mode}'" if torch_mode != "nearest" or rng.random() < 0.5 else ""
    if torch_mode not in ("nearest", "nearest-exact", "area"):
        extra += f", align_corners={mode.endswith('_ac')}"
    how = rng.choice(["size_from", "size_from", "scale", "fixed"])
    if how == "size_from":
        srcs = [u for u in b.vals if u.dyn_axes() and u.group != "masked"]
        if not srcs:
            return False
        src = rng.choice(srcs)
        if two and src.rank == 4 and rng.random() < 0.6:
            size_code, out = f"{src.name}.shape[-2:]", list(src.shape[-2:])
        else:
            picks = [(rng.choice(src.dyn_axes()), src) for _ in sp]
            out = [u.shape[j] for j, u in picks]
            parts = [f"{u.name}.shape[{j}]" for j, u in picks]
            if two and rng.random() < 0.4:
                keep = rng.randrange(2)
                out[keep] = rng.choice([4, 6])
                parts[keep] = str(out[keep])
            size_code = parts[0] if not two else f"({parts[0]}, {parts[1]})"
        if any(_big(b, d) > 60 for d in out):
            return False
        arg = f"size={size_code}"
    elif how == "fixed":
        out = [rng.choice([3, 5, 8]) for _ in sp]
        arg = f"size={out[0]}" if not two else f"size=({out[0]}, {out[1]})"
    else:
        scale = rng.choice([2, 3, 0.5, 1.5, 2.5]) if torch_mode.startswith("nearest") else rng.choice([2, 0.5, 1.5])
        for d in sp:
            if isinstance(d, int) and int(d * scale) < 1:
                return False
            if not isinstance(d, int) and scale < 1:
                b.min_dims.append((d, int(1 / scale) + 1))
        out = [int(d * scale) if isinstance(d, int) else (d_mul(d, scale) if isinstance(scale, int) else f"int({d} * {scale})")
               for d in sp]
        arg = f"scale_factor={scale}"
        if not isinstance(scale, int) and rng.random() < 0.3:
            arg += ", recompute_scale_factor=True"
    hi = v.bound * (1.5 if torch_mode == "bicubic" else 1.0)
    lo = -hi if torch_mode == "bicubic" else v.lo
    if torch_mode != "bicubic":
        hi = v.hi
    b.emit(f"F.interpolate({v.name}, {arg}{extra})", (v.shape[0], v.shape[1], *out), "float32", lo, hi, "resize")
    return True

