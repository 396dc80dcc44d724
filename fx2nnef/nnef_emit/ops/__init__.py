"""Converters, one module per family of ops. Importing this package registers them all: every
module of this folder is imported, so a new family file needs no list entry."""
from importlib import import_module
from pkgutil import iter_modules

for _module in sorted(m.name for m in iter_modules(__path__)):
    import_module(f"{__name__}.{_module}")
