// The parts of nccl_peer_bench that need no GPU: nccl-tests' size and
// bandwidth definitions per op, the size sweep, argument parsing, and the
// table and CSV it prints. Kept apart from the CUDA code so that a unit test
// on a machine without a GPU pins them down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ccl::peer {

enum class Op : int {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,
  kGather,
  kScatter,
};

// In the order a default run sweeps them.
inline constexpr Op kAllOps[] = {
    Op::kAllReduce, Op::kAllGather, Op::kReduceScatter,
    Op::kBroadcast, Op::kReduce,    Op::kAllToAll,
    Op::kSendRecv,  Op::kGather,    Op::kScatter,
};

std::string_view OpName(Op op);  // "all_reduce", as nccl-tests' binaries
// Accepts "all_reduce", "allreduce", "all-reduce" and "alltoall"/"all_to_all".
std::optional<Op> ParseOp(std::string_view name);
bool IsReduction(Op op);  // takes a reduce op (-o)
bool IsRooted(Op op);     // takes a root (-r)

// The numeric values are ncclDataType_t's; nccl_peer_bench.cc checks that.
enum class DType : int {
  kInt8 = 0,
  kUInt8 = 1,
  kInt32 = 2,
  kUInt32 = 3,
  kInt64 = 4,
  kUInt64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBFloat16 = 9,
  kFp8E4M3 = 10,
  kFp8E5M2 = 11,
};

struct DTypeInfo {
  DType dtype;
  std::string_view name;      // nccl-tests' name, printed in the table
  std::string_view csv_name;  // ccctl's name, written to the CSV
  size_t size;
};
const DTypeInfo& Info(DType dtype);
// nccl-tests' names (float, half, bfloat16, f8e4m3, ...) and ccctl's
// (float32, float16, fp8_e4m3, ...).
std::optional<DType> ParseDType(std::string_view name);

// The numeric values are ncclRedOp_t's.
enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
std::string_view RedOpName(RedOp op);
std::optional<RedOp> ParseRedOp(std::string_view name);

// One rank's view of an op at one size, in elements, as nccl-tests derives
// it from the requested byte size: `param` is the count argument of the
// NCCL call (and nccl-tests' "count" column); the in-place offsets are
// multiplied by the rank and added to the receive buffer to get the in-place
// input and output pointers.
struct Counts {
  size_t send = 0;
  size_t recv = 0;
  size_t param = 0;
  size_t send_inplace_offset = 0;
  size_t recv_inplace_offset = 0;
};
// Ops that split a buffer per rank round each rank's part down to a whole
// number of 16-byte units, as nccl-tests 2.19 does (so with 2 ranks and
// float, all_gather's smallest non-empty size is 32 B).
Counts CountsFor(Op op, size_t bytes, size_t elem_size, int nranks);
// nccl-tests' "size" column: the larger of one rank's two buffers, in bytes.
size_t RowBytes(const Counts& counts, size_t elem_size);
// nccl-tests' algorithm bandwidth in GB/s (1e9 bytes/s): the bytes of the
// whole op (param x ranks for the ops that split a buffer) over the time.
double AlgBw(Op op, const Counts& counts, size_t elem_size, int nranks,
             double seconds);
// busbw = algbw x this (nccl-tests' doc/PERFORMANCE.md).
double BusFactor(Op op, int nranks);

// The sizes of a sweep: min, then x factor (factor > 1) or + step, while
// <= max. Empty when the arguments cannot make progress.
std::vector<size_t> SweepSizes(size_t min_bytes, size_t max_bytes,
                               double factor, size_t step_bytes);
// The warm-up before a sweep: min to max doubling, as nccl-tests 2.19.
std::vector<size_t> WarmupSizes(size_t min_bytes, size_t max_bytes);
// Byte offset of iteration `iter` into buffers of `max_bytes`: nccl-tests
// moves each iteration to the next row-sized slot of the buffer so that
// back-to-back iterations do not reuse one cache-warm slot.
size_t IterShift(size_t row_bytes, size_t max_bytes, int iter);

// How one figure is made from the per-rank times (nccl-tests' -a).
enum class Average : int { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };
double Combine(const std::vector<double>& per_rank, Average how);
std::string_view AverageName(Average how);

// "8", "512K", "2G", "1M" (binary units, as nccl-tests). nullopt if bad.
std::optional<size_t> ParseBytes(std::string_view text);

struct Options {
  std::vector<Op> ops;  // empty: every op this NCCL has
  int ngpus = 0;        // 0: every visible GPU
  size_t min_bytes = size_t{32} << 20;
  size_t max_bytes = size_t{32} << 20;
  double step_factor = 0;  // > 1: multiply; otherwise add step_bytes
  size_t step_bytes = size_t{1} << 20;
  int iters = 20;
  bool iters_given = false;  // --launch-latency has its own default
  int warmup = 1;
  int check = 1;
  DType dtype = DType::kFloat32;
  RedOp redop = RedOp::kSum;
  int root = 0;
  Average average = Average::kMean;
  int graph_launches = 0;
  bool comm_blocking = true;
  std::string csv;  // "{op}" in it is replaced by the op's name
  bool launch_latency = false;
};

struct ParsedArgs {
  Options options;
  std::string error;  // non-empty: print it and the usage, exit 2
  bool help = false;
};
// argv without the program name.
ParsedArgs ParseArgs(const std::vector<std::string>& args);
std::string Usage(std::string_view program);

// One line of the table and of the CSV: index 0 out of place, 1 in place.
struct Row {
  Op op = Op::kAllReduce;
  size_t bytes = 0;  // RowBytes
  size_t count = 0;  // Counts::param
  DType dtype = DType::kFloat32;
  RedOp redop = RedOp::kSum;
  int root = 0;
  double time_us[2] = {0, 0};
  double algbw[2] = {0, 0};
  double busbw[2] = {0, 0};
  int64_t wrong[2] = {0, 0};
  bool checked[2] = {false, false};  // #wrong is "N/A" where not
};

// What the table and the CSV print for redop and root: "none" and -1 for
// ops that take none, as nccl-tests prints them.
std::string RowRedOp(const Row& row);
int RowRoot(const Row& row);

// The table, in nccl-tests' column layout.
std::string TableHeader();
std::string TableLine(const Row& row);
// Out-of-place and in-place busbw averaged over rows, as nccl-tests' footer.
double AvgBusBw(const std::vector<Row>& rows);

// The columns `ccctl bench --csv` writes (client/ccctl/bench.cc), so that
// bench/compare.py reads both. e2e_us, op_min_us and op_max_us have no
// counterpart here and are 0; count is nccl-tests' count (see README).
std::string CsvHeader();
std::string CsvLine(const Row& row);
// `pattern` with every "{op}" replaced by the op's name.
std::string CsvPath(std::string_view pattern, Op op);

// `value` in at most `width` characters: two decimals, then fewer, then an
// exponent, so that wide figures keep the columns aligned.
std::string FitNumber(double value, int width);

}  // namespace ccl::peer
