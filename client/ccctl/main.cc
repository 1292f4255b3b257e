// ccctl: drive a collective-communication cluster from a terminal or a
// script. Exit codes: 0 success, 1 an RPC or op failed, 2 bad usage, 3 the
// doctor found something.
#include <iostream>

#include "CLI/CLI.hpp"
#include "client/ccctl/commands.h"

int main(int argc, char** argv) {
  using namespace ccl::ctl;
  CLI::App app{"ccctl: drive a collective-communication cluster"};
  app.require_subcommand(1);
  // Global options may also follow the subcommand (`ccctl status -o json`).
  app.fallthrough();
  Globals globals;
  int exit_code = kExitOk;
  app.add_option("--coordinator", globals.coordinator,
                 "coordinator HOST:PORT (env CCCTL_COORDINATOR; default: the "
                 "local cluster's, else 127.0.0.1:29400)");
  app.add_option("-o,--output", globals.output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--timeout", globals.timeout, "per request, e.g. 3s, 500ms")
      ->capture_default_str();
  app.add_option("--group", globals.group,
                 "the group ops run on (see `ccctl group create`); rank "
                 "options stay world ranks")
      ->capture_default_str();
  AddSecurityFlags(app, globals.security, ccl::SecurityFlagSet::kClient);

  AddStatusCommand(app, globals, exit_code);
  AddTensorCommands(app, globals, exit_code);
  AddOpCommands(app, globals, exit_code);
  AddGroupCommands(app, globals, exit_code);
  AddDebugCommands(app, globals, exit_code);
  AddHealthCommand(app, globals, exit_code);
  AddBenchCommand(app, globals, exit_code);
  AddDoctorCommand(app, globals, exit_code);
  AddConsoleCommand(app, globals, exit_code);
  AddClusterCommands(app, globals, exit_code);
  AddRunCommand(app, globals, exit_code);
  AddCompletionCommand(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  return exit_code;
}
