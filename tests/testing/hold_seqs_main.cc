// A client that reserves sequence numbers and never sends them, then waits
// to be killed: what a script killed mid-loop leaves behind. Prints
// "reserved <first> <count> leased=<0|1>" once it holds them.
//
//   hold_seqs <coordinator address> <group> <count> [--no-lease]
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "client/internal/sequence_lease.h"
#include "coordinator/client/coordinator_client.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: hold_seqs ADDRESS GROUP COUNT [--no-lease]\n";
    return 2;
  }
  const bool leased = !(argc > 4 && std::string(argv[4]) == "--no-lease");
  auto coordinator = ccl::CoordinatorClient::Connect(
      argv[1], std::chrono::milliseconds(10000));
  ccl::client::internal::SequenceLease lease(coordinator->stub(),
                                             std::chrono::milliseconds(5000));
  ccl::v1::ReserveSequenceRequest request;
  request.set_group(argv[2]);
  request.set_count(std::atoll(argv[3]));
  if (leased) request.set_lease(lease.Id());
  auto reserved = coordinator->ReserveSequence(request);
  if (!reserved.ok()) {
    std::cerr << "hold_seqs: " << reserved.status() << std::endl;
    return 1;
  }
  std::cout << "reserved " << reserved->first() << " " << request.count()
            << " leased=" << (reserved->leased() ? 1 : 0) << std::endl;
  while (true) pause();
}
