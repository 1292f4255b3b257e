#include "server/comm/gloo/gloo_communicator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/elapsed.h"
#include "common/huge_pages.h"
#include "common/status_macros.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/gather.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/scatter.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "server/comm/gloo/gloo_store.h"
#include "server/comm/gloo/reduce_kernels.h"
#include "server/comm/op_fingerprint.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;
// Calls f(std::type_identity<T>{}) with an unsigned type of the dtype's width:
// Gloo needs only the element size; the arithmetic is the kernel's
// (reduce_kernels.h).
template <typename F>
void WithElementOfSize(size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(std::type_identity<uint8_t>{});
    case 2:
      return f(std::type_identity<uint16_t>{});
    case 4:
      return f(std::type_identity<uint32_t>{});
    default:
      return f(std::type_identity<uint64_t>{});
  }
}

// What a Gloo reduction is given: narrow elements in 4-byte groups where
// the size allows (Gloo's ring cuts and sends the buffer by element, and
// measured, 2-byte elements took 5-20% longer than float32's at the same
// bytes), and the kernel wrapped to reduce a group's elements.
struct GlooReduction {
  size_t element_size;
  size_t elements;
  std::function<void(void*, const void*, const void*, size_t)> reduce;
};
GlooReduction ForGloo(DType dtype, ReduceOp reduce_op, size_t count) {
  const size_t size = DTypeSize(dtype);
  const size_t group = size < 4 && (count * size) % 4 == 0 ? 4 / size : 1;
  const ReduceKernel kernel = ReduceKernelFor(dtype, reduce_op);
  return {size * group, count / group,
          [kernel, group](void* out, const void* a, const void* b, size_t k) {
            kernel(out, a, b, k * group);
          }};
}

// Slots of send/recv live apart from those Gloo's collectives derive from
// their tags; a send at seq k pairs with the recv at seq k.
uint64_t P2PSlot(int64_t seq) {
  return (uint64_t{0xCC} << 56) |
         (static_cast<uint64_t>(seq) & ((uint64_t{1} << 48) - 1));
}

bool LooksLikeTimeout(const std::string& message) {
  return absl::StrContains(message, "Timed out") ||
         absl::StrContains(message, "timed out") ||
         absl::StrContains(message, "Timeout") ||
         absl::StrContains(message, "timeout");
}

// One slot per step of a ring reduce_scatter: 36 bits of seq, 20 of step.
uint64_t RingSlot(int64_t seq, int step) {
  return (uint64_t{0xCF} << 56) |
         ((static_cast<uint64_t>(seq) & ((uint64_t{1} << 36) - 1)) << 20) |
         (static_cast<uint64_t>(step) & ((uint64_t{1} << 20) - 1));
}

uint64_t P2PHeaderSlot(int64_t seq) {
  return (uint64_t{0xCD} << 56) |
         (static_cast<uint64_t>(seq) & ((uint64_t{1} << 48) - 1));
}
uint64_t P2PReplySlot(int64_t seq) {
  return (uint64_t{0xCE} << 56) |
         (static_cast<uint64_t>(seq) & ((uint64_t{1} << 48) - 1));
}

// Gloo reports a failed system call inside its TCP transport (epoll_ctl on
// the socket of a pair a peer closed, a write to a dead peer) with
// GLOO_ENFORCE, like a broken invariant; its message carries the source
// file. One from the transport is the network's doing: UNAVAILABLE, and the
// communicator is poisoned, as for an IoException. Elsewhere it is a bug:
// INTERNAL (and still poisoned: peers may be mid-op).
absl::Status FromEnforce(const std::string& where, const char* what) {
  const std::string message = absl::StrCat(where, ": ", what);
  if (absl::StrContains(what, "gloo/transport/")) {
    return absl::UnavailableError(
        absl::StrCat(message, " (the connection to a peer failed)"));
  }
  return absl::InternalError(message);
}

}  // namespace

void GlooCommunicator::FreeDeleter::operator()(std::byte* p) const {
  std::free(p);
}

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    int rank, int size, const std::string& data_host, const std::string& prefix,
    KvStore& store, std::chrono::milliseconds timeout) {
  const std::string where =
      absl::StrCat("gloo rendezvous of rank ", rank, "/", size, " under '",
                   prefix, "' (data host ", data_host, ")");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = data_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // The passive side of each pair waits five times the context's timeout
    // for its peer to connect. Once every address is in the store that
    // takes milliseconds; a peer that gave up on this generation (its own
    // connect was refused by a cut link, or it moved on to the next one)
    // never connects, and waiting 5 x the op timeout for it (5 minutes by
    // default) held this rank out of every later generation. Bounded here
    // by the op timeout, at most kMaxConnectWait; the store's waits share
    // the timeout between them (GlooKvStore), and ops pass their own.
    constexpr std::chrono::milliseconds kMaxConnectWait(10000);
    const auto connect_wait = std::min(timeout, kMaxConnectWait);
    context->setTimeout(
        std::max(connect_wait / 5, std::chrono::milliseconds(1)));
    GlooKvStore kv(store, timeout);
    gloo::rendezvous::PrefixStore prefixed(prefix, kv);
    context->connectFullMesh(prefixed, device);
    context->setTimeout(timeout);
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(
        rank, size, data_host, prefix, &store, std::move(context)));
  } catch (const gloo::IoException& e) {
    const std::string message = absl::StrCat(where, ": ", e.what());
    if (LooksLikeTimeout(e.what())) return absl::DeadlineExceededError(message);
    return absl::UnavailableError(message);
  } catch (const gloo::EnforceNotMet& e) {
    return FromEnforce(where, e.what());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(where, ": out of memory"));
  } catch (const std::exception& e) {
    const std::string message = absl::StrCat(where, ": ", e.what());
    if (LooksLikeTimeout(e.what())) return absl::DeadlineExceededError(message);
    return absl::UnavailableError(message);
  }
}

GlooCommunicator::GlooCommunicator(int rank, int size, std::string data_host,
                                   std::string prefix, KvStore* store,
                                   std::shared_ptr<gloo::Context> context)
    : rank_(rank),
      size_(size),
      data_host_(std::move(data_host)),
      prefix_(std::move(prefix)),
      store_(store),
      context_(std::move(context)) {}

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicator::Split(
    const std::vector<int>& members, const std::string& name,
    std::chrono::milliseconds timeout) {
  auto it = std::find(members.begin(), members.end(), rank_);
  if (it == members.end()) return std::unique_ptr<Communicator>();
  auto child = Create(static_cast<int>(it - members.begin()),
                      static_cast<int>(members.size()), data_host_,
                      absl::StrCat(prefix_, "/group/", name), *store_, timeout);
  if (!child.ok()) return child.status();
  return std::unique_ptr<Communicator>(*std::move(child));
}

GlooCommunicator::~GlooCommunicator() = default;

absl::Status GlooCommunicator::Supports(OpKind kind, DType dtype,
                                        ReduceOp reduce_op) const {
  if (IsReduction(kind) && ReduceKernelFor(dtype, reduce_op) == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "gloo cannot reduce ", std::string(DTypeName(dtype)), " (",
        std::string(OpKindName(kind)), "); use float32 or the NCCL backend"));
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Health() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

absl::Status GlooCommunicator::AbortedUnder(const std::string& where,
                                            const char* what) const {
  // Launch checked the communicator was whole, so a broken one here was
  // aborted by another thread while the op ran (a re-form, an agreement
  // that timed out). Its connections were closed under Gloo, whose event
  // loop then fails an enforce (epoll_ctl on a closed descriptor, found by
  // tests/chaos): that is the abort, with the abort's code and reason, not
  // an internal error of this worker.
  if (absl::Status aborted = Health(); !aborted.ok()) {
    return absl::Status(
        aborted.code(),
        absl::StrCat(where, ": the communicator was aborted under the op (",
                     aborted.message(), "); gloo said: ", what));
  }
  return absl::InternalError(absl::StrCat(where, ": ", what));
}

void GlooCommunicator::Abort(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.ok()) broken_ = why;
    if (closed_) return;
    closed_ = true;
  }
  // Closing this rank's connections is what ncclCommAbort does for NCCL:
  // peers still blocked in an op with this rank fail at once with a closed
  // connection instead of waiting for their own timeout.
  try {
    context_->closeConnections();
  } catch (const std::exception& e) {
    std::cerr << "[ccl gloo] closing connections: " << e.what() << std::endl;
  }
}

std::byte* GlooCommunicator::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    scratch_.reset();
    scratch_bytes_ = 0;
    const size_t rounded = (bytes + 63) / 64 * 64;
    auto* p = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
    if (p == nullptr) throw std::bad_alloc();
    AdviseHugePages(p, rounded);
    scratch_.reset(p);
    scratch_bytes_ = rounded;
  }
  return scratch_.get();
}

absl::StatusOr<std::unique_ptr<CommWork>> GlooCommunicator::Launch(
    const BoundOp& op) {
  if (absl::Status health = Health(); !health.ok()) {
    return absl::UnavailableError(
        absl::StrCat("gloo communicator is broken by an earlier error: ",
                     health.ToString()));
  }
  if (absl::Status s = Supports(op.kind, op.dtype, op.reduce_op); !s.ok()) {
    return s;
  }
  // Worded only on an error: this runs for every op of a plan.
  auto where = [&] {
    return absl::StrCat("gloo ", std::string(OpKindName(op.kind)), " seq ",
                        op.seq, " at rank ", rank_, "/", size_);
  };
  const Clock::time_point start = Clock::now();
  absl::Status status;
  bool poison = false;
  try {
    status = Run(op);
  } catch (const gloo::IoException& e) {
    poison = true;
    const std::string message = absl::StrCat(where(), ": ", e.what());
    status = LooksLikeTimeout(e.what()) ? absl::DeadlineExceededError(message)
                                        : absl::UnavailableError(message);
  } catch (const gloo::Exception& e) {
    poison = true;
    status = absl::UnavailableError(absl::StrCat(where(), ": ", e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    // Aborted under the op (a re-form): the abort's reason. Otherwise the
    // transport failed or Gloo hit a bug (FromEnforce); poisoned either way.
    if (!Health().ok()) {
      status = AbortedUnder(where(), e.what());
    } else {
      poison = true;
      status = FromEnforce(where(), e.what());
    }
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError(
        absl::StrCat(where(), ": out of host memory for a staging buffer"));
  } catch (const std::exception& e) {
    status = AbortedUnder(where(), e.what());
  }
  if (poison) Abort(status);
  return std::make_unique<CompletedWork>(std::move(status), MicrosSince(start));
}

absl::Status GlooCommunicator::Run(const BoundOp& op) {
  if (op.kind == OpKind::kNop) return absl::OkStatus();
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) return SendRecv(op);
  // Gloo trusts the sizes it is given: a peer's larger message ends the
  // process from inside its transport thread. So even a client that asked
  // to skip the check gets one here.
  if (op.agreement == Agreement::kSkip) {
    CCL_RETURN_IF_ERROR(AgreeCollective(op));
  }
  // Gloo rejects non-positive timeouts in some options.
  const std::chrono::milliseconds timeout =
      std::max(op.timeout, std::chrono::milliseconds(1));
  if (op.kind == OpKind::kBarrier) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(static_cast<uint32_t>(op.seq));
    opts.setTimeout(timeout);
    gloo::barrier(opts);
    return absl::OkStatus();
  }
  // Empty tensors move nothing; every rank agrees on that without talking.
  if (op.count == 0) return absl::OkStatus();
  switch (op.kind) {
    case OpKind::kAllReduce:
      AllReduce(op, timeout);
      break;
    case OpKind::kBroadcast:
      Broadcast(op, timeout);
      break;
    case OpKind::kReduce:
      Reduce(op, timeout);
      break;
    case OpKind::kAllGather:
      AllGather(op, timeout);
      break;
    case OpKind::kReduceScatter:
      RingReduceScatter(op, timeout);
      break;
    case OpKind::kGather:
      Gather(op, timeout);
      break;
    case OpKind::kScatter:
      Scatter(op, timeout);
      break;
    case OpKind::kAllToAll:
      AllToAll(op, timeout);
      break;
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kBarrier:
    case OpKind::kNop:
      break;
  }
  return absl::OkStatus();
}

std::unique_ptr<gloo::transport::UnboundBuffer> GlooCommunicator::Unbound(
    const void* data, size_t bytes) {
  return context_->createUnboundBuffer(const_cast<void*>(data), bytes);
}

void GlooCommunicator::AllReduce(const BoundOp& op,
                                 std::chrono::milliseconds timeout) {
  const size_t n = static_cast<size_t>(op.count);
  const void* in = op.input;
  if (op.reduce_op == ReduceOp::kPremulSum) {
    ScaleElements(op.dtype, op.output, in, n, op.premul_scale);
    in = op.output;
  }
  const GlooReduction reduction = ForGloo(op.dtype, op.reduce_op, n);
  WithElementOfSize(reduction.element_size, [&](auto t) {
    using T = typename decltype(t)::type;
    gloo::AllreduceOptions opts(context_);
    if (in != op.output) {
      opts.setInput<T>(static_cast<T*>(const_cast<void*>(in)),
                       reduction.elements);
    }
    opts.setOutput<T>(static_cast<T*>(op.output), reduction.elements);
    opts.setReduceFunction(reduction.reduce);
    opts.setTag(static_cast<uint32_t>(op.seq));
    opts.setTimeout(timeout);
    gloo::allreduce(opts);
  });
  if (op.reduce_op == ReduceOp::kAvg) {
    DivideElements(op.dtype, op.output, n, size_);
  }
}

void GlooCommunicator::Broadcast(const BoundOp& op,
                                 std::chrono::milliseconds timeout) {
  const size_t bytes = static_cast<size_t>(op.count) * DTypeSize(op.dtype);
  gloo::BroadcastOptions opts(context_);
  if (rank_ == op.root && op.input != op.output) {
    opts.setInput<uint8_t>(Unbound(op.input, bytes));
  }
  opts.setOutput<uint8_t>(Unbound(op.output, bytes));
  opts.setRoot(op.root);
  opts.setTag(static_cast<uint32_t>(op.seq));
  opts.setTimeout(timeout);
  gloo::broadcast(opts);
}

void GlooCommunicator::Reduce(const BoundOp& op,
                              std::chrono::milliseconds timeout) {
  const size_t n = static_cast<size_t>(op.count);
  const size_t bytes = n * DTypeSize(op.dtype);
  // Off the root Gloo uses its output as workspace; pointing it at
  // scratch leaves the caller's tensors on non-root ranks unchanged.
  void* work = rank_ == op.root ? op.output : Scratch(bytes);
  // Gloo's reduce accumulates into the output buffer of every rank
  // without first copying the input there, so a separate input would
  // mix in whatever the buffer held (stale scratch off the root).
  // Running in place on a copy avoids that.
  if (op.reduce_op == ReduceOp::kPremulSum) {
    ScaleElements(op.dtype, work, op.input, n, op.premul_scale);
  } else if (op.input != work) {
    std::memcpy(work, op.input, bytes);
  }
  const GlooReduction reduction = ForGloo(op.dtype, op.reduce_op, n);
  WithElementOfSize(reduction.element_size, [&](auto t) {
    using T = typename decltype(t)::type;
    gloo::ReduceOptions opts(context_);
    opts.setOutput<T>(static_cast<T*>(work), reduction.elements);
    opts.setRoot(op.root);
    opts.setReduceFunction(reduction.reduce);
    opts.setTag(static_cast<uint32_t>(op.seq));
    opts.setTimeout(timeout);
    gloo::reduce(opts);
  });
  if (op.reduce_op == ReduceOp::kAvg && rank_ == op.root) {
    DivideElements(op.dtype, work, n, size_);
  }
}

void GlooCommunicator::AllGather(const BoundOp& op,
                                 std::chrono::milliseconds timeout) {
  const size_t bytes = static_cast<size_t>(op.count) * DTypeSize(op.dtype);
  const size_t world = static_cast<size_t>(size_);
  gloo::AllgatherOptions opts(context_);
  if (static_cast<const std::byte*>(op.input) !=
      static_cast<std::byte*>(op.output) + rank_ * bytes) {
    opts.setInput<uint8_t>(Unbound(op.input, bytes));
  }
  opts.setOutput<uint8_t>(Unbound(op.output, world * bytes));
  opts.setTag(static_cast<uint32_t>(op.seq));
  opts.setTimeout(timeout);
  gloo::allgather(opts);
}

void GlooCommunicator::Gather(const BoundOp& op,
                              std::chrono::milliseconds timeout) {
  const size_t bytes = static_cast<size_t>(op.count) * DTypeSize(op.dtype);
  const size_t world = static_cast<size_t>(size_);
  gloo::GatherOptions opts(context_);
  opts.setInput<uint8_t>(Unbound(op.input, bytes));
  // In place at the root Gloo copies the root's chunk onto itself, which
  // is harmless.
  if (rank_ == op.root) {
    opts.setOutput<uint8_t>(Unbound(op.output, world * bytes));
  }
  opts.setRoot(op.root);
  opts.setTag(static_cast<uint32_t>(op.seq));
  opts.setTimeout(timeout);
  gloo::gather(opts);
}

void GlooCommunicator::Scatter(const BoundOp& op,
                               std::chrono::milliseconds timeout) {
  const size_t bytes = static_cast<size_t>(op.count) * DTypeSize(op.dtype);
  const size_t world = static_cast<size_t>(size_);
  gloo::ScatterOptions opts(context_);
  if (rank_ == op.root) {
    auto* in_bytes = static_cast<const std::byte*>(op.input);
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> inputs;
    inputs.reserve(world);
    for (size_t j = 0; j < world; ++j) {
      inputs.push_back(Unbound(in_bytes + j * bytes, bytes));
    }
    opts.setInputs<uint8_t>(std::move(inputs));
  }
  opts.setOutput<uint8_t>(Unbound(op.output, bytes));
  opts.setRoot(op.root);
  opts.setTag(static_cast<uint32_t>(op.seq));
  opts.setTimeout(timeout);
  gloo::scatter(opts);
}

void GlooCommunicator::AllToAll(const BoundOp& op,
                                std::chrono::milliseconds timeout) {
  const size_t bytes = static_cast<size_t>(op.count) * DTypeSize(op.dtype);
  const size_t world = static_cast<size_t>(size_);
  // Gloo receives into chunks it may not have sent yet, so in place needs
  // a staged copy of the input.
  const void* in = op.input;
  if (op.input == op.output) {
    std::byte* scratch = Scratch(world * bytes);
    std::memcpy(scratch, op.input, world * bytes);
    in = scratch;
  }
  gloo::AlltoallOptions opts(context_);
  opts.setInput<uint8_t>(Unbound(in, world * bytes));
  opts.setOutput<uint8_t>(Unbound(op.output, world * bytes));
  opts.setTag(static_cast<uint32_t>(op.seq));
  opts.setTimeout(timeout);
  gloo::alltoall(opts);
}

absl::Status GlooCommunicator::AgreeCollective(const BoundOp& op) {
  std::vector<OpFingerprint> all(static_cast<size_t>(size_));
  const OpFingerprint mine = FingerprintOf(op, rank_);
  CCL_RETURN_IF_ERROR(AllGatherHost(
      &mine, all.data(), sizeof(mine),
      Clock::now() + std::max(op.timeout, std::chrono::milliseconds(1))));
  return JudgeCollective(*this, op.seq, all, Withdrawals::kNone);
}

absl::Status GlooCommunicator::GuardExchange(
    const std::function<void()>& exchange) {
  absl::Status status;
  try {
    exchange();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    status = LooksLikeTimeout(e.what()) ? absl::DeadlineExceededError(e.what())
                                        : absl::UnavailableError(e.what());
  } catch (const gloo::Exception& e) {
    status = absl::UnavailableError(e.what());
  } catch (const gloo::EnforceNotMet& e) {
    // As in Launch: aborted under the exchange (a re-form) says so.
    status = Health().ok() ? FromEnforce("gloo host exchange", e.what())
                           : AbortedUnder("gloo host exchange", e.what());
  } catch (const std::exception& e) {
    status = AbortedUnder("gloo host exchange", e.what());
  }
  Abort(status);
  return status;
}

absl::Status GlooCommunicator::AllGatherHost(const void* mine, void* all,
                                             size_t bytes,
                                             Clock::time_point deadline) {
  const auto timeout =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                   deadline - Clock::now()),
               std::chrono::milliseconds(1));
  // Apart from the ops' tags (their seqs, below 2^31 in practice).
  const uint32_t tag = 0x80000000u | (collective_exchanges_++ & 0x7fffffffu);
  return GuardExchange([&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput<uint8_t>(reinterpret_cast<uint8_t*>(const_cast<void*>(mine)),
                           bytes);
    opts.setOutput<uint8_t>(static_cast<uint8_t*>(all),
                            bytes * static_cast<size_t>(size_));
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allgather(opts);
  });
}

absl::Status GlooCommunicator::ExchangeHost(int peer, const void* mine,
                                            void* theirs, size_t bytes,
                                            Clock::time_point deadline) {
  const auto timeout =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                   deadline - Clock::now()),
               std::chrono::milliseconds(1));
  const uint64_t count = pair_exchanges_[peer]++;
  // One slot per direction of this pair's count-th exchange.
  auto slot = [count](int from, int to) {
    return (uint64_t{0xCF} << 56) | (uint64_t{from < to ? 1u : 0u} << 47) |
           (count & ((uint64_t{1} << 47) - 1));
  };
  // Copies Gloo can keep if the exchange times out (it keeps posted
  // buffers): the communicator is broken then and holds them to the end.
  auto out = std::make_shared<std::vector<std::byte>>(bytes);
  auto in = std::make_shared<std::vector<std::byte>>(bytes);
  std::memcpy(out->data(), mine, bytes);
  std::shared_ptr<gloo::transport::UnboundBuffer> out_buffer =
      context_->createUnboundBuffer(out->data(), bytes);
  std::shared_ptr<gloo::transport::UnboundBuffer> in_buffer =
      context_->createUnboundBuffer(in->data(), bytes);
  absl::Status status = GuardExchange([&] {
    in_buffer->recv(peer, slot(peer, rank_));
    out_buffer->send(peer, slot(rank_, peer));
    in_buffer->waitRecv(timeout);
    out_buffer->waitSend(timeout);
  });
  if (!status.ok()) {
    abandoned_.push_back(in);
    abandoned_.push_back(out);
    abandoned_.push_back(in_buffer);
    abandoned_.push_back(out_buffer);
    return status;
  }
  std::memcpy(theirs, in->data(), bytes);
  return absl::OkStatus();
}

// W - 1 steps around the ring: each sends one chunk's partial result to the
// next rank while receiving another from the previous one, then adds its own
// input chunk to what came. After the last step a rank holds its own chunk
// reduced over every rank, having sent and received (W - 1) / W of its
// input, as NCCL's ring does (the all_reduce this replaced moved twice that
// and needed W chunks of scratch).
//
// Step s sends chunk (rank - 1 - s) mod W and receives chunk
// (rank - 2 - s) mod W; the last receives the rank's own chunk. Partial
// results alternate between two scratch slots: one received into while the
// other is sent.
void GlooCommunicator::RingReduceScatter(const BoundOp& op,
                                         std::chrono::milliseconds timeout) {
  const size_t count = static_cast<size_t>(op.count);
  const size_t chunk = count * DTypeSize(op.dtype);
  const int world = size_;
  const ReduceKernel kernel = ReduceKernelFor(op.dtype, op.reduce_op);
  const bool premul = op.reduce_op == ReduceOp::kPremulSum;
  const size_t input_bytes = static_cast<size_t>(world) * chunk;
  std::byte* scratch = Scratch((premul ? input_bytes : 0) + 2 * chunk);
  const std::byte* input = static_cast<const std::byte*>(op.input);
  if (premul) {
    ScaleElements(op.dtype, scratch, input, world * count, op.premul_scale);
    input = scratch;
    scratch += input_bytes;
  }
  auto* output = static_cast<std::byte*>(op.output);
  auto chunk_of = [&](int j) {
    return input + static_cast<size_t>(((j % world) + world) % world) * chunk;
  };
  if (world == 1) {
    if (output != chunk_of(0)) std::memmove(output, chunk_of(0), chunk);
  } else {
    std::byte* slots[2] = {scratch, scratch + chunk};
    std::shared_ptr<gloo::transport::UnboundBuffer> buffers[3] = {
        context_->createUnboundBuffer(slots[0], chunk),
        context_->createUnboundBuffer(slots[1], chunk),
        context_->createUnboundBuffer(
            const_cast<std::byte*>(chunk_of(rank_ - 1)), chunk)};
    const int next = (rank_ + 1) % world;
    const int previous = (rank_ + world - 1) % world;
    try {
      for (int step = 0; step < world - 1; ++step) {
        auto& receive = buffers[step % 2];
        auto& send = step == 0 ? buffers[2] : buffers[(step + 1) % 2];
        const uint64_t slot = RingSlot(op.seq, step);
        receive->recv(previous, slot);
        send->send(next, slot);
        receive->waitRecv(timeout);
        send->waitSend(timeout);
        std::byte* partial = slots[step % 2];
        const std::byte* own = chunk_of(rank_ - 2 - step);
        kernel(step == world - 2 ? output : partial, partial, own, count);
      }
    } catch (...) {
      // Gloo keeps what was posted: the buffers outlive this call.
      for (auto& buffer : buffers) abandoned_.push_back(buffer);
      throw;
    }
  }
  if (op.reduce_op == ReduceOp::kAvg) {
    DivideElements(op.dtype, output, count, size_);
  }
}

absl::Status GlooCommunicator::SendRecv(const BoundOp& op) {
  const bool sending = op.kind == OpKind::kSend;
  const size_t bytes = static_cast<size_t>(op.count) * DTypeSize(op.dtype);
  const std::chrono::milliseconds timeout =
      std::max(op.timeout, std::chrono::milliseconds(1));
  const std::string what =
      absl::StrCat(sending ? "send to rank " : "recv from rank ", op.peer,
                   " at seq ", op.seq);
  // Header from the sender, reply from the receiver: each learns the other's
  // view before data moves, and a lone send or recv times out on a few
  // bytes rather than with a buffer Gloo may still write into.
  auto mine = std::make_unique<OpFingerprint>(FingerprintOf(op, rank_));
  auto theirs = std::make_unique<std::byte[]>(sizeof(OpFingerprint));
  auto mine_buffer =
      context_->createUnboundBuffer(mine.get(), sizeof(OpFingerprint));
  auto theirs_buffer =
      context_->createUnboundBuffer(theirs.get(), sizeof(OpFingerprint));
  const uint64_t send_slot =
      sending ? P2PHeaderSlot(op.seq) : P2PReplySlot(op.seq);
  const uint64_t recv_slot =
      sending ? P2PReplySlot(op.seq) : P2PHeaderSlot(op.seq);
  theirs_buffer->recv(op.peer, recv_slot);
  mine_buffer->send(op.peer, send_slot);
  try {
    theirs_buffer->waitRecv(timeout);
  } catch (const gloo::IoException& e) {
    // Gloo keeps the posted recv and send: their memory must outlive this
    // call (the communicator is broken from here on anyway).
    abandoned_.push_back(std::shared_ptr<void>(std::move(theirs)));
    abandoned_.push_back(std::shared_ptr<void>(std::move(mine)));
    abandoned_.push_back(std::shared_ptr<void>(std::move(theirs_buffer)));
    abandoned_.push_back(std::shared_ptr<void>(std::move(mine_buffer)));
    if (!LooksLikeTimeout(e.what())) throw;
    absl::Status status = absl::DeadlineExceededError(absl::StrCat(
        what, ": rank ", op.peer, " posted no matching ",
        sending ? "recv" : "send", " within ", timeout.count(),
        " ms (it may have run a different op at this seq, or none)"));
    // Gloo closes the pair on a timeout: later ops need a new communicator.
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.ok()) broken_ = status;
    return status;
  }
  mine_buffer->waitSend(timeout);
  OpFingerprint peer_view;
  std::memcpy(&peer_view, theirs.get(), sizeof(peer_view));
  CCL_RETURN_IF_ERROR(ComparePointToPoint(op.seq, *mine, peer_view));
  if (bytes == 0) return absl::OkStatus();
  auto data = context_->createUnboundBuffer(
      sending ? const_cast<void*>(op.input) : op.output, bytes);
  if (sending) {
    data->send(op.peer, P2PSlot(op.seq));
    data->waitSend(timeout);
  } else {
    data->recv(op.peer, P2PSlot(op.seq));
    data->waitRecv(timeout);
  }
  return absl::OkStatus();
}

}  // namespace ccl
