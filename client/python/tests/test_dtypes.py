"""The client's dtype table and its bfloat16 / fp8 rounding, without a
cluster (test_ops.py checks the rounding against the workers' own)."""

import numpy as np
import pytest

import ccl
from ccl import _dtypes


def test_names_and_aliases():
    assert ccl.dtypes == ("float32", "float64", "float16", "bfloat16", "int8",
                          "uint8", "int32", "int64", "fp8_e4m3", "fp8_e5m2")
    assert _dtypes.resolve("torch.float32").name == "float32"
    assert _dtypes.resolve("bf16").name == "bfloat16"
    assert _dtypes.resolve(np.int64).name == "int64"
    assert _dtypes.resolve(np.dtype("float16")).name == "float16"
    for bad in ("complex64", np.complex64, object):
        with pytest.raises(ccl.InvalidArgument):
            _dtypes.resolve(bad)


@pytest.mark.parametrize("value,bits", [
    (1.0, 0x3F80), (-2.0, 0xC000), (0.0, 0x0000), (-0.0, 0x8000),
    (np.inf, 0x7F80), (-np.inf, 0xFF80), (3.4e38, 0x7F80),  # overflows
    (1.00390625, 0x3F80),  # halfway: to even
    (1.01171875, 0x3F82),  # halfway: to even, upwards
    (9.2e-41, 0x0001),     # subnormal
])
def test_bfloat16_encode(value, bits):
    assert int(_dtypes._BF16.encode([value])[0]) == bits


@pytest.mark.parametrize("fmt,value,bits", [
    ("e4m3", 448.0, 0x7E), ("e4m3", 1.0, 0x38), ("e4m3", -1.0, 0xB8),
    ("e4m3", 500.0, 0x7F),   # no inf in e4m3fn: overflow is NaN
    ("e4m3", 2.0 ** -9, 0x01),  # the smallest subnormal
    ("e5m2", 57344.0, 0x7B), ("e5m2", 1.0, 0x3C),
    ("e5m2", 1e6, 0x7C),     # overflow is inf
    ("e5m2", 2.0 ** -16, 0x01),
])
def test_fp8_encode(fmt, value, bits):
    f = _dtypes._E4M3 if fmt == "e4m3" else _dtypes._E5M2
    assert int(f.encode([value])[0]) == bits


@pytest.mark.parametrize("fmt", ["_E4M3", "_E5M2"])
def test_fp8_round_trips_every_code(fmt):
    f = getattr(_dtypes, fmt)
    codes = np.arange(256)
    values = f.decode(codes)
    back = f.encode(values)
    finite = np.isfinite(values)
    # -0 and +0 keep their sign; every finite code comes back as itself.
    np.testing.assert_array_equal(back[finite], codes[finite])
    assert np.isnan(f.decode(f.encode([np.nan]))).all()


def test_bfloat16_decode_is_float32_top_half():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 16, size=4096).astype(np.uint16)
    widened = _dtypes.from_bytes(_dtypes.DTYPES["bfloat16"], bits.tobytes(),
                                 bits.shape)
    generic = _dtypes._BF16.decode(bits)
    same = np.isnan(generic) == np.isnan(widened)
    assert same.all()
    np.testing.assert_array_equal(widened[~np.isnan(widened)],
                                  generic[~np.isnan(generic)])


def test_to_bytes_keeps_raw_bits_and_converts_floats():
    bf16 = _dtypes.DTYPES["bfloat16"]
    raw = np.array([0x3F80, 0x4000], np.uint16)
    assert _dtypes.to_bytes(bf16, raw) == raw.tobytes()
    assert _dtypes.to_bytes(bf16, [1.0, 2.0]) == raw.tobytes()
    i32 = _dtypes.DTYPES["int32"]
    assert _dtypes.to_bytes(i32, [1, 2]) == np.array([1, 2], np.int32).tobytes()


def test_reduce_op_names():
    assert [op.name for op in ccl.ReduceOp] == [
        "SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM"]
    from ccl._client import _reduce
    assert _reduce("prod", None) == (ccl.ReduceOp.PRODUCT, 1.0)
    assert _reduce(ccl.premul_sum(0.5), None) == (ccl.ReduceOp.PREMUL_SUM,
                                                   0.5)
    with pytest.raises(ccl.InvalidArgument):
        _reduce("median", None)


class _Chunk:
    def __init__(self, data, total_bytes=0):
        self.data, self.total_bytes = data, total_bytes


def _chunks(payload, total, size=1 << 20):
    pieces = [payload[i:i + size] for i in range(0, len(payload), size)]
    return iter([_Chunk(p, total if i == 0 else 0)
                 for i, p in enumerate(pieces)])


def test_a_large_read_is_gathered_in_place_and_is_the_callers_own():
    from ccl._streams import HUGE_READ_BYTES, gather as _gather
    payload = np.arange((HUGE_READ_BYTES + 12) // 4, dtype=np.float32)
    raw = payload.tobytes()
    gathered = _gather(_chunks(raw, len(raw)))
    assert not isinstance(gathered, bytes)  # filled in place, not joined
    assert bytes(gathered) == raw
    array = _dtypes.from_bytes(_dtypes.DTYPES["float32"], gathered,
                               payload.shape)
    np.testing.assert_array_equal(array, payload)
    array[0] = -1  # writable, and no other array shares it
    again = _dtypes.from_bytes(_dtypes.DTYPES["float32"],
                               _gather(_chunks(raw, len(raw))), payload.shape)
    assert again[0] == 0


def test_a_read_that_is_not_the_size_announced_keeps_every_byte():
    from ccl._streams import HUGE_READ_BYTES, gather as _gather
    raw = bytes(range(256)) * ((HUGE_READ_BYTES + 4096) // 256)
    # More than announced: every byte, in order, for the size check to see.
    assert _gather(_chunks(raw, HUGE_READ_BYTES)) == raw
    # Fewer than announced: what came, not the announced size of zeros.
    assert bytes(_gather(_chunks(raw[:HUGE_READ_BYTES],
                                 len(raw)))) == raw[:HUGE_READ_BYTES]
    # Small reads are joined as before.
    assert _gather(_chunks(raw[:1000], 1000)) == raw[:1000]
    assert _gather(iter([])) == b""
