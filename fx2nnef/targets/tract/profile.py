"""tract's profile: the capabilities the lowering asks of tract (see ``fx2nnef.nnef_emit.profile``).

Most are workarounds of tract 0.23.9, each explained where the converter uses it."""
from ...nnef_emit.profile import TargetProfile, declare_target

TRACT = declare_target(TargetProfile(
    "tract",
    exact_sigmoid=True,
    rounded_quotients=True,
    uniform_folding=True,
    integer_gt_as_lt=True,
    sizes_as_range_shapes=True,
    guarded_reductions=True,
    strides_without_downsample=True,
    opaque_tiles_in_products=True,
    loop_products_summed=True,
    opaque_size_conditions=True,
    data_sized_counts=True,
    opaque_sizes_in_products=True,
    weight_block_bytes=64 << 20,
))
"""tract: its own ops (``tract_core_*``, ``tract_transformers_*``), loops, symbolic sizes."""
