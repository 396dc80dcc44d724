"""Shapes: the symbolic replay of a traced graph (fake tensors over size symbols), the probes that
run the graph and the model at other sizes, and the ranges of the dynamic sizes they find.

Above ``tracing`` and ``passes``, below ``to_ir`` (see :mod:`..tracing` for the order).
"""
