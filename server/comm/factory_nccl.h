// The build-dependent half of the factory (factory_cuda.cc with CUDA,
// factory_cpu.cc without): only factory.cc includes this.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/comm/factory.h"
#include "server/comm/kv_store.h"

namespace ccl {

// The bare NCCL communicator for `config.device` (a CUDA device); the
// agreement check is added by MakeCommunicator. UNIMPLEMENTED in a build
// without CUDA.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    const CommunicatorConfig& config, KvStore& store);

// The PCI bus id of CUDA device `index`, as NCCL reads it; UNIMPLEMENTED in
// a build without CUDA.
absl::StatusOr<std::string> CudaBusId(int index);

}  // namespace ccl
