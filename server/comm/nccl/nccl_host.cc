#include "server/comm/nccl/nccl_host.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ccl::nccl {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes,
              "unique_id_plan.h's id size is not this NCCL's");

absl::StatusOr<ncclDataType_t> ToNcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt8:
      return ncclInt8;
    case DType::kUInt8:
      return ncclUint8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case DType::kFp8E4M3:
      return ncclFloat8e4m3;
    case DType::kFp8E5M2:
      return ncclFloat8e5m2;
#else
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      break;
#endif
  }
  return absl::UnimplementedError(
      absl::StrCat("NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, " has no ",
                   std::string(DTypeName(dtype)), " type"));
}

absl::StatusOr<ncclRedOp_t> ToNcclRedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kPremulSum:
      break;
  }
  return absl::UnimplementedError(
      absl::StrCat("reduce op ", std::string(ReduceOpName(op)),
                   " has no built-in NCCL op (premul_sum is created per op)"));
}

absl::StatusCode NcclResultCode(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
    case ncclInProgress:
      return absl::StatusCode::kUnavailable;
    case ncclUnhandledCudaError:
    case ncclInternalError:
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status NcclErrorStatus(ncclResult_t result, const char* expr,
                             const char* file, int line,
                             const char* last_error) {
  std::string message = absl::StrCat(file, ":", line, ": ", expr,
                                     " failed: ", ncclGetErrorString(result));
  if (last_error != nullptr && last_error[0] != '\0') {
    absl::StrAppend(&message, " (", std::string(last_error), ")");
  }
  return absl::Status(NcclResultCode(result), message);
}

std::string EncodeUniqueId(const ncclUniqueId& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(id.internal));
  for (char c : id.internal) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

absl::StatusOr<ncclUniqueId> DecodeUniqueId(const std::string& text) {
  ncclUniqueId id;
  if (text.size() != 2 * sizeof(id.internal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL unique id has ", text.size(), " hex digits, want ",
                     2 * sizeof(id.internal)));
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    const int hi = nibble(text[2 * i]);
    const int lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          "NCCL unique id has a character that is not a hex digit");
    }
    id.internal[i] = static_cast<char>((hi << 4) | lo);
  }
  return id;
}

std::string EncodeUniqueIdList(const std::vector<ncclUniqueId>& ids) {
  std::vector<std::string> raw;
  raw.reserve(ids.size());
  for (const ncclUniqueId& id : ids) {
    raw.emplace_back(id.internal, sizeof(id.internal));
  }
  return PackUniqueIds(raw);
}

absl::StatusOr<std::vector<ncclUniqueId>> DecodeUniqueIdList(
    const std::string& bytes, int count) {
  absl::StatusOr<std::vector<std::string>> raw = UnpackUniqueIds(bytes, count);
  if (!raw.ok()) return raw.status();
  std::vector<ncclUniqueId> ids(raw->size());
  for (size_t i = 0; i < raw->size(); ++i) {
    std::memcpy(ids[i].internal, (*raw)[i].data(), sizeof(ncclUniqueId));
  }
  return ids;
}

absl::StatusOr<int> RanksPerRootFromEnv() {
  absl::StatusOr<int> parsed = ParseRanksPerRoot(std::getenv(kRanksPerRootEnv));
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 23, 0)
  // No ncclCommInitRankScalable: one id, whatever was asked.
  if (parsed.ok()) return 0;
#endif
  return parsed;
}

absl::StatusOr<std::vector<ncclUniqueId>> ExchangeUniqueIds(
    int rank, int size, int ranks_per_root, const std::string& prefix,
    KvStore& store, std::chrono::milliseconds timeout,
    const std::function<absl::StatusOr<ncclUniqueId>()>& make_id) {
  const UniqueIdPlan plan = PlanUniqueIds(rank, size, ranks_per_root);
  if (plan.ids == 1) {
    if (rank == 0) {
      absl::StatusOr<ncclUniqueId> id = make_id();
      if (!id.ok()) return id.status();
      if (absl::Status s = store.Set(UniqueIdKey(prefix), EncodeUniqueId(*id));
          !s.ok()) {
        return s;
      }
      return std::vector<ncclUniqueId>{*id};
    }
    absl::StatusOr<std::string> text = store.Get(UniqueIdKey(prefix), timeout);
    if (!text.ok()) return text.status();
    absl::StatusOr<ncclUniqueId> decoded = DecodeUniqueId(*text);
    if (!decoded.ok()) return decoded.status();
    return std::vector<ncclUniqueId>{*decoded};
  }
  if (plan.posts) {
    absl::StatusOr<ncclUniqueId> own = make_id();
    if (!own.ok()) return own.status();
    if (absl::Status s =
            store.Set(UniqueIdKey(prefix, plan.block), EncodeUniqueId(*own));
        !s.ok()) {
      return s;
    }
  }
  if (plan.gathers) {
    std::vector<std::string> keys;
    keys.reserve(plan.ids);
    for (int block = 0; block < plan.ids; ++block) {
      keys.push_back(UniqueIdKey(prefix, block));
    }
    absl::StatusOr<std::vector<std::string>> texts =
        store.GetMany(keys, timeout);
    if (!texts.ok()) return texts.status();
    std::vector<ncclUniqueId> ids;
    ids.reserve(plan.ids);
    for (const std::string& text : *texts) {
      absl::StatusOr<ncclUniqueId> decoded = DecodeUniqueId(text);
      if (!decoded.ok()) return decoded.status();
      ids.push_back(*decoded);
    }
    if (absl::Status s =
            store.Set(UniqueIdListKey(prefix), EncodeUniqueIdList(ids));
        !s.ok()) {
      return s;
    }
    return ids;
  }
  absl::StatusOr<std::string> list =
      store.Get(UniqueIdListKey(prefix), timeout);
  if (!list.ok()) return list.status();
  return DecodeUniqueIdList(*list, plan.ids);
}

}  // namespace ccl::nccl
