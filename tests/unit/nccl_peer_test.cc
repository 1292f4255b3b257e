// bench/nccl_peer/core: the figures nccl_peer_bench prints must mean what
// nccl-tests' mean (doc/PERFORMANCE.md and its size rules), and its CSV must
// be the one `ccctl bench --csv` writes, or bench/compare.py compares
// unlike things.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench/nccl_peer/core.h"

namespace ccl::peer {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

TEST(NcclPeerCounts, WholeBufferOpsUseEveryElement) {
  for (Op op : {Op::kAllReduce, Op::kBroadcast, Op::kReduce, Op::kSendRecv}) {
    const Counts c = CountsFor(op, 8, 4, 2);
    EXPECT_EQ(c.param, 2u) << OpName(op);
    EXPECT_EQ(c.send, 2u);
    EXPECT_EQ(c.recv, 2u);
    EXPECT_EQ(c.send_inplace_offset, 0u);
    EXPECT_EQ(c.recv_inplace_offset, 0u);
    EXPECT_EQ(RowBytes(c, 4), 8u);
  }
  // A size that is not a whole number of elements rounds down.
  EXPECT_EQ(CountsFor(Op::kAllReduce, 10, 4, 2).param, 2u);
  EXPECT_EQ(CountsFor(Op::kAllReduce, 3, 4, 2).param, 0u);
}

TEST(NcclPeerCounts, PartsAreWhole16ByteUnitsPerRank) {
  // 2 ranks, float: 8 and 16 bytes leave no whole 16-byte part per rank.
  for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllToAll, Op::kGather,
                Op::kScatter}) {
    EXPECT_EQ(CountsFor(op, 8, 4, 2).param, 0u) << OpName(op);
    EXPECT_EQ(CountsFor(op, 16, 4, 2).param, 0u) << OpName(op);
    EXPECT_EQ(CountsFor(op, 32, 4, 2).param, 4u) << OpName(op);
    EXPECT_EQ(RowBytes(CountsFor(op, 32, 4, 2), 4), 32u) << OpName(op);
  }
  // 3 ranks, 1 MiB of float: 87381 per rank, down to a multiple of 4.
  const Counts ag = CountsFor(Op::kAllGather, kMiB, 4, 3);
  EXPECT_EQ(ag.param, 87380u);
  EXPECT_EQ(RowBytes(ag, 4), 87380u * 3 * 4);
  // int8: 16 elements a unit; double: 2; wider than 16 bytes cannot occur.
  EXPECT_EQ(CountsFor(Op::kAllGather, 100, 1, 2).param, 48u);
  EXPECT_EQ(CountsFor(Op::kAllGather, 100, 8, 2).param, 6u);
}

TEST(NcclPeerCounts, InPlaceOffsetsFollowNcclsInPlaceRules) {
  // all_gather / gather: the input is the rank's part of the output.
  const Counts ag = CountsFor(Op::kAllGather, 64, 4, 2);
  EXPECT_EQ(ag.send, 8u);
  EXPECT_EQ(ag.recv, 16u);
  EXPECT_EQ(ag.send_inplace_offset, 8u);
  EXPECT_EQ(ag.recv_inplace_offset, 0u);
  const Counts g = CountsFor(Op::kGather, 64, 4, 2);
  EXPECT_EQ(g.send_inplace_offset, g.param);
  // reduce_scatter / scatter: the output is the rank's part of the input.
  const Counts rs = CountsFor(Op::kReduceScatter, 64, 4, 2);
  EXPECT_EQ(rs.send, 16u);
  EXPECT_EQ(rs.recv, 8u);
  EXPECT_EQ(rs.send_inplace_offset, 0u);
  EXPECT_EQ(rs.recv_inplace_offset, 8u);
  const Counts s = CountsFor(Op::kScatter, 64, 4, 2);
  EXPECT_EQ(s.recv_inplace_offset, s.param);
  // alltoall: one buffer, no offsets.
  const Counts a2a = CountsFor(Op::kAllToAll, 64, 4, 2);
  EXPECT_EQ(a2a.send, 16u);
  EXPECT_EQ(a2a.recv, 16u);
  EXPECT_EQ(a2a.send_inplace_offset + a2a.recv_inplace_offset, 0u);
}

TEST(NcclPeerBandwidth, AlgBwIsTheSizeColumnOverTime) {
  for (int n : {2, 3, 8}) {
    for (Op op : kAllOps) {
      for (size_t bytes : {size_t{1024}, kMiB, 2 * kGiB}) {
        const Counts c = CountsFor(op, bytes, 4, n);
        const double seconds = 1e-3;
        EXPECT_NEAR(AlgBw(op, c, 4, n, seconds),
                    static_cast<double>(RowBytes(c, 4)) / 1e9 / seconds, 1e-9)
            << OpName(op) << " n=" << n << " bytes=" << bytes;
      }
    }
  }
  EXPECT_EQ(AlgBw(Op::kAllReduce, CountsFor(Op::kAllReduce, 8, 4, 2), 4, 2, 0),
            0);
  // 2 GiB in 6.3 ms (PERF.md's all_reduce order of magnitude).
  EXPECT_NEAR(AlgBw(Op::kAllReduce, CountsFor(Op::kAllReduce, 2 * kGiB, 4, 2),
                    4, 2, 6.3e-3),
              340.87, 0.01);
}

TEST(NcclPeerBandwidth, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(BusFactor(Op::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusFactor(Op::kAllReduce, 8), 1.75);
  for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllToAll, Op::kGather,
                Op::kScatter}) {
    EXPECT_DOUBLE_EQ(BusFactor(op, 2), 0.5) << OpName(op);
    EXPECT_DOUBLE_EQ(BusFactor(op, 8), 0.875) << OpName(op);
  }
  for (Op op : {Op::kBroadcast, Op::kReduce, Op::kSendRecv}) {
    EXPECT_DOUBLE_EQ(BusFactor(op, 2), 1.0) << OpName(op);
    EXPECT_DOUBLE_EQ(BusFactor(op, 8), 1.0) << OpName(op);
  }
}

TEST(NcclPeerSweep, FactorAndStep) {
  const std::vector<size_t> by4 = SweepSizes(8, 2 * kGiB, 4, 0);
  ASSERT_EQ(by4.size(), 15u);  // 8 B, 32 B, ..., 512 MiB, 2 GiB
  EXPECT_EQ(by4.front(), 8u);
  EXPECT_EQ(by4[1], 32u);
  EXPECT_EQ(by4.back(), 2 * kGiB);
  const std::vector<size_t> by2 = SweepSizes(8, 512 * kKiB, 2, 0);
  ASSERT_EQ(by2.size(), 17u);
  EXPECT_EQ(by2.back(), 512 * kKiB);
  EXPECT_EQ(SweepSizes(kMiB, 4 * kMiB, 0, kMiB),
            (std::vector<size_t>{kMiB, 2 * kMiB, 3 * kMiB, 4 * kMiB}));
  // The last size may fall short of max.
  EXPECT_EQ(SweepSizes(8, 100, 4, 0), (std::vector<size_t>{8, 32}));
  EXPECT_EQ(SweepSizes(10, 30, 1.5, 0), (std::vector<size_t>{10, 15, 22}));
  EXPECT_EQ(SweepSizes(32 * kMiB, 32 * kMiB, 0, kMiB).size(), 1u);
  // Nothing to sweep, or no progress.
  EXPECT_TRUE(SweepSizes(0, 8, 2, 0).empty());
  EXPECT_TRUE(SweepSizes(16, 8, 2, 0).empty());
  EXPECT_TRUE(SweepSizes(8, 16, 1, 0).empty());
  EXPECT_EQ(SweepSizes(1, 4, 1.1, 0), (std::vector<size_t>{1}));
  EXPECT_EQ(WarmupSizes(8, 64), (std::vector<size_t>{8, 16, 32, 64}));
}

TEST(NcclPeerSweep, IterationsWalkTheBuffer) {
  // 8-byte rows in a 32-byte buffer: four slots, then round again.
  std::vector<size_t> shifts;
  for (int i = 0; i < 6; ++i) shifts.push_back(IterShift(8, 32, i));
  EXPECT_EQ(shifts, (std::vector<size_t>{0, 8, 16, 24, 0, 8}));
  // A row of the whole buffer (or larger, or empty) never moves.
  EXPECT_EQ(IterShift(32, 32, 3), 0u);
  EXPECT_EQ(IterShift(64, 32, 3), 0u);
  EXPECT_EQ(IterShift(0, 32, 3), 0u);
  // The last slot still fits: shift + row <= max for any iteration.
  for (size_t row : {size_t{24}, size_t{96}, size_t{1000}}) {
    for (int i = 0; i < 50; ++i)
      EXPECT_LE(IterShift(row, 4096, i) + row, 4096u);
  }
}

TEST(NcclPeerCombine, AsNcclTestsAverageFlag) {
  const std::vector<double> t = {3, 1, 2};
  EXPECT_DOUBLE_EQ(Combine(t, Average::kRank0), 3);
  EXPECT_DOUBLE_EQ(Combine(t, Average::kMean), 2);
  EXPECT_DOUBLE_EQ(Combine(t, Average::kMin), 1);
  EXPECT_DOUBLE_EQ(Combine(t, Average::kMax), 3);
  EXPECT_DOUBLE_EQ(Combine({}, Average::kMax), 0);
}

TEST(NcclPeerParse, Bytes) {
  EXPECT_EQ(ParseBytes("8"), 8u);
  EXPECT_EQ(ParseBytes("512K"), 512 * kKiB);
  EXPECT_EQ(ParseBytes("512k"), 512 * kKiB);
  EXPECT_EQ(ParseBytes("1M"), kMiB);
  EXPECT_EQ(ParseBytes("2G"), 2 * kGiB);
  for (const char* bad :
       {"", "K", "x", "1.5M", "-8", "8 ", "99999999999999999999"}) {
    EXPECT_FALSE(ParseBytes(bad).has_value()) << bad;
  }
}

TEST(NcclPeerParse, NamesOfOpsTypesAndReductions) {
  EXPECT_EQ(ParseOp("all_reduce"), Op::kAllReduce);
  EXPECT_EQ(ParseOp("allreduce"), Op::kAllReduce);
  EXPECT_EQ(ParseOp("All-Gather"), Op::kAllGather);
  EXPECT_EQ(ParseOp("alltoall"), Op::kAllToAll);
  EXPECT_EQ(ParseOp("all_to_all"), Op::kAllToAll);
  EXPECT_EQ(ParseOp("sendrecv"), Op::kSendRecv);
  EXPECT_FALSE(ParseOp("send").has_value());
  for (Op op : kAllOps) EXPECT_EQ(ParseOp(OpName(op)), op);

  EXPECT_EQ(ParseDType("float"), DType::kFloat32);
  EXPECT_EQ(ParseDType("float32"), DType::kFloat32);
  EXPECT_EQ(ParseDType("half"), DType::kFloat16);
  EXPECT_EQ(ParseDType("bf16"), DType::kBFloat16);
  EXPECT_EQ(ParseDType("f8e4m3"), DType::kFp8E4M3);
  EXPECT_EQ(ParseDType("fp8_e5m2"), DType::kFp8E5M2);
  EXPECT_EQ(ParseDType("uint64"), DType::kUInt64);
  EXPECT_FALSE(ParseDType("float128").has_value());
  EXPECT_EQ(Info(DType::kFloat16).size, 2u);
  EXPECT_EQ(Info(DType::kFloat16).name, "half");
  EXPECT_EQ(Info(DType::kFloat16).csv_name, "float16");

  EXPECT_EQ(ParseRedOp("sum"), RedOp::kSum);
  EXPECT_EQ(ParseRedOp("PROD"), RedOp::kProd);
  EXPECT_EQ(ParseRedOp("mean"), RedOp::kAvg);
  EXPECT_FALSE(ParseRedOp("premul_sum").has_value());
}

ParsedArgs Parse(std::vector<std::string> args) { return ParseArgs(args); }

TEST(NcclPeerParse, DefaultsAreNcclTests) {
  const ParsedArgs p = Parse({});
  ASSERT_TRUE(p.error.empty()) << p.error;
  const Options& o = p.options;
  EXPECT_TRUE(o.ops.empty());  // every op
  EXPECT_EQ(o.ngpus, 0);       // every GPU
  EXPECT_EQ(o.min_bytes, 32 * kMiB);
  EXPECT_EQ(o.max_bytes, 32 * kMiB);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup, 1);
  EXPECT_EQ(o.check, 1);
  EXPECT_EQ(o.dtype, DType::kFloat32);
  EXPECT_EQ(o.redop, RedOp::kSum);
  EXPECT_EQ(o.root, 0);
  EXPECT_EQ(o.average, Average::kMean);
  EXPECT_EQ(o.graph_launches, 0);
  EXPECT_TRUE(o.comm_blocking);
  EXPECT_FALSE(o.launch_latency);
}

TEST(NcclPeerParse, TheGpuCheckCommandLines) {
  ParsedArgs p =
      Parse({"-b", "8", "-e", "2G", "-f", "4", "-n", "20", "-w", "5", "-c", "0",
             "-a", "3", "--csv", "/tmp/out/nccl_{op}.csv"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.options.min_bytes, 8u);
  EXPECT_EQ(p.options.max_bytes, 2 * kGiB);
  EXPECT_EQ(p.options.step_factor, 4);
  EXPECT_EQ(p.options.warmup, 5);
  EXPECT_EQ(p.options.check, 0);
  EXPECT_EQ(p.options.average, Average::kMax);
  EXPECT_EQ(p.options.csv, "/tmp/out/nccl_{op}.csv");

  p = Parse({"all_reduce", "-b8", "-e", "512K", "-f2", "-G", "10",
             "--comm-blocking=0", "-d", "bfloat16", "-o", "max", "-r", "1",
             "-g", "2"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.options.ops, (std::vector<Op>{Op::kAllReduce}));
  EXPECT_EQ(p.options.min_bytes, 8u);
  EXPECT_EQ(p.options.step_factor, 2);
  EXPECT_EQ(p.options.graph_launches, 10);
  EXPECT_FALSE(p.options.comm_blocking);
  EXPECT_EQ(p.options.dtype, DType::kBFloat16);
  EXPECT_EQ(p.options.redop, RedOp::kMax);
  EXPECT_EQ(p.options.root, 1);
  EXPECT_EQ(p.options.ngpus, 2);

  p = Parse({"--launch-latency", "-n", "2000"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_TRUE(p.options.launch_latency);
  EXPECT_TRUE(p.options.iters_given);
  EXPECT_EQ(p.options.iters, 2000);
}

TEST(NcclPeerParse, OpLists) {
  ParsedArgs p =
      Parse({"all_reduce,alltoall", "--ops", "sendrecv,all_reduce", "gather"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.options.ops, (std::vector<Op>{Op::kAllReduce, Op::kAllToAll,
                                            Op::kSendRecv, Op::kGather}));
  p = Parse({"--ops=all"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_TRUE(p.options.ops.empty());
  EXPECT_NE(Parse({"allgatherv"}).error.find("unknown op 'allgatherv'"),
            std::string::npos);
}

TEST(NcclPeerParse, StepBytesWithoutFactor) {
  const ParsedArgs p = Parse({"-b", "1M", "-e", "4M", "-i", "1M"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.options.step_factor, 0);
  EXPECT_EQ(p.options.step_bytes, kMiB);
}

TEST(NcclPeerParse, Errors) {
  const std::vector<std::vector<std::string>> bad = {
      {"-x"},
      {"--bogus", "1"},
      {"-b"},
      {"-b", "zero"},
      {"-b", "0"},
      {"-b", "1M", "-e", "1K"},
      {"-f", "1"},
      {"-f", "x"},
      {"-i", "0"},
      {"-n", "0"},
      {"-w", "-1"},
      {"-a", "4"},
      {"-d", "fp128"},
      {"-o", "xor"},
      {"-G", "-1"},
      {"-g", "0"},
      {"--comm-blocking", "2"},
      {"--csv", ""},
      {"--launch-latency=1"},
      {"-r", "-1"},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_FALSE(Parse(args).error.empty()) << joined;
  }
  EXPECT_NE(Parse({"-x"}).error.find("unknown option -x"), std::string::npos);
  EXPECT_TRUE(Parse({"-h"}).help);
  EXPECT_TRUE(Parse({"-b", "8", "--help"}).help);
}

Row SampleRow(Op op) {
  Row row;
  row.op = op;
  row.bytes = 32;
  row.count = 4;
  row.root = 1;
  row.time_us[0] = 12.345;
  row.time_us[1] = 11.5;
  row.algbw[0] = 0.0026;
  row.algbw[1] = 0.0028;
  row.busbw[0] = 0.0013;
  row.busbw[1] = 0.0014;
  return row;
}

TEST(NcclPeerCsv, SameColumnsAsCcctlBench) {
  // client/ccctl/bench.cc's header, byte for byte.
  EXPECT_EQ(CsvHeader(),
            "op,size,count,type,redop,root,time_us,algbw,busbw,wrong,"
            "ip_time_us,ip_algbw,ip_busbw,ip_wrong,e2e_us,op_min_us,"
            "op_max_us\n");
  // Ops without a reduce op or a root say so as nccl-tests does.
  EXPECT_EQ(CsvLine(SampleRow(Op::kAllGather)),
            "all_gather,32,4,float32,none,-1,12.35,0.003,0.001,0,11.50,0.003,"
            "0.001,0,0.00,0.00,0.00\n");
  Row reduce = SampleRow(Op::kReduce);
  reduce.dtype = DType::kBFloat16;
  reduce.redop = RedOp::kMax;
  reduce.wrong[1] = 7;
  EXPECT_EQ(CsvLine(reduce),
            "reduce,32,4,bfloat16,max,1,12.35,0.003,0.001,0,11.50,0.003,"
            "0.001,7,0.00,0.00,0.00\n");
  const std::string header = CsvHeader();
  const std::string line = CsvLine(reduce);
  EXPECT_EQ(std::count(header.begin(), header.end(), ','),
            std::count(line.begin(), line.end(), ','));
}

TEST(NcclPeerCsv, PathPerOp) {
  EXPECT_EQ(CsvPath("/o/nccl_{op}.csv", Op::kReduceScatter),
            "/o/nccl_reduce_scatter.csv");
  EXPECT_EQ(CsvPath("/o/{op}/{op}.csv", Op::kAllToAll),
            "/o/alltoall/alltoall.csv");
  EXPECT_EQ(CsvPath("/o/all.csv", Op::kAllToAll), "/o/all.csv");
}

TEST(NcclPeerTable, ColumnsLineUpWithTheHeader) {
  Row row = SampleRow(Op::kAllReduce);
  row.bytes = 2 * kGiB;
  row.count = kGiB / 2;
  row.time_us[0] = 6325.85;
  row.algbw[0] = 339.48;
  row.busbw[0] = 169.74;
  const std::string line = TableLine(row);
  const std::string header = TableHeader();
  // The header's column-name line and a data line have the same width.
  const size_t names = header.find("#       size");
  ASSERT_NE(names, std::string::npos) << header;
  const size_t names_end = header.find('\n', names);
  const std::string names_line = header.substr(names, names_end - names);
  EXPECT_EQ(names_line.size() + 1, line.size()) << header << line;
  // Right edges of "busbw" (out of place) and its figure coincide.
  EXPECT_EQ(names_line.find("busbw") + 5, line.find("169.74") + 6)
      << header << line;
  EXPECT_EQ(names_line.find("algbw") + 5, line.find("339.48") + 6)
      << header << line;
  // "out-of-place" sits over the first block of figures.
  const size_t label = header.find("out-of-place");
  const size_t label_col = label - header.rfind('\n', label) - 1;
  EXPECT_GT(label_col, names_line.find("root") + 4);
  EXPECT_LT(label_col, names_line.find("#wrong"));
  EXPECT_NE(line.find("   N/A"), std::string::npos);  // not checked
  EXPECT_NE(line.find("float     sum      -1"), std::string::npos) << line;
  row.checked[0] = row.checked[1] = true;
  row.wrong[1] = 3;
  EXPECT_EQ(TableLine(row).find("N/A"), std::string::npos);
  EXPECT_NE(TableLine(row).find("      3\n"), std::string::npos);
  row.checked[1] = false;  // in place not checked: its column says so
  EXPECT_EQ(TableLine(row).substr(TableLine(row).size() - 4), "N/A\n");
}

TEST(NcclPeerTable, NumbersFitTheirColumns) {
  EXPECT_EQ(FitNumber(12.345, 7), "  12.35");
  EXPECT_EQ(FitNumber(123456.789, 7), " 123457");
  EXPECT_EQ(FitNumber(9999.99, 6), " 10000");
  EXPECT_EQ(FitNumber(1e9, 6), " 1e+09");
  EXPECT_EQ(FitNumber(1.5e12, 7), "1.5e+12");
  EXPECT_LE(FitNumber(339.477, 6).size(), 6u);
}

TEST(NcclPeerTable, AvgBusBwOverBothColumns) {
  std::vector<Row> rows(2);
  rows[0].busbw[0] = 1;
  rows[0].busbw[1] = 3;
  rows[1].busbw[0] = 5;
  rows[1].busbw[1] = 7;
  EXPECT_DOUBLE_EQ(AvgBusBw(rows), 4);
  EXPECT_DOUBLE_EQ(AvgBusBw({}), 0);
}

}  // namespace
}  // namespace ccl::peer
