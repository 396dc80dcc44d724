"""The traced graph, with its shapes analysed, as the plain IR (:mod:`fx2nnef.ir`), and the IR's
constant data read from torch tensors.

Above ``shapes``; only the modules of ``fx_tracer`` itself (``capture``) import it (see
:mod:`..tracing` for the order).
"""
