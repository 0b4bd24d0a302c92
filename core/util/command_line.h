// Command-line set-up shared by kvserve, kvctl and kvmodel (header-only, so
// kvserve_core does not depend on absl flags): --help and --helpshort list
// only the program's own flags, --version prints its version and commit,
// and both exit 0.
#ifndef KVSERVE_CORE_UTIL_COMMAND_LINE_H_
#define KVSERVE_CORE_UTIL_COMMAND_LINE_H_

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kvserve {
namespace command_line_internal {

// This header's path relative to the source tree is core/util/...: the
// prefix before it is the source root, stripped from flag file names.
inline std::string SourcePath(absl::string_view file) {
  constexpr absl::string_view kThisFile = __FILE__;
  constexpr absl::string_view kRoot = kThisFile.substr(
      0, kThisFile.size() - sizeof("core/util/command_line.h") + 1);
  absl::ConsumePrefix(&file, kRoot);
  return std::string(file);
}

inline std::string& FlagPrefix() {
  static std::string prefix;
  return prefix;
}
inline std::string& VersionLine() {
  static std::string line;
  return line;
}

}  // namespace command_line_internal

// `usage` is the program's usage text; --help lists the flags defined in
// source files whose path (relative to the source tree) starts with
// `flag_prefix`, e.g. "server/".
inline void ConfigureCommandLine(absl::string_view program,
                                 absl::string_view usage,
                                 absl::string_view flag_prefix,
                                 absl::string_view version,
                                 absl::string_view commit) {
  namespace ci = command_line_internal;
  absl::SetProgramUsageMessage(usage);
  ci::FlagPrefix() = std::string(flag_prefix);
  ci::VersionLine() =
      absl::StrCat(program, " ", version, " (commit ", commit, ")\n");
  auto ours = [](absl::string_view file) {
    return absl::StartsWith(ci::SourcePath(file), ci::FlagPrefix());
  };
  absl::FlagsUsageConfig config;
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  config.normalize_filename = ci::SourcePath;
  config.version_string = [] { return ci::VersionLine(); };
  absl::SetFlagsUsageConfig(config);
}

// absl::ParseCommandLine, except that --help (and --helpfull, ...) exits 0
// as --version does: Abseil 20220623 exits 1 after printing help. nullopt
// when a usage flag was handled (its output printed): exit 0.
inline std::optional<std::vector<char*>> ParseCommandLine(int argc,
                                                          char** argv) {
  namespace fi = absl::flags_internal;
  std::vector<char*> rest = fi::ParseCommandLineImpl(
      argc, argv, fi::ArgvListAction::kRemoveParsedArgs,
      fi::UsageFlagsAction::kIgnoreUsage,
      fi::OnUndefinedFlag::kAbortIfUndefined);
  if (fi::HandleUsageFlags(std::cout, absl::ProgramUsageMessage()) != -1) {
    return std::nullopt;
  }
  return rest;
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_COMMAND_LINE_H_
