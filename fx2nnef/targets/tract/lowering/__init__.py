"""tract's converter overrides, one module per family of ops (the common rules are in
``fx2nnef.nnef_emit.ops``). Importing this package registers them all."""
from importlib import import_module
from pkgutil import iter_modules

for _module in sorted(m.name for m in iter_modules(__path__)):
    import_module(f"{__name__}.{_module}")
