"""Seeded generator of random small PyTorch programs with one or two dynamic axes.

``generate(seed)`` returns a :class:`~fuzz.program.Program` whose source is a reproducer.
The builder keeps, for every live value, its shape (ints and size expressions), dtype, a
range of values and the storage it aliases, and only emits statements valid at every size
>= the smallest one tried. Values are kept in sane ranges (denominators away from 0,
exp/pow/prod on bounded values) so that eager PyTorch is a meaningful reference. The
program is run eagerly at all sizes before it is returned; a program that fails there,
or gives non-finite or huge numbers, is replaced by another draw of the same seed.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from .builder import Builder
from .ops_control import g_branch, g_loop, g_size_scalar
from .ops_shapes import (g_cat_stack, g_conv_pool, g_expand_repeat, g_flip_roll, g_getitem, g_inplace_view, g_linear,
                         g_permute, g_reshape, g_setitem, g_softmax_norm, g_split, g_unsqueeze)
from .ops_shapes import g_diag, g_scatter2, g_window
from .ops_signal import g_fft, g_pool2, g_resize, g_stft
from .ops_values import (g_arith, g_bitwise, g_compare, g_div, g_logical, g_pow, g_reduce, g_reduce2, g_special,
                         g_unary, g_where_clamp)
from .ops_small import (EMPTY_GENERATORS, SMALL_BOOST, g_empty_axis, g_floordiv_inf, g_loop_small,
                        g_narrow_mul, g_size_branch, g_squeeze_dyn)
from .ops_writes import g_advwrite, g_empty_write
from .program import Program, d_eval
GENERATORS = [
    (g_arith, 8), (g_div, 4), (g_pow, 2), (g_compare, 3), (g_logical, 2), (g_bitwise, 2), (g_where_clamp, 4),
    (g_unary, 6), (g_reduce, 6), (g_reshape, 4), (g_permute, 3), (g_unsqueeze, 2), (g_expand_repeat, 2),
    (g_cat_stack, 3), (g_split, 2), (g_flip_roll, 3), (g_getitem, 6), (g_setitem, 4), (g_inplace_view, 5),
    (g_linear, 4), (g_conv_pool, 2), (g_softmax_norm, 3), (g_branch, 4), (g_loop, 2), (g_size_scalar, 3),
    # ops added later: FFT/STFT, pooling and resizing over dynamic sizes, special functions, scans,
    # diagonals, scatters, windows and sizes computed from sizes
    (g_fft, 2), (g_stft, 1), (g_pool2, 1), (g_resize, 1), (g_special, 3), (g_reduce2, 2), (g_diag, 2),
    (g_scatter2, 2), (g_window, 3),
    # issue 39: item assignments with advanced indices on tensors of every origin, empty writes,
    # branches and loops on sizes, squeezes of a size-1 example, floor division by infinities
    (g_advwrite, 7), (g_empty_write, 1), (g_size_branch, 2), (g_loop_small, 2), (g_squeeze_dyn, 1),
    (g_floordiv_inf, 0.5), (g_narrow_mul, 1), (g_empty_axis, 0),
]
_CONV_BOOST = {g_conv_pool: 12, g_softmax_norm: 4, g_pool2: 8, g_resize: 8, g_fft: 3}
# generator name -> weight factor, for campaigns on some families (``python -m fuzz run --focus``)
FOCUS: dict = {}


def build(seed: int) -> Builder:
    """One random draw of statements for ``seed`` (not validated)."""
    b = Builder(seed)
    b.min_dims = []
    b.masked = []
    b.mutated = set()
    b.want_outputs = []
    b.make_inputs()
    rng = b.rng
    target = rng.randint(2, 7)
    weights = [(_CONV_BOOST.get(g, w) if b.theme.startswith("conv") else w) * FOCUS.get(g.__name__, 1)
               for g, w in GENERATORS]
    if b.small:
        weights = [w * SMALL_BOOST.get(g.__name__, 1) for (g, _), w in zip(GENERATORS, weights)]
        b.families.add("small_example")
    if b.empty:
        weights = [w * EMPTY_GENERATORS.get(g.__name__, 0) for (g, _), w in zip(GENERATORS, weights)]
        b.families.add("empty_example")
    for _ in range(40):
        if len(b.stmts) >= target:
            break
        gen = rng.choices([g for g, _ in GENERATORS], weights)[0]
        gen(b)
    return b


def _outputs(b: Builder) -> list:
    rng = b.rng
    computed = [v for v in b.vals if v.name not in {i.name for i in b.inputs}]
    if not computed:
        return [b.vals[0].name]
    outs = [computed[-1].name]
    for name in b.want_outputs:
        if rng.random() < 0.7 and name not in outs:
            outs.append(name)
    for v in b.vals:
        if v.group in b.mutated and v.name not in outs and rng.random() < 0.4:
            outs.append(v.name)
    if rng.random() < 0.3:
        extra = rng.choice(computed).name
        if extra not in outs:
            outs.append(extra)
    return outs[:4]


def _envs(b: Builder, vals: list) -> list:
    """Sizes to try: the smallest valid, some below and above the example, and a large one."""
    syms = list(b.example)

    def valid(env):
        try:
            return all(d_eval(d, env) >= 1 for v in vals for d in v.shape if v.group != "masked") and \
                all(d_eval(d, env) >= k for d, k in b.min_dims)
        except Exception:
            return False

    mins = {}
    for s in syms:
        for n in range(1, 40):
            env = dict(b.example)
            env[s] = n
            if valid(env):
                mins[s] = n
                break
        else:
            return []
    out = [dict(b.example)]
    for s in syms:
        ex, lo = b.example[s], mins[s]
        # a small example is weak evidence: just above it, and a few larger sizes
        near = {lo, lo + 1, ex - 1, ex + 1, ex + 3, 2 * ex + 1} if ex >= 3 else {lo, ex + 1, ex + 2, ex + 3, 5, 8}
        for n in sorted(near):
            if n >= lo and n != ex:
                env = dict(b.example)
                env[s] = n
                out.append(env)
    if len(syms) > 1:
        out.append({s: mins[s] for s in syms})
        out.append({s: 2 * b.example[s] + 1 for s in syms})
    seen, uniq = set(), []
    for k, env in enumerate(out):
        key = tuple(sorted(env.items()))
        if key not in seen and (valid(env) or k == 0 and b.empty):
            seen.add(key)
            uniq.append(env)
    return uniq


def draft(seed: int) -> Optional[Program]:
    """The program of one draw, or None when the draw is unusable (no sizes, too big)."""
    b = build(seed)
    outs = _outputs(b)
    envs = _envs(b, b.vals)
    if len(envs) < 2 or envs[0] != b.example:
        return None
    for v in b.vals:
        if v.group != "masked" and b.numel_at_example(v.shape) > 4000:
            return None
    return Program(seed, b.init_lines, b.stmts, outs, b.inputs, dict(b.example), envs, b.dynamic_axes,
                   sorted(b.families), list(b.globals_lines))


def load(program: Program, path=None) -> dict:
    """Exec the program's source (from ``path`` when given, so that tracebacks show its lines)."""
    source = program.source()
    filename = "<fuzz>"
    if path is not None:
        path.write_text(source)
        filename = str(path)
    namespace: dict = {"__name__": f"fuzz_program_{program.seed}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace


def env_seed(env: dict) -> int:
    """The input seed used at the sizes ``env`` (the same in every run of a program)."""
    return sum(size * 31 ** k for k, (_, size) in enumerate(sorted(env.items())))


def eager_outputs(namespace: dict, env: dict, seed: int) -> tuple:
    """Inputs at ``env`` and the eager outputs on copies of them."""
    import torch

    inputs = namespace["make_inputs"](**env, seed=seed)
    model = namespace["Program"]()
    model.eval()
    with torch.no_grad():
        out = model(*[t.clone() for t in inputs])
    return inputs, [o for o in out]


def sane(program: Program) -> Optional[Program]:
    """The program with only the sizes where eager runs and gives moderate finite numbers."""
    import torch

    ns = load(program)
    good = []
    for k, env in enumerate(program.envs):
        try:
            _, outs = eager_outputs(ns, env, env_seed(env))
        except Exception:
            if k == 0:
                return None
            continue
        empty = 0 in env.values()
        ok = all(isinstance(o, torch.Tensor) and (o.numel() > 0 or empty) and
                 (o.numel() == 0 or
                  (not o.is_floating_point() or (torch.isfinite(o).all() and o.abs().max() < 1e5))
                  and (o.is_floating_point() or o.dtype == torch.bool or o.abs().max() < 2 ** 31))
                 for o in outs)
        if not ok and k == 0:
            return None
        if ok:
            good.append(env)
    if len(good) < 2:
        return None
    return dataclasses.replace(program, envs=good)


def generate(seed: int) -> Program:
    """A valid random program for ``seed`` (deterministic)."""
    for attempt in range(50):
        program = draft(seed * 1000 + attempt)
        if program is None:
            continue
        try:
            checked = sane(program)
        except Exception:
            checked = None
        if checked is not None:
            return dataclasses.replace(checked, seed=seed * 1000 + attempt)
    raise RuntimeError(f"no valid program for seed {seed} after 50 draws")
