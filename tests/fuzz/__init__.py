"""Differential fuzzing of fx2nnef: random small programs, exported and run in tract, compared with eager.

``generator.generate(seed)`` builds one random program (readable Python source: a
``Program`` module, a ``make_inputs(S, ...)`` function and the sizes to try);
``runner.run_program(program, folder)`` exports it with a dynamic axis, runs the asset in
tract at every size in one child process and classifies the outcome (OK, REFUSED,
MISMATCH, CRASH); ``runner.minimise`` drops statements while the outcome stays the same.
"""
