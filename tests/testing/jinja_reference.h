// Python's jinja2 as the reference for core/chat/jinja.h: templates rendered
// by tests/testing/jinja_reference.py in the environment Hugging Face
// transformers renders chat templates with, and our output compared with
// it byte for byte.
//
// The script runs under Debian's /usr/bin/python3 (python3-jinja2); the
// `python3` on PATH may be another interpreter without jinja2. One process
// renders every case of a call.
#ifndef KVSERVE_TESTS_TESTING_JINJA_REFERENCE_H_
#define KVSERVE_TESTS_TESTING_JINJA_REFERENCE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve::testing {

struct Jinja2Case {
  std::string source;
  // The render's variables, passed to Template.render() as keyword
  // arguments in this order.
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  int64_t now_unix_seconds = 0;  // strftime_now's clock
};

struct Jinja2Result {
  bool ok = false;
  std::string text;     // ok: the rendered text
  std::string error;    // !ok: "ExceptionType: message", or exactly the
                        // message given to raise_exception
  bool raised = false;  // !ok: the template called raise_exception
};

// Why the reference cannot run on this machine (no /usr/bin/python3, or no
// jinja2 it can import); nullopt when it can. Tests GTEST_SKIP with it.
std::optional<std::string> Jinja2Unavailable();

// Renders every case in one Python process, results in case order.
// INTERNAL when the script is missing, fails or answers malformed JSON.
absl::StatusOr<std::vector<Jinja2Result>> RenderWithJinja2(
    const std::vector<Jinja2Case>& cases);

// Success when the two are the same bytes; otherwise both texts (escaped,
// one line each), their lengths and the first differing byte offset.
::testing::AssertionResult SameBytes(std::string_view reference,
                                     std::string_view ours);

// `ours` judged against `reference`: the same text when the reference
// rendered; INVALID_ARGUMENT with exactly its message when the template
// raised; any failure when the reference failed otherwise.
::testing::AssertionResult AgreesWithJinja2(
    const Jinja2Result& reference, const absl::StatusOr<std::string>& ours);

// The result for a message: the text quoted and escaped, or the error.
std::string Describe(const Jinja2Result& result);

// `text` with control bytes, backslashes and quotes escaped C-style
// (UTF-8 kept), for failure messages.
std::string EscapeForMessage(std::string_view text);

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_JINJA_REFERENCE_H_
