"""Converters, one module per family of ops. Importing this package registers them all."""
from importlib import import_module

_FAMILIES = [
    "internal", "elementwise", "linalg", "shape", "indexing", "reduce", "norm", "conv", "pool",
    "activation", "division", "creation", "attention", "rnn", "misc", "attrs", "series", "control_flow", "grouped", "scatter",
]

for _name in _FAMILIES:
    try:
        import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as exc:  # a family not written yet
        if exc.name != f"{__name__}.{_name}":
            raise
