"""Piece by piece: per-submodule diagnosis, custom-op encapsulation, fallback export.

``diagnose(model, inputs=[(args, kwargs), ...])`` returns a :class:`Report` with one row per
submodule; ``export_with_fallback`` (``fx2nnef.export(..., fallback="piece_by_piece")``)
writes one asset where failing pieces with a working replacement are custom ops.
"""
from .diagnose import diagnose
from .fallback import PieceByPieceError, export_with_fallback
from .report import Report, Row, Status
from .strategies import Strategy

__all__ = ["PieceByPieceError", "Report", "Row", "Status", "Strategy", "diagnose", "export_with_fallback"]
