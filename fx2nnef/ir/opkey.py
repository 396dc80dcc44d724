"""Stable, torch-free names for source ops: the keys of the IR and of the op registry.

``torch.add`` -> ``"torch.add"``, ``torch.nn.functional.relu`` -> ``"F.relu"``,
``operator.add`` -> ``"operator.add"``, the method ``x.add(y)`` -> ``"Tensor.add"``,
``nn.LSTM`` -> ``"nn.LSTM"``. Distinct callables never share a key, so ``torch.add`` and
``operator.add`` cannot collide.
"""
from __future__ import annotations

_MODULE_PREFIXES = {
    "torch": "torch",
    "torch.functional": "torch",
    "torch.nn.functional": "F",
    "torch._C._nn": "F",
    "_operator": "operator",
    "operator": "operator",
    "builtins": "builtins",
    "math": "math",
    "torch._C._special": "torch.special",
    "torch.special": "torch.special",
    "torch._C._linalg": "torch.linalg",
    "torch.linalg": "torch.linalg",
    "torch._C._fft": "torch.fft",
}
_NAME_STRIPS = {"torch.special": "special_", "torch.linalg": "linalg_", "torch.fft": "fft_"}


def method_key(name: str) -> str:
    """Key of a Tensor method called by name (``x.view(...)``)."""
    return f"Tensor.{name}"


def op_key(obj) -> str:
    """Key of a callable (function, builtin, Tensor method descriptor) or a module class."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, type):
        mod = obj.__module__ or ""
        if mod.startswith("torch.nn.modules") or mod.startswith("torch.nn."):
            return f"nn.{obj.__qualname__}"
        return f"module:{mod}.{obj.__qualname__}"
    packet = getattr(obj, "_qualified_op_name", None)  # a torch operator (torch.ops.ns.name)
    if isinstance(packet, str) and "::" in packet:
        return "torch.ops." + packet.replace("::", ".")
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
    if qualname.startswith(("TensorBase.", "Tensor.")):
        return method_key(qualname.split(".", 1)[1])
    mod = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__name__", qualname)
    prefix = _MODULE_PREFIXES.get(mod)
    if prefix is None:
        return f"{mod}.{qualname}"
    strip = _NAME_STRIPS.get(prefix)
    if strip and name.startswith(strip):
        name = name[len(strip):]
    return f"{prefix}.{name}"
