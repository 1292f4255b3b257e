#include "server/comm/gloo/reduce_kernels.h"

#include <array>
#include <cstdint>
#include <type_traits>

#include "common/element.h"
#include "common/narrow_float.h"

namespace ccl {
namespace {

// How a dtype is stored and in what type its arithmetic is done.
template <typename T>
struct NativeCodec {
  using Storage = T;
  using Compute = T;
  static T Load(T v) { return v; }
  static T Store(T v) { return v; }
};

template <typename Format, bool kSaturate>
struct NarrowCodec {
  using Storage =
      std::conditional_t<(Format::kMagnitudeMask > 0xff), uint16_t, uint8_t>;
  using Compute = float;
  static float Load(Storage v) { return Format::Decode(v); }
  static Storage Store(float f) {
    return static_cast<Storage>(Format::Encode(f, kSaturate));
  }
};

struct BFloat16Codec : NarrowCodec<BFloat16Format, false> {
  static float Load(uint16_t v) { return BFloat16BitsToFloat(v); }
  static uint16_t Store(float f) { return FloatToBFloat16Bits(f); }
};

template <typename T>
using Unsigned = std::make_unsigned_t<T>;

// Integers wrap, computed unsigned so that overflow is defined.
struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Unsigned<T>>(a) +
                            static_cast<Unsigned<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct Prod {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      // uint8_t promotes to int, where 255 * 255 fits.
      return static_cast<T>(static_cast<Unsigned<T>>(a) *
                            static_cast<Unsigned<T>>(b));
    } else {
      return a * b;
    }
  }
};
// Written with compares rather than std::fmin so that loops vectorise; a
// NaN operand loses (a != a only for NaN).
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return (b < a || a != a) ? b : a;
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return (a < b || a != a) ? b : a;
  }
};

// The result of every pair of one-byte operands, index (a << 8) | b.
template <typename Codec, typename Op>
const uint8_t* PairTable() {
  static const std::array<uint8_t, 65536> table = [] {
    std::array<uint8_t, 65536> t;
    const Op op;
    for (uint32_t a = 0; a < 256; ++a) {
      for (uint32_t b = 0; b < 256; ++b) {
        t[(a << 8) | b] =
            Codec::Store(op(Codec::Load(static_cast<uint8_t>(a)),
                            Codec::Load(static_cast<uint8_t>(b))));
      }
    }
    return t;
  }();
  return table.data();
}

// Built for x86-64-v4 (AVX-512) and AVX2 as well as the baseline, one
// picked when the library loads: the conversions vectorise wider (bfloat16
// per operand, 1 MiB: 1.2 GB/s baseline, 5.6 AVX2, 9.5 AVX-512;
// bench/reduce_kernels.cc). The tests run the clone of the machine they run
// on.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CCL_KERNEL_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
// Clang 14 has no target_clones on function templates (the fuzz build).
#define CCL_KERNEL_CLONES
#endif
template <typename Codec, typename Op>
CCL_KERNEL_CLONES void Apply(void* out, const void* a, const void* b,
                             size_t n) {
  using S = typename Codec::Storage;
  using C = typename Codec::Compute;
  S* o = static_cast<S*>(out);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  const Op op;
  if constexpr (std::is_same_v<S, C>) {
    for (size_t i = 0; i < n; ++i) o[i] = op(x[i], y[i]);
  } else if constexpr (sizeof(S) == 1) {
    // fp8: every result looked up by its pair of operands (64 KiB per
    // format and op, built from the rule below on first use, so the same
    // values): 1.7-2.2 GB/s per operand against 0.4-0.5 converting
    // (bench/reduce_kernels.cc).
    const uint8_t* table = PairTable<Codec, Op>();
    for (size_t i = 0; i < n; ++i) o[i] = table[(size_t{x[i]} << 8) | y[i]];
  } else if (o == x) {
    // Gloo reduces in place (out is a). Written with the two arrays it
    // really has: with out and a as two pointers of one array, GCC's
    // overlap check sent every call to the scalar loop.
    for (size_t i = 0; i < n; ++i) {
      o[i] = Codec::Store(op(Codec::Load(o[i]), Codec::Load(y[i])));
    }
  } else if (o == y) {
    for (size_t i = 0; i < n; ++i) {
      o[i] = Codec::Store(op(Codec::Load(x[i]), Codec::Load(o[i])));
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      o[i] = Codec::Store(op(Codec::Load(x[i]), Codec::Load(y[i])));
    }
  }
}

// Calls f(std::type_identity<Codec>{}) for the dtypes the CPU backend reduces.
template <typename F>
bool DispatchCodec(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(std::type_identity<NativeCodec<float>>{});
      return true;
    case DType::kFloat64:
      f(std::type_identity<NativeCodec<double>>{});
      return true;
    case DType::kFloat16:
      f(std::type_identity<NarrowCodec<Float16Format, false>>{});
      return true;
    case DType::kBFloat16:
      f(std::type_identity<BFloat16Codec>{});
      return true;
    case DType::kFp8E4M3:
      f(std::type_identity<NarrowCodec<Fp8E4M3Format, true>>{});
      return true;
    case DType::kFp8E5M2:
      f(std::type_identity<NarrowCodec<Fp8E5M2Format, true>>{});
      return true;
    case DType::kInt8:
      f(std::type_identity<NativeCodec<int8_t>>{});
      return true;
    case DType::kUInt8:
      f(std::type_identity<NativeCodec<uint8_t>>{});
      return true;
    case DType::kInt32:
      f(std::type_identity<NativeCodec<int32_t>>{});
      return true;
    case DType::kInt64:
      f(std::type_identity<NativeCodec<int64_t>>{});
      return true;
  }
  return false;
}

}  // namespace

ReduceKernel ReduceKernelFor(DType dtype, ReduceOp op) {
  ReduceKernel kernel = nullptr;
  DispatchCodec(dtype, [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    switch (op) {
      case ReduceOp::kProd:
        kernel = &Apply<Codec, Prod>;
        return;
      case ReduceOp::kMin:
        kernel = &Apply<Codec, Min>;
        return;
      case ReduceOp::kMax:
        kernel = &Apply<Codec, Max>;
        return;
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
      case ReduceOp::kPremulSum:
        kernel = &Apply<Codec, Sum>;
        return;
    }
  });
  return kernel;
}

void ScaleElements(DType dtype, void* out, const void* in, size_t n,
                   double scale) {
  if (!IsFloatingPoint(dtype)) {
    // premul_sum is refused for integers before it gets here; kept total.
    for (size_t i = 0; i < n; ++i) {
      StoreElement(dtype, out, i, LoadElement(dtype, in, i) * scale);
    }
    return;
  }
  DispatchCodec(dtype, [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    using S = typename Codec::Storage;
    using C = typename Codec::Compute;
    const C factor = Codec::Load(Codec::Store(static_cast<C>(scale)));
    S* o = static_cast<S*>(out);
    const S* x = static_cast<const S*>(in);
    for (size_t i = 0; i < n; ++i)
      o[i] = Codec::Store(Codec::Load(x[i]) * factor);
  });
}

void DivideElements(DType dtype, void* data, size_t n, int divisor) {
  DispatchCodec(dtype, [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    using S = typename Codec::Storage;
    using C = typename Codec::Compute;
    S* d = static_cast<S*>(data);
    if constexpr (std::is_integral_v<C>) {
      // In int64: a world of 128 or more does not fit an int8 divisor.
      for (size_t i = 0; i < n; ++i) {
        d[i] = static_cast<S>(static_cast<int64_t>(d[i]) / divisor);
      }
    } else {
      const C by = static_cast<C>(divisor);
      for (size_t i = 0; i < n; ++i) {
        d[i] = Codec::Store(Codec::Load(d[i]) / by);
      }
    }
  });
}

}  // namespace ccl
