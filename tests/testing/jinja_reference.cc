#include "tests/testing/jinja_reference.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/testing/golden_json.h"

namespace kvserve::testing {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

// The script sits beside this file in the source tree (__FILE__ is the
// absolute path CMake compiles it by).
std::string ScriptPath() {
  return (std::filesystem::path(__FILE__).parent_path() / "jinja_reference.py")
      .string();
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The exit code of `command` run by the shell, or -1 when it did not exit.
int RunShell(const std::string& command) {
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// Files for one run, removed when it ends.
class TempFiles {
 public:
  TempFiles() {
    static std::atomic<int> next{0};
    base_ = absl::StrCat(::testing::TempDir(), "jinja_reference_", getpid(),
                         "_", next++);
  }
  ~TempFiles() {
    for (const char* ext : {".in", ".out", ".err"}) {
      std::error_code ignored;
      std::filesystem::remove(base_ + ext, ignored);
    }
  }
  std::string in() const { return base_ + ".in"; }
  std::string out() const { return base_ + ".out"; }
  std::string err() const { return base_ + ".err"; }

 private:
  std::string base_;
};

}  // namespace

std::optional<std::string> Jinja2Unavailable() {
  static const std::optional<std::string> reason =
      []() -> std::optional<std::string> {
    if (access(kPython, X_OK) != 0) {
      return absl::StrCat(kPython, " is not installed");
    }
    const std::string probe = absl::StrCat(
        kPython, " -c 'import jinja2, jinja2.sandbox' >/dev/null 2>&1");
    if (RunShell(probe) != 0) {
      return absl::StrCat(kPython,
                          " cannot import jinja2 (Debian: python3-jinja2)");
    }
    return std::nullopt;
  }();
  return reason;
}

absl::StatusOr<std::vector<Jinja2Result>> RenderWithJinja2(
    const std::vector<Jinja2Case>& cases) {
  const std::string script = ScriptPath();
  struct stat st;
  if (stat(script.c_str(), &st) != 0) {
    return absl::InternalError(absl::StrCat("reference script ", script,
                                            " not found (run the tests from "
                                            "a build of this source tree)"));
  }
  nlohmann::ordered_json input = nlohmann::ordered_json::array();
  for (const Jinja2Case& c : cases) {
    input.push_back({{"template", c.source},
                     {"context", c.context},
                     {"now", c.now_unix_seconds}});
  }
  TempFiles files;
  {
    std::ofstream in(files.in(), std::ios::binary);
    in << input.dump();
    if (!in) return absl::InternalError("cannot write " + files.in());
  }
  const std::string command = absl::StrCat(
      kPython, " ", ShellQuote(script), " < ", ShellQuote(files.in()), " > ",
      ShellQuote(files.out()), " 2> ", ShellQuote(files.err()));
  const int code = RunShell(command);
  if (code != 0) {
    return absl::InternalError(
        absl::StrCat(script, " exited with ", code, ": ",
                     ReadWholeFile(files.err()).value_or("(no stderr)")));
  }
  const std::optional<std::string> out = ReadWholeFile(files.out());
  if (!out) return absl::InternalError("cannot read " + files.out());
  const nlohmann::ordered_json results =
      nlohmann::ordered_json::parse(*out, nullptr, /*allow_exceptions=*/false);
  if (results.is_discarded() || !results.is_array() ||
      results.size() != cases.size()) {
    return absl::InternalError(absl::StrCat(script, " answered no array of ",
                                            cases.size(),
                                            " results: ", out->substr(0, 200)));
  }
  std::vector<Jinja2Result> parsed;
  for (const nlohmann::ordered_json& r : results) {
    Jinja2Result result;
    if (r.contains("ok") && r["ok"].is_string()) {
      result.ok = true;
      result.text = r["ok"].get<std::string>();
    } else if (r.contains("error") && r["error"].is_string()) {
      result.error = r["error"].get<std::string>();
      result.raised = r.value("raised", false);
    } else {
      return absl::InternalError(
          absl::StrCat(script, " answered a malformed result: ", r.dump()));
    }
    parsed.push_back(std::move(result));
  }
  return parsed;
}

std::string EscapeForMessage(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += absl::StrFormat("\\x%02x", u);
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string Describe(const Jinja2Result& result) {
  if (!result.ok) return result.error;
  return absl::StrCat("\"", EscapeForMessage(result.text), "\"");
}

::testing::AssertionResult SameBytes(std::string_view reference,
                                     std::string_view ours) {
  if (reference == ours) return ::testing::AssertionSuccess();
  const size_t n = std::min(reference.size(), ours.size());
  size_t first = 0;
  while (first < n && reference[first] == ours[first]) ++first;
  // A window around the first difference, for long outputs.
  const size_t from = first < 24 ? 0 : first - 24;
  auto window = [&](std::string_view s) {
    return EscapeForMessage(s.substr(std::min(from, s.size()), 48));
  };
  return ::testing::AssertionFailure()
         << "first differing byte at offset " << first << " (reference "
         << reference.size() << " bytes, ours " << ours.size()
         << ")\n  near offset " << from << ":\n    reference: \""
         << window(reference) << "\"\n    ours:      \"" << window(ours)
         << "\"\n  reference: \"" << EscapeForMessage(reference)
         << "\"\n  ours:      \"" << EscapeForMessage(ours) << "\"";
}

::testing::AssertionResult AgreesWithJinja2(
    const Jinja2Result& reference, const absl::StatusOr<std::string>& ours) {
  if (reference.ok) {
    if (!ours.ok()) {
      return ::testing::AssertionFailure()
             << "jinja2 rendered \"" << EscapeForMessage(reference.text)
             << "\", ours failed: " << ours.status();
    }
    return SameBytes(reference.text, *ours);
  }
  if (ours.ok()) {
    return ::testing::AssertionFailure()
           << "jinja2 failed (" << reference.error << "), ours rendered \""
           << EscapeForMessage(*ours) << "\"";
  }
  if (reference.raised &&
      (ours.status().code() != absl::StatusCode::kInvalidArgument ||
       ours.status().message() != reference.error)) {
    return ::testing::AssertionFailure()
           << "the template raised \"" << EscapeForMessage(reference.error)
           << "\"; ours failed with " << ours.status()
           << " (want INVALID_ARGUMENT with exactly that message)";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvserve::testing
