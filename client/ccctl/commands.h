// Registration of ccctl's subcommands. Each Add* function adds its commands
// to `app`; a command's callback stores its exit code in `exit_code`.
#pragma once

#include "CLI/CLI.hpp"
#include "client/ccctl/ccctl.h"

namespace ccl::ctl {

void AddStatusCommand(CLI::App& app, Globals& globals, int& exit_code);
void AddTensorCommands(CLI::App& app, Globals& globals, int& exit_code);
void AddOpCommands(CLI::App& app, Globals& globals, int& exit_code);
void AddBenchCommand(CLI::App& app, Globals& globals, int& exit_code);
void AddClusterCommands(CLI::App& app, Globals& globals, int& exit_code);
void AddRunCommand(CLI::App& app, Globals& globals, int& exit_code);
void AddCompletionCommand(CLI::App& app, int& exit_code);
void AddGroupCommands(CLI::App& app, Globals& globals, int& exit_code);
void AddDebugCommands(CLI::App& app, Globals& globals, int& exit_code);
// `ccctl debug trace`, under the debug command (client/ccctl/trace.cc).
void AddDebugTraceCommand(CLI::App& debug, Globals& globals, int& exit_code);
void AddHealthCommand(CLI::App& app, Globals& globals, int& exit_code);
void AddDoctorCommand(CLI::App& app, Globals& globals, int& exit_code);
void AddConsoleCommand(CLI::App& app, Globals& globals, int& exit_code);

// The groups table of `ccctl status` and `ccctl group ls`.
void PrintGroups(const RankResults<WorkerInfo>& infos);

}  // namespace ccl::ctl
