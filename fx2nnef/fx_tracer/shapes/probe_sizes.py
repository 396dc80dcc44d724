"""The sizes an analysis probes and the inputs at them: the traced graph and its example
(:class:`Traced`), the example's sizes, inputs resized to other sizes, the fixed probe sizes of
the fitted probes, and the keys and texts of sizes."""
from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx



def resize(t: torch.Tensor, axis: int, n: int, edge: bool = False) -> torch.Tensor:
    """``t`` with axis ``axis`` of length ``n``, reusing its own data where it can: repeated
    whole, or with ``edge`` its last item repeated (ids holding a fixed number of image tokens
    keep that number)."""
    cur = t.shape[axis]
    if edge and cur > 0 and n > cur:
        last = t.narrow(axis, cur - 1, 1)
        return torch.cat([t, last.expand(*[n - cur if a == axis else -1 for a in range(t.dim())])], dim=axis).clone()
    if n == cur:
        return t
    if cur == 0:
        shape = list(t.shape)
        shape[axis] = n
        if t.dtype.is_floating_point:
            return torch.randn(shape, generator=torch.Generator().manual_seed(n)).to(t.dtype)
        return torch.zeros(shape, dtype=t.dtype)
    if n < cur:
        return t.narrow(axis, 0, n).clone()
    reps = -(-n // cur)
    return torch.cat([t] * reps, dim=axis).narrow(axis, 0, n).clone()


def example_sizes(example: list, names: list, dynamic_axes: dict) -> dict:
    """symbol -> its size in the example inputs."""
    return {sym: t.shape[axis] for name, t in zip(names, example) for axis, sym in dynamic_axes.get(name, {}).items()}


def inputs_at(example: list, names: list, dynamic_axes: dict, env: dict, edge: bool = False) -> list:
    """The example inputs at the sizes ``env``. A vector of integers (or one integer) whose largest
    item is a dynamic size at the example holds the new size there, and no item past it: a vector of
    lengths whose longest is the sequence's ``T`` (a padding mask sized by ``lengths.max()``, which
    the model reads against ``T``) stays so at other ``T``."""
    base = example_sizes(example, names, dynamic_axes)
    moved = {v: env[s] for s, v in base.items() if env.get(s, v) != v}
    if len(moved) != len({v for s, v in base.items() if env.get(s, v) != v}) or \
            any(base[s] in moved and env.get(s, base[s]) == base[s] for s in base):
        moved = {}  # two sizes of one value that do not move together: no telling which it is
    out = []
    for name, t in zip(names, example):
        for axis, sym in dynamic_axes.get(name, {}).items():
            t = resize(t, axis, env[sym], edge)
        out.append(_lengths_moved(t, moved))
    return out


def _lengths_moved(t: torch.Tensor, moved: dict) -> torch.Tensor:
    if not moved or t.dim() > 1 or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        return t
    out = t.clone()
    for old, new in moved.items():
        held = t == old
        if t.numel() and int(t.max()) == old:  # lengths of that axis: the longest is the new size, none past it
            out[held] = new
            out[(t > new) & (t < old)] = new
    return out


def probe_envs(base: dict) -> list:
    """Sizes near the example, above it: every one must reproduce the model."""
    envs = []
    for s in base:
        for k in (1, 2, 3, 5, 8):  # enough points to tell polynomials and floor divisions apart
            envs.append({**base, s: base[s] + k})
    if len(base) > 1:
        envs.append({s: v + 1 for s, v in base.items()})
        envs.append({s: v + 2 for s, v in base.items()})
    return envs


def below_probe_envs(base: dict) -> list:
    """Sizes below the example (one less, two less, half, 1): a decision such as
    ``S > 2`` taken at S=7 flips only there."""
    envs = []
    for s, v in base.items():
        for n in sorted({v - 1, v - 2, v // 2, 1}, reverse=True):
            if 1 <= n < v:
                envs.append({**base, s: n})
    if len(base) > 1 and all(v > 1 for v in base.values()):
        envs.append({s: v - 1 for s, v in base.items()})
    return envs


def far_probe_envs(base: dict) -> list:
    """Sizes far from the example (x2, x3): they reveal sizes that change only every N steps
    (strided convs: floor((T - c) / 320))."""
    envs = []
    for s, v in base.items():
        for factor in (2, 3):
            far = max(v * factor, 16 * (factor - 1))
            if far > v + 8:
                envs.append({**base, s: far})
    return envs


def _env_text(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())


def _moved(env: dict, base: dict) -> list:
    return [k for k in env if env[k] != base[k]]


def _meta_inputs(example: list, names: list, dynamic_axes: dict, env: dict) -> list:
    out = []
    for name, t in zip(names, example):
        shape = list(t.shape)
        for axis, sym in dynamic_axes.get(name, {}).items():
            shape[axis] = env[sym]
        out.append(torch.empty(shape, dtype=t.dtype, device="meta"))
    return out


def _env_key(env: dict) -> tuple:
    return tuple(sorted(env.items()))


@dataclasses.dataclass
class Traced:
    """The traced graph, the example inputs it was traced on (by input name, with their dynamic
    axes) and the decisions the trace took: what every run of an analysis starts from."""
    gm: fx.GraphModule
    example: list
    names: list
    dynamic_axes: dict
    guards: list

    def inputs_at(self, env: dict) -> list:
        return inputs_at(self.example, self.names, self.dynamic_axes, env)
