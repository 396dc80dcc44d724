"""The IR's own element types, independent of torch and numpy."""
from __future__ import annotations

import enum


class DType(enum.Enum):
    """Element type of an IR value."""

    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    BOOL = "bool"

    @property
    def is_float(self) -> bool:
        return self in (DType.F16, DType.BF16, DType.F32, DType.F64)

    @property
    def is_int(self) -> bool:
        return self in (DType.I8, DType.I16, DType.I32, DType.I64, DType.U8)

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def numpy_name(self) -> str:
        """The numpy dtype holding this type's values; bf16 values are held (and written) as
        float32, exactly, since numpy has no bfloat16."""
        if self is DType.BF16:
            return "float32"
        return "bool" if self is DType.BOOL else _NUMPY_NAMES[self]

    @classmethod
    def from_numpy(cls, dtype) -> "DType":
        name = str(dtype)
        for member, np_name in _NUMPY_NAMES.items():
            if np_name == name:
                return member
        if name == "bool":
            return cls.BOOL
        raise ValueError(f"no IR dtype for numpy dtype {name!r}")


_NUMPY_NAMES = {
    DType.F16: "float16", DType.F32: "float32", DType.F64: "float64",
    DType.I8: "int8", DType.I16: "int16", DType.I32: "int32", DType.I64: "int64", DType.U8: "uint8",
}
