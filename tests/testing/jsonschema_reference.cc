#include "tests/testing/jsonschema_reference.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"

namespace kvserve::testing {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

std::string ScriptPath() {
  return (std::filesystem::path(__FILE__).parent_path() /
          "jsonschema_reference.py")
      .string();
}

}  // namespace

std::vector<std::filesystem::path> SharedJsonSchemas() {
  std::vector<std::filesystem::path> files;
  for (const auto& dir :
       std::filesystem::directory_iterator(SharedDir() + "/jsonschema")) {
    if (!dir.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
      if (f.path().extension() == ".json") files.push_back(f.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string JsonschemaUnavailable() {
  if (access(kPython, X_OK) != 0) return "no /usr/bin/python3";
  absl::StatusOr<CommandResult> r =
      RunCommand({kPython, "-c", "import jsonschema"}, absl::Seconds(60));
  if (!r.ok() || !r->status.success()) {
    return "/usr/bin/python3 cannot import jsonschema (Debian: "
           "python3-jsonschema)";
  }
  return "";
}

absl::StatusOr<std::vector<std::string>> ValidateWithJsonschema(
    const std::vector<SchemaCheck>& checks) {
  static std::atomic<int> next{0};
  const std::string base = absl::StrCat(
      ::testing::TempDir(), "jsonschema_reference_", getpid(), "_", next++);
  {
    std::ofstream in(base + ".in", std::ios::binary);
    for (const SchemaCheck& c : checks) {
      in << nlohmann::json{{"schema", c.schema}, {"instance", c.instance}}.dump(
                -1, ' ', false, nlohmann::json::error_handler_t::replace)
         << "\n";
    }
  }
  absl::StatusOr<CommandResult> r = RunCommand(
      {kPython, ScriptPath(), base + ".in", base + ".out"}, absl::Seconds(600));
  std::error_code ignored;
  std::filesystem::remove(base + ".in", ignored);
  if (!r.ok()) return r.status();
  if (!r->status.success()) {
    std::filesystem::remove(base + ".out", ignored);
    return absl::InternalError(
        absl::StrCat("jsonschema_reference.py failed: ", r->err));
  }
  std::vector<std::string> out;
  std::ifstream results(base + ".out", std::ios::binary);
  std::string line;
  while (std::getline(results, line)) {
    out.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  std::filesystem::remove(base + ".out", ignored);
  if (out.size() != checks.size()) {
    return absl::InternalError(absl::StrCat("jsonschema_reference.py answered ",
                                            out.size(), " of ", checks.size()));
  }
  return out;
}

}  // namespace kvserve::testing
