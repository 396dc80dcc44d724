"""Shapes: the symbolic replay of a traced graph (fake tensors over size symbols), the probes that
run the graph and the model at other sizes, and the ranges of the dynamic sizes they find.

``fake_replay`` (with ``shortcuts`` and ``tables``) replays the graph on symbolic sizes;
``probe`` analyses it (:func:`.probe.analyze`, :class:`.probe.Prober`) from its parts, lowest
first: ``probe_sizes`` (the sizes probed, inputs at them), ``graph_runs`` (runs of the graph),
``decisions`` (the trace's guards at other sizes), ``flips`` (where they flip: the probe plan),
``other_values`` (other input values at a size), ``ranges`` (each symbol's range) and
``fitting`` (shapes as forms of the symbols); ``overlap`` runs work in a worker thread.

Above ``tracing`` and ``passes``, below ``to_ir`` (see :mod:`..tracing` for the order).
"""
