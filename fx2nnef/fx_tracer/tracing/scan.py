"""The fx target of a rolled loop (:class:`ScanCall`): one node that runs a loop body over the
scanned inputs, recorded by :mod:`.control_flow` (``scan``, ``while_loop``) and :mod:`.loops`
(Python loops rolled into a scan), read by the replay, the probes and the IR builder."""
from __future__ import annotations

import torch
import torch.fx as fx

from ...errors import TraceError, spell


class ScanCall:
    """The fx target of a loop: ``(init, xs, full, carry_slots, scan_slots, body_outs)`` -> carries + stacked ys.

    ``body`` computes one step from ``(*carries, *slices, *full)``; the slots and body
    results are only references for the IR builder. ``kind`` is "scan" or "while".
    """

    __name__ = "scan"
    __qualname__ = "ScanCall"
    __module__ = "fx2nnef"

    def __init__(self, body: fx.GraphModule, kind: str, label: str, dim: int, reverse: bool, n_carry: int,
                 check: bool = False):
        self.body, self.kind, self.label = body, kind, label
        self.dim, self.reverse, self.n_carry, self.check = dim, reverse, n_carry, check

    def __repr__(self):
        return f"ScanCall({self.kind} at {self.label})"

    def __call__(self, init, xs, full, carry_slots=(), scan_slots=(), body_outs=()):
        if not init and not self.check and xs:
            mapped = self._mapped(xs, full)
            if mapped is not None:
                return mapped
        carry = [c.clone() for c in init]
        steps = xs[0].shape[self.dim]
        if steps == 0 and self._stacks():
            # no step to stack: tract 0.23.9 gives a scan of no step outputs of other shapes
            # (a last carry of shape [], fuzz 87000), so these sizes stay out of the range
            raise IndexError(f"the loop at {self.label} runs no step and stacks its steps' outputs")
        order = range(steps - 1, -1, -1) if self.reverse else range(steps)
        ys: list = [None] * steps
        for i in order:
            outs = list(self.body(*carry, *[x.select(self.dim, i) for x in xs], *full))
            if self.check:
                outs = outs[:-1]
            carry, ys[i] = outs[: self.n_carry], outs[self.n_carry:]
        if self.check:
            still = self.body(*carry, *[torch.zeros((), dtype=torch.bool) for _ in xs], *full)[-1]
            if bool(still):
                raise TraceError(
                    f"the while_loop at {self.label} needs more than {steps} iterations on these inputs; "
                    f"raise {spell('max_loop_iterations')}")
        if not ys or ys[0] is None:
            return tuple(carry)
        stacked = [torch.stack([y[j] for y in ys], self.dim) for j in range(len(ys[0]))]
        return tuple(carry) + tuple(stacked)


    def _stacks(self) -> bool:
        """Whether the body gives outputs stacked over the steps (besides its carries)."""
        out = next(n for n in reversed(self.body.graph.nodes) if n.op == "output")
        results = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
        return len(results) - self.check > self.n_carry

    def _mapped(self, xs, full):
        """A loop with no carry (a vmap recorded as a loop) run as torch.vmap of its body: the
        steps are independent, and nested loops then cost one call, not one per item (a mask
        function over batch, queries and keys at trace time, the graph's runs in the probes).
        None when the body cannot be vmapped (a read of data, random draws): run step by step."""
        if any(x.shape[self.dim] == 0 for x in xs):
            return None
        dim = self.dim

        def step(*slices):
            return tuple(self.body(*slices, *full))
        try:
            # functorch's own vmap: torch.vmap is routed to the recorder while tracing
            from torch._functorch.vmap import vmap_impl

            with torch.no_grad():
                outs = vmap_impl(step, (dim,) * len(xs), dim, "error", None, *xs)
        except Exception:  # noqa: BLE001 - the loop gives the values
            return None
        return tuple(outs)
