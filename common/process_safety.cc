#include "common/process_safety.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <typeinfo>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/stacktrace.h"
#include "absl/debugging/symbolize.h"

namespace ccl {
namespace {

// abseil's own unwinder on x86-64 follows frame pointers, which Debian's
// libraries (libc, Gloo) and our optimised code do not keep: it stops after
// one frame. glibc's backtrace() unwinds with the DWARF tables instead, also
// across the signal frame, so the log shows the whole stack of the thread
// that failed.
int UnwindWithBacktrace(void** pcs, int* sizes, int max_depth, int skip_count,
                        const void* /*ucontext*/, int* min_dropped_frames) {
  constexpr int kMaxFrames = 128;
  void* frames[kMaxFrames];
  const int n = backtrace(frames, kMaxFrames);
  int out = 0;
  // +1: this function's own frame.
  for (int i = skip_count + 1; i < n && out < max_depth; ++i) {
    pcs[out] = frames[i];
    if (sizes != nullptr) sizes[out] = 0;
    ++out;
  }
  if (min_dropped_frames != nullptr) *min_dropped_frames = 0;
  return out;
}

// Runs on whichever thread let an exception escape; stderr is the log.
[[noreturn]] void LogUncaughtAndAbort() {
  if (std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "*** uncaught exception %s: %s ***\n",
                   typeid(e).name(), e.what());
    } catch (...) {
      std::fprintf(stderr, "*** uncaught exception of a non-std type ***\n");
    }
  } else {
    std::fprintf(stderr,
                 "*** std::terminate called without an exception ***\n");
  }
  std::fflush(stderr);
  // The failure signal handler prints the stack of this thread.
  std::abort();
}

}  // namespace

void PrepareDaemonProcess(const char* argv0) {
  signal(SIGPIPE, SIG_IGN);
  absl::InitializeSymbolizer(argv0);
  // backtrace() loads libgcc's unwinder on its first call, which allocates:
  // done here, not first inside a signal handler.
  void* warm_up[2];
  backtrace(warm_up, 2);
  absl::SetStackUnwinder(UnwindWithBacktrace);
  // Afterwards the signal's default action runs (a core dump, and the exit
  // status a supervisor reads), not an exit of our own.
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  std::set_terminate(LogUncaughtAndAbort);
}

sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

}  // namespace ccl
