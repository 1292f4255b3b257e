// What every daemon sets up first, before it starts a thread: a peer, the
// network or a client must never end the process, and whatever ends it anyway
// must leave its reason in the log.
#pragma once

#include <signal.h>

namespace ccl {

// - SIGPIPE is ignored. Gloo writes to its TCP pairs with plain write(2), so
//   a peer that died (kill -9, or a SIGSTOPped worker whose peers gave up and
//   closed their ends) would otherwise kill the survivor silently; ignored,
//   the write fails with EPIPE and becomes the op's error.
// - Fatal signals (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGTRAP) print
//   the signal and a symbolized stack to stderr (abseil's failure signal
//   handler), then take the default action, so a core dump still happens.
// - std::terminate (an exception that escaped a thread, Gloo's EnforceNotMet
//   on a transport thread among them) prints the exception's type and
//   message before aborting.
// `argv0` finds the binary's symbols. Call once, early in main, on the main
// thread: dispositions are process-wide and threads started later inherit
// them.
void PrepareDaemonProcess(const char* argv0);

// Blocks SIGTERM and SIGINT in the calling thread and returns that set, for
// one thread to sigwait on. Called before any thread exists, every thread
// (gRPC's included) inherits the mask, so the signals are only ever taken
// by that sigwait.
sigset_t BlockStopSignals();

}  // namespace ccl
