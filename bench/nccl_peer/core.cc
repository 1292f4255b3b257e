#include "bench/nccl_peer/core.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace ccl::peer {
namespace {

struct OpEntry {
  Op op;
  std::string_view name;
  bool reduction;
  bool rooted;
  // Splits a buffer into one part per rank (size rounded per rank, and the
  // op's bytes are param x ranks).
  bool per_rank_parts;
};

constexpr std::array<OpEntry, 9> kOps = {{
    {Op::kAllReduce, "all_reduce", true, false, false},
    {Op::kAllGather, "all_gather", false, false, true},
    {Op::kReduceScatter, "reduce_scatter", true, false, true},
    {Op::kBroadcast, "broadcast", false, true, false},
    {Op::kReduce, "reduce", true, true, false},
    {Op::kAllToAll, "alltoall", false, false, true},
    {Op::kSendRecv, "sendrecv", false, false, false},
    {Op::kGather, "gather", false, true, true},
    {Op::kScatter, "scatter", false, true, true},
}};

const OpEntry& Entry(Op op) { return kOps[static_cast<int>(op)]; }

constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kInt8, "int8", "int8", 1},
    {DType::kUInt8, "uint8", "uint8", 1},
    {DType::kInt32, "int32", "int32", 4},
    {DType::kUInt32, "uint32", "uint32", 4},
    {DType::kInt64, "int64", "int64", 8},
    {DType::kUInt64, "uint64", "uint64", 8},
    {DType::kFloat16, "half", "float16", 2},
    {DType::kFloat32, "float", "float32", 4},
    {DType::kFloat64, "double", "float64", 8},
    {DType::kBFloat16, "bfloat16", "bfloat16", 2},
    {DType::kFp8E4M3, "f8e4m3", "fp8_e4m3", 1},
    {DType::kFp8E5M2, "f8e5m2", "fp8_e5m2", 1},
}};

constexpr std::array<std::pair<std::string_view, DType>, 9> kDTypeAliases = {{
    {"char", DType::kInt8},
    {"int", DType::kInt32},
    {"fp32", DType::kFloat32},
    {"fp16", DType::kFloat16},
    {"bf16", DType::kBFloat16},
    {"fp64", DType::kFloat64},
    {"e4m3", DType::kFp8E4M3},
    {"e5m2", DType::kFp8E5M2},
    {"long", DType::kInt64},
}};

constexpr std::array<std::string_view, 5> kRedOpNames = {"sum", "prod", "max",
                                                         "min", "avg"};

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(c));
  return out;
}

template <typename T>
std::optional<T> ParseNumber(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

std::string Format(const char* format, auto... args) {
  char buffer[512];
  const int n = std::snprintf(buffer, sizeof(buffer), format, args...);
  return std::string(buffer, n < 0 ? 0 : std::min<size_t>(n, sizeof(buffer)));
}

}  // namespace

std::string_view OpName(Op op) { return Entry(op).name; }

std::optional<Op> ParseOp(std::string_view name) {
  std::string key;
  for (char c : Lower(name)) {
    if (c != '_' && c != '-') key.push_back(c);
  }
  for (const OpEntry& entry : kOps) {
    std::string plain;
    for (char c : entry.name) {
      if (c != '_') plain.push_back(c);
    }
    if (plain == key) return entry.op;
  }
  if (key == "alltoall" || key == "a2a") return Op::kAllToAll;
  return std::nullopt;
}

bool IsReduction(Op op) { return Entry(op).reduction; }
bool IsRooted(Op op) { return Entry(op).rooted; }

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<int>(dtype)]; }

std::optional<DType> ParseDType(std::string_view name) {
  const std::string key = Lower(name);
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == key || info.csv_name == key) return info.dtype;
  }
  for (const auto& [alias, dtype] : kDTypeAliases) {
    if (alias == key) return dtype;
  }
  return std::nullopt;
}

std::string_view RedOpName(RedOp op) {
  return kRedOpNames[static_cast<int>(op)];
}

std::optional<RedOp> ParseRedOp(std::string_view name) {
  std::string key = Lower(name);
  if (key == "product") key = "prod";
  if (key == "mean") key = "avg";
  for (size_t i = 0; i < kRedOpNames.size(); ++i) {
    if (kRedOpNames[i] == key) return static_cast<RedOp>(i);
  }
  return std::nullopt;
}

Counts CountsFor(Op op, size_t bytes, size_t elem_size, int nranks) {
  const size_t count = bytes / elem_size;
  const size_t n = static_cast<size_t>(nranks);
  Counts c;
  if (!Entry(op).per_rank_parts) {
    c.send = c.recv = c.param = count;
    return c;
  }
  // Each rank's part is a whole number of 16-byte units (elements of 16
  // bytes or more are their own unit).
  const size_t unit = std::max<size_t>(1, 16 / elem_size);
  const size_t part = count / n / unit * unit;
  c.param = part;
  switch (op) {
    case Op::kAllGather:
    case Op::kGather:
      // In place, rank r's input is its own part of the output.
      c.send = part;
      c.recv = part * n;
      c.send_inplace_offset = part;
      break;
    case Op::kReduceScatter:
    case Op::kScatter:
      // In place, rank r's output is its own part of the input.
      c.send = part * n;
      c.recv = part;
      c.recv_inplace_offset = part;
      break;
    case Op::kAllToAll:
      c.send = c.recv = part * n;
      break;
    default:
      break;
  }
  return c;
}

size_t RowBytes(const Counts& counts, size_t elem_size) {
  return std::max(counts.send, counts.recv) * elem_size;
}

double AlgBw(Op op, const Counts& counts, size_t elem_size, int nranks,
             double seconds) {
  if (seconds <= 0) return 0;
  double bytes = static_cast<double>(counts.param) * elem_size;
  if (Entry(op).per_rank_parts) bytes *= nranks;
  return bytes / 1.0e9 / seconds;
}

double BusFactor(Op op, int nranks) {
  const double n = nranks;
  switch (op) {
    case Op::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllToAll:
    case Op::kGather:
    case Op::kScatter:
      return (n - 1) / n;
    case Op::kBroadcast:
    case Op::kReduce:
    case Op::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

std::vector<size_t> SweepSizes(size_t min_bytes, size_t max_bytes,
                               double factor, size_t step_bytes) {
  std::vector<size_t> sizes;
  if (min_bytes == 0 || max_bytes < min_bytes) return sizes;
  if (factor <= 1 && step_bytes == 0) return sizes;
  for (size_t size = min_bytes; size <= max_bytes;) {
    sizes.push_back(size);
    const size_t next =
        factor > 1 ? static_cast<size_t>(static_cast<double>(size) * factor)
                   : size + step_bytes;
    if (next <= size) break;  // a factor too close to 1 for this size
    size = next;
  }
  return sizes;
}

std::vector<size_t> WarmupSizes(size_t min_bytes, size_t max_bytes) {
  return SweepSizes(min_bytes, max_bytes, 2, 0);
}

size_t IterShift(size_t row_bytes, size_t max_bytes, int iter) {
  if (row_bytes == 0 || iter < 0) return 0;
  const size_t slots = std::max<size_t>(1, max_bytes / row_bytes);
  return row_bytes * (static_cast<size_t>(iter) % slots);
}

double Combine(const std::vector<double>& per_rank, Average how) {
  if (per_rank.empty()) return 0;
  switch (how) {
    case Average::kRank0:
      return per_rank.front();
    case Average::kMean:
      return std::accumulate(per_rank.begin(), per_rank.end(), 0.0) /
             static_cast<double>(per_rank.size());
    case Average::kMin:
      return *std::min_element(per_rank.begin(), per_rank.end());
    case Average::kMax:
      return *std::max_element(per_rank.begin(), per_rank.end());
  }
  return 0;
}

std::string_view AverageName(Average how) {
  switch (how) {
    case Average::kRank0:
      return "rank 0's";
    case Average::kMean:
      return "mean over ranks";
    case Average::kMin:
      return "min over ranks";
    case Average::kMax:
      return "max over ranks";
  }
  return "?";
}

std::optional<size_t> ParseBytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t scale = 1;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K':
      scale = size_t{1} << 10;
      break;
    case 'M':
      scale = size_t{1} << 20;
      break;
    case 'G':
      scale = size_t{1} << 30;
      break;
    case 'T':
      scale = size_t{1} << 40;
      break;
    default:
      break;
  }
  if (scale != 1) text.remove_suffix(1);
  const auto value = ParseNumber<size_t>(text);
  if (!value || (*value != 0 && *value > SIZE_MAX / scale)) return std::nullopt;
  return *value * scale;
}

ParsedArgs ParseArgs(const std::vector<std::string>& args) {
  ParsedArgs parsed;
  Options& o = parsed.options;
  auto fail = [&](std::string message) {
    parsed.error = std::move(message);
    return parsed;
  };
  auto add_ops = [&](std::string_view list) -> bool {
    while (!list.empty()) {
      const size_t comma = list.find(',');
      const std::string_view name = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view()
                                             : list.substr(comma + 1);
      if (name.empty()) continue;
      if (Lower(name) == "all") {
        o.ops.clear();  // every op
        continue;
      }
      const auto op = ParseOp(name);
      if (!op) {
        parsed.error = "unknown op '" + std::string(name) + "'";
        return false;
      }
      if (std::find(o.ops.begin(), o.ops.end(), *op) == o.ops.end()) {
        o.ops.push_back(*op);
      }
    }
    return true;
  };

  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      if (!add_ops(arg)) return parsed;
      continue;
    }
    // Split "--name=value" and "-bVALUE".
    std::string key(arg);
    std::optional<std::string> inline_value;
    if (arg.starts_with("--")) {
      if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
        key = std::string(arg.substr(0, eq));
        inline_value = std::string(arg.substr(eq + 1));
      }
    } else if (arg.size() > 2) {
      key = std::string(arg.substr(0, 2));
      inline_value = std::string(arg.substr(2));
    }
    if (key == "-h" || key == "--help") {
      parsed.help = true;
      return parsed;
    }
    if (key == "--launch-latency") {
      if (inline_value) return fail("--launch-latency takes no value");
      o.launch_latency = true;
      continue;
    }
    // Every option below but --launch-latency takes a value.
    constexpr std::string_view kTakesValue =
        " -g --ngpus -b --minbytes -e --maxbytes -f --stepfactor -i "
        "--stepbytes -n --iters -w --warmup_iters -c --check -d --datatype "
        "-o --op -r --root -a --average -G --cudagraph --comm-blocking --ops "
        "--csv ";
    if (kTakesValue.find(" " + key + " ") == std::string_view::npos) {
      return fail("unknown option " + key);
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return fail("missing value for " + key);
    }
    auto bad = [&] { return fail("bad value '" + value + "' for " + key); };
    auto as_int = [&](int* out, int lowest) -> bool {
      const auto v = ParseNumber<int>(value);
      if (!v || *v < lowest) return false;
      *out = *v;
      return true;
    };
    if (key == "-g" || key == "--ngpus") {
      if (!as_int(&o.ngpus, 1)) return bad();
    } else if (key == "-b" || key == "--minbytes") {
      const auto v = ParseBytes(value);
      if (!v) return bad();
      o.min_bytes = *v;
    } else if (key == "-e" || key == "--maxbytes") {
      const auto v = ParseBytes(value);
      if (!v) return bad();
      o.max_bytes = *v;
    } else if (key == "-f" || key == "--stepfactor") {
      const auto v = ParseNumber<double>(value);
      if (!v || !(*v > 1)) return bad();
      o.step_factor = *v;
    } else if (key == "-i" || key == "--stepbytes") {
      const auto v = ParseBytes(value);
      if (!v || *v == 0) return bad();
      o.step_bytes = *v;
      o.step_factor = 0;
    } else if (key == "-n" || key == "--iters") {
      if (!as_int(&o.iters, 1)) return bad();
      o.iters_given = true;
    } else if (key == "-w" || key == "--warmup_iters") {
      if (!as_int(&o.warmup, 0)) return bad();
    } else if (key == "-c" || key == "--check") {
      if (!as_int(&o.check, 0)) return bad();
    } else if (key == "-d" || key == "--datatype") {
      const auto v = ParseDType(value);
      if (!v) return bad();
      o.dtype = *v;
    } else if (key == "-o" || key == "--op") {
      const auto v = ParseRedOp(value);
      if (!v) return bad();
      o.redop = *v;
    } else if (key == "-r" || key == "--root") {
      if (!as_int(&o.root, 0)) return bad();
    } else if (key == "-a" || key == "--average") {
      int how = 0;
      if (!as_int(&how, 0) || how > 3) return bad();
      o.average = static_cast<Average>(how);
    } else if (key == "-G" || key == "--cudagraph") {
      if (!as_int(&o.graph_launches, 0)) return bad();
    } else if (key == "--comm-blocking") {
      if (value != "0" && value != "1") return bad();
      o.comm_blocking = value == "1";
    } else if (key == "--ops") {
      if (!add_ops(value)) return parsed;
    } else if (key == "--csv") {
      if (value.empty()) return bad();
      o.csv = value;
    } else {
      return fail("unknown option " + key);
    }
  }
  if (o.max_bytes < o.min_bytes || o.min_bytes == 0) {
    return fail("need 1 <= -b <= -e");
  }
  if (SweepSizes(o.min_bytes, o.max_bytes, o.step_factor, o.step_bytes)
          .empty()) {
    return fail("no sizes between -b and -e with this -f / -i");
  }
  return parsed;
}

std::string Usage(std::string_view program) {
  std::string p(program);
  return "usage: " + p +
         " [OP[,OP...]|all ...] [options]\n"
         "  Runs NCCL ops back to back with nccl-tests' method and columns,\n"
         "  one thread per GPU of this process.\n"
         "  OP: all_reduce all_gather reduce_scatter broadcast reduce "
         "alltoall\n"
         "      sendrecv gather scatter (default: all)\n"
         "  -g,--ngpus N          GPUs (ranks), default every visible GPU\n"
         "  -b,--minbytes SIZE    default 32M\n"
         "  -e,--maxbytes SIZE    default 32M\n"
         "  -f,--stepfactor F     multiply the size by F (> 1)\n"
         "  -i,--stepbytes SIZE   add SIZE (default 1M, when no -f)\n"
         "  -n,--iters N          timed iterations, default 20\n"
         "  -w,--warmup_iters N   default 1, per size from -b to -e doubling\n"
         "  -c,--check N          check results N times per size, default 1\n"
         "  -d,--datatype T       float (default), half, bfloat16, double,\n"
         "                        int8, uint8, int32, uint32, int64, uint64,\n"
         "                        f8e4m3, f8e5m2 (or ccctl's names)\n"
         "  -o,--op OP            sum (default), prod, max, min, avg\n"
         "  -r,--root R           default 0\n"
         "  -a,--average 0..3     time from rank 0 / mean (default) / min /\n"
         "                        max over ranks\n"
         "  -G,--cudagraph N      capture the timed iterations in a CUDA "
         "graph,\n"
         "                        launch it N times\n"
         "  --comm-blocking 0|1   communicator mode (default 1: blocking)\n"
         "  --ops LIST            same as the positional ops\n"
         "  --csv FILE            write ccctl bench's CSV columns; {op} in "
         "FILE\n"
         "                        makes one file per op\n"
         "  --launch-latency      measure the host cost of enqueuing an "
         "8-byte\n"
         "                        all_reduce, blocking vs non-blocking\n"
         "                        communicators (-n default 2000)\n";
}

std::string RowRedOp(const Row& row) {
  return IsReduction(row.op) ? std::string(RedOpName(row.redop)) : "none";
}

int RowRoot(const Row& row) { return IsRooted(row.op) ? row.root : -1; }

std::string FitNumber(double value, int width) {
  for (const char* format : {"%*.2f", "%*.1f", "%*.0f"}) {
    std::string s = Format(format, width, value);
    if (static_cast<int>(s.size()) <= width) return s;
  }
  return Format(width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

std::string TableHeader() {
  // A data line is 52 characters of size .. root, then two blocks of 33
  // (time, algbw, busbw, #wrong): out of place, in place.
  auto centred = [](std::string_view label, size_t width) {
    const size_t left = (width - label.size()) / 2;
    return std::string(left, ' ') + std::string(label) +
           std::string(width - left - label.size(), ' ');
  };
  auto trimmed = [](std::string line) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::string out = "#\n";
  out += trimmed("#" + std::string(51, ' ') + centred("out-of-place", 33) +
                 centred("in-place", 33));
  out += trimmed(Format(
      "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
      "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
      "#wrong", "time", "algbw", "busbw", "#wrong"));
  out += trimmed(Format(
      "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
      "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
      "(GB/s)", "(GB/s)", ""));
  return out;
}

std::string TableLine(const Row& row) {
  std::string out = Format("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
                           std::string(Info(row.dtype).name).c_str(),
                           RowRedOp(row).c_str(), RowRoot(row));
  for (int v = 0; v < 2; ++v) {
    const std::string wrong =
        row.checked[v] ? Format("%lld", static_cast<long long>(row.wrong[v]))
                       : std::string("N/A");
    out += Format("  %7s  %6s  %6s  %6s", FitNumber(row.time_us[v], 7).c_str(),
                  FitNumber(row.algbw[v], 6).c_str(),
                  FitNumber(row.busbw[v], 6).c_str(), wrong.c_str());
  }
  return out + "\n";
}

double AvgBusBw(const std::vector<Row>& rows) {
  if (rows.empty()) return 0;
  double sum = 0;
  for (const Row& row : rows) sum += row.busbw[0] + row.busbw[1];
  return sum / (2.0 * static_cast<double>(rows.size()));
}

std::string CsvHeader() {
  return "op,size,count,type,redop,root,time_us,algbw,busbw,wrong,"
         "ip_time_us,ip_algbw,ip_busbw,ip_wrong,e2e_us,op_min_us,op_max_us\n";
}

std::string CsvLine(const Row& row) {
  return Format(
      "%s,%zu,%zu,%s,%s,%d,%.2f,%.3f,%.3f,%lld,%.2f,%.3f,%.3f,%lld,%.2f,%.2f,"
      "%.2f\n",
      std::string(OpName(row.op)).c_str(), row.bytes, row.count,
      std::string(Info(row.dtype).csv_name).c_str(), RowRedOp(row).c_str(),
      RowRoot(row), row.time_us[0], row.algbw[0], row.busbw[0],
      static_cast<long long>(row.wrong[0]), row.time_us[1], row.algbw[1],
      row.busbw[1], static_cast<long long>(row.wrong[1]), 0.0, 0.0, 0.0);
}

std::string CsvPath(std::string_view pattern, Op op) {
  std::string out(pattern);
  const std::string name(OpName(op));
  for (size_t at = out.find("{op}"); at != std::string::npos;
       at = out.find("{op}", at + name.size())) {
    out.replace(at, 4, name);
  }
  return out;
}

}  // namespace ccl::peer
