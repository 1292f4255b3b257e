"""Element types: torch's names, the wire enum, and numpy.

numpy has float16 but no bfloat16 or fp8. Those are read either widened to
float32 (exact: every bfloat16 and fp8 value is a float32 value) or raw, as
the stored bits (uint16 for bfloat16, uint8 for fp8). Writing a float array
into them rounds to nearest even, overflowing to inf (bfloat16, fp8_e5m2) or
NaN (fp8_e4m3, which has no inf): the same rules as the workers' fills.
"""

import numpy as np

from ccl._errors import invalid
from ccl.v1 import common_pb2


class _Format:
    """A small binary float: `exp_bits` exponent bits, `man_bits` mantissa
    bits; `ieee` keeps the top exponent for inf/NaN, otherwise (e4m3fn) only
    the all-ones pattern is NaN and there is no inf."""

    def __init__(self, exp_bits, man_bits, ieee):
        self.exp_bits, self.man_bits, self.ieee = exp_bits, man_bits, ieee
        self.bias = (1 << (exp_bits - 1)) - 1
        self.exp_ones = (1 << exp_bits) - 1
        if ieee:
            max_exp = self.exp_ones - 1 - self.bias
            max_man = 2.0 - 2.0 ** -man_bits
            self.nan = (self.exp_ones << man_bits) | (1 << (man_bits - 1))
        else:
            max_exp = self.exp_ones - self.bias
            max_man = 2.0 - 2.0 ** (1 - man_bits)
            self.nan = (self.exp_ones << man_bits) | ((1 << man_bits) - 1)
        self.max_finite = max_man * 2.0 ** max_exp
        self.sign_bit = 1 << (exp_bits + man_bits)

    def decode(self, bits):
        bits = np.asarray(bits).astype(np.int64)
        negative = (bits >> (self.exp_bits + self.man_bits)) & 1
        exp_field = (bits >> self.man_bits) & self.exp_ones
        mantissa = bits & ((1 << self.man_bits) - 1)
        sub = np.ldexp(mantissa.astype(np.float64),
                       1 - self.bias - self.man_bits)
        normal = np.ldexp(1.0 + np.ldexp(mantissa.astype(np.float64),
                                         -self.man_bits),
                          (exp_field - self.bias).astype(np.int32))
        out = np.where(exp_field == 0, sub, normal)
        if self.ieee:
            top = exp_field == self.exp_ones
            out = np.where(top & (mantissa != 0), np.nan, out)
            out = np.where(top & (mantissa == 0), np.inf, out)
        else:
            out = np.where((exp_field == self.exp_ones) &
                           (mantissa == (1 << self.man_bits) - 1), np.nan, out)
        return np.where(negative == 1, -out, out)

    def encode(self, values):
        v = np.asarray(values, dtype=np.float64)
        sign = np.where(np.signbit(v), self.sign_bit, 0).astype(np.int64)
        mag = np.abs(v)
        finite = np.isfinite(mag) & (mag > 0)
        safe = np.where(finite, mag, 1.0)
        min_normal_exp = 1 - self.bias
        exponent = np.maximum(np.frexp(safe)[1] - 1, min_normal_exp)
        quantum = np.ldexp(1.0, (exponent - self.man_bits).astype(np.int32))
        rounded = np.rint(safe / quantum) * quantum
        r_exp = np.frexp(np.where(rounded > 0, rounded, 1.0))[1] - 1
        subnormal = r_exp < min_normal_exp
        sub_bits = np.ldexp(np.where(subnormal, rounded, 0.0),
                            self.man_bits - min_normal_exp)
        frac = np.ldexp(np.where(rounded > 0, rounded, 1.0),
                        (-r_exp).astype(np.int32)) - 1.0
        normal_bits = (((r_exp + self.bias).astype(np.int64) << self.man_bits)
                       | np.ldexp(frac, self.man_bits).astype(np.int64))
        bits = np.where(subnormal, sub_bits.astype(np.int64), normal_bits)
        bits = np.where(rounded == 0, 0, bits)
        overflow = (self.exp_ones << self.man_bits) if self.ieee else self.nan
        bits = np.where(np.isinf(mag) | (finite & (rounded > self.max_finite)),
                        overflow, bits)
        bits = np.where(mag == 0, 0, bits)
        return np.where(np.isnan(v), self.nan, bits | sign)


class DType:
    def __init__(self, name, proto, storage, fmt=None):
        self.name = name
        self.proto = proto
        # What the bytes are in numpy: the type itself, or the raw bits.
        self.storage = np.dtype(storage)
        self.itemsize = self.storage.itemsize
        self.format = fmt

    @property
    def exact_numpy(self):
        """True when numpy has this very type (not bfloat16 or fp8)."""
        return self.format is None

    def __repr__(self):
        return f"ccl.{self.name}"


_BF16 = _Format(8, 7, True)
_E4M3 = _Format(4, 3, False)
_E5M2 = _Format(5, 2, True)

DTYPES = {
    d.name: d
    for d in [
        DType("float32", common_pb2.DTYPE_FLOAT32, np.float32),
        DType("float64", common_pb2.DTYPE_FLOAT64, np.float64),
        DType("float16", common_pb2.DTYPE_FLOAT16, np.float16),
        DType("bfloat16", common_pb2.DTYPE_BFLOAT16, np.uint16, _BF16),
        DType("int8", common_pb2.DTYPE_INT8, np.int8),
        DType("uint8", common_pb2.DTYPE_UINT8, np.uint8),
        DType("int32", common_pb2.DTYPE_INT32, np.int32),
        DType("int64", common_pb2.DTYPE_INT64, np.int64),
        DType("fp8_e4m3", common_pb2.DTYPE_FP8_E4M3, np.uint8, _E4M3),
        DType("fp8_e5m2", common_pb2.DTYPE_FP8_E5M2, np.uint8, _E5M2),
    ]
}
_ALIASES = {
    "float": "float32", "double": "float64", "half": "float16",
    "bf16": "bfloat16", "long": "int64", "int": "int32",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
}
_BY_PROTO = {d.proto: d for d in DTYPES.values()}


def resolve(dtype):
    """A DType from a name ("float32", "bfloat16", torch's "torch.float32"),
    a DType, or a numpy dtype/type."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        name = dtype.removeprefix("torch.").lower()
        name = _ALIASES.get(name, name)
        if name in DTYPES:
            return DTYPES[name]
        raise invalid(f"unknown dtype '{dtype}'; expected one of "
                      f"{', '.join(DTYPES)}")
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise invalid(f"unknown dtype {dtype!r}") from None
    for d in DTYPES.values():
        if d.exact_numpy and d.storage == np_dtype:
            return d
    raise invalid(f"numpy dtype {np_dtype} has no ccl dtype; expected one "
                  f"of {', '.join(DTYPES)}")


def from_proto(value):
    if value not in _BY_PROTO:
        raise invalid(f"unknown wire dtype {value}")
    return _BY_PROTO[value]


def to_bytes(dtype, data):
    """The stored bytes of `data` (array-like) as elements of `dtype`.

    An array already of the storage type is taken as is (for bfloat16/fp8 a
    uint16/uint8 array is taken as raw bits); floats are rounded into
    bfloat16/fp8; anything else goes through numpy's conversion."""
    array = np.asarray(data)
    if dtype.format is not None:
        if array.dtype != dtype.storage:
            array = dtype.format.encode(array).astype(dtype.storage)
    elif array.dtype != dtype.storage:
        array = array.astype(dtype.storage)
    return np.ascontiguousarray(array).tobytes()


def from_bytes(dtype, raw, shape, widen=True):
    """A numpy array of the bytes: bfloat16/fp8 widened to float32 (or the
    raw bits with widen=False)."""
    array = np.frombuffer(raw, dtype=dtype.storage).reshape(shape)
    if dtype.format is None or not widen:
        # A writable buffer (a large read's) is the caller's alone: no copy.
        return array if array.flags.writeable else array.copy()
    if dtype.name == "bfloat16":
        # bfloat16 is the top half of a float32: exact and fast.
        return (array.astype(np.uint32) << 16).view(np.float32)
    return dtype.format.decode(array).astype(np.float32)
