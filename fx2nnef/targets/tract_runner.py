"""Former path of :mod:`fx2nnef.targets.tract.runner`, kept for the imports that name it."""
from .tract.runner import (CHILD_SCRIPT, TractModelInfo, run_tract, run_tract_many,  # noqa: F401
                           tract_load_check)
