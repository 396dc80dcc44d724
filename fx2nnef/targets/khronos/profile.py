"""Standard NNEF's profile, as the Khronos parser and nnef_tools read it (see ``fx2nnef.nnef_emit.profile``)."""
from ...nnef_emit.profile import TargetProfile, declare_target

KHRONOS = declare_target(TargetProfile(
    "khronos",
    fragment_extensions=("KHR_enable_fragment_definitions", "KHR_enable_operator_expressions"),
    unroll_while=True,
))
"""Standard NNEF: no loop op, fragments declared with the Khronos extensions."""
