"""Tracing: the CustomTracer and CustomProxy, the guards they record, and the scoped patches that
let a model's Python run on traced values (control flow, loops, packed sequences, casts of sizes).

The bottom layer of ``fx_tracer``: it imports no other part of it. The layers, bottom first, are
``tracing`` < ``passes`` < ``shapes`` < ``to_ir`` < the modules of ``fx_tracer`` itself
(``capture``, ``branches``, ``random_draws``, ``stored_values``); a layer imports only from layers
below it, and the modules of one folder import each other without a cycle (tests/test_layers.py).
"""
