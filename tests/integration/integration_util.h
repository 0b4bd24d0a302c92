// Shared pieces of the integration tests: a fixture that runs one real
// kvserve per test binary (per process: ctest runs each test in its own), a
// Generate helper, scratch files and API keys, a Prometheus text parser and
// a small JSON reader for kvctl's output.
#ifndef KVSERVE_TESTS_INTEGRATION_INTEGRATION_UTIL_H_
#define KVSERVE_TESTS_INTEGRATION_INTEGRATION_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "tests/testing/server_process.h"

namespace kvserve::testing {

// Flags every test server gets: one compute thread, so that two test
// binaries running side by side (ctest -j 2) do not oversubscribe two cores.
inline std::vector<std::string> TestServerFlags() { return {"--threads=1"}; }

// One kvserve and a connected Client shared by all tests of a suite.
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(TestServerFlags());
    if (!server.ok()) {
      *start_error_ = server.status().ToString();
      return;
    }
    server_ = server->release();
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(server_->grpc_address());
    if (!client.ok()) {
      *start_error_ = client.status().ToString();
      return;
    }
    client_ = client->release();
  }

  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(start_error_->empty()) << *start_error_;
    ASSERT_NE(client_, nullptr);
  }

  static ServerProcess& server() { return *server_; }
  static Client& client() { return *client_; }

 private:
  static inline ServerProcess* server_ = nullptr;
  static inline Client* client_ = nullptr;
  static inline std::string* start_error_ = new std::string();
};

// A client of `server` (its loopback address) with these options.
inline absl::StatusOr<std::unique_ptr<Client>> ConnectClient(
    const ServerProcess& server, const ConnectOptions& options = {}) {
  return Client::Connect(server.grpc_address(), options);
}

// Waits until the server's stderr contains `text`.
inline bool WaitForStderr(const ServerProcess& server, absl::string_view text,
                          absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!absl::StrContains(server.stderr_text(), text)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// A fresh directory under /tmp, removed with everything in it at the end.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/kvserve_test_XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Empty if mkdtemp failed.
  const std::string& path() const { return path_; }
  std::string File(absl::string_view name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

inline bool WriteTextFile(const std::string& path, absl::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out.flush());
}

// The hex SHA-256 of `key` as the README tells operators to make it:
// `printf %s KEY | sha256sum`. Empty on failure.
inline std::string Sha256Hex(absl::string_view key) {
  absl::StatusOr<CommandResult> result =
      RunCommand({"/bin/sh", "-c", "printf %s \"$KEY\" | sha256sum"},
                 absl::Seconds(10), {absl::StrCat("KEY=", key)});
  if (!result.ok() || !result->status.success()) return "";
  return std::string(result->out.substr(0, result->out.find(' ')));
}

// Everything one Generate streamed.
struct Generated {
  std::vector<int32_t> ids;
  std::string text;  // the pieces and the final message's held-back text
  v1::GenerateFinal final_message;
};

inline absl::StatusOr<Generated> GenerateAll(Client& client,
                                             const v1::GenerateRequest& request,
                                             const CallOptions& options = {}) {
  Generated out;
  absl::StatusOr<v1::GenerateFinal> final_message = client.Generate(
      request,
      [&](const v1::GeneratedToken& token) {
        out.ids.push_back(token.token_id());
        out.text += token.text();
        return true;
      },
      options);
  if (!final_message.ok()) return final_message.status();
  out.final_message = *std::move(final_message);
  out.text += out.final_message.text();
  return out;
}

// A greedy request that ignores EOS, so it always yields `max_tokens` tokens.
inline v1::GenerateRequest GreedyRequest(int32_t max_tokens) {
  v1::GenerateRequest request;
  request.set_max_tokens(max_tokens);
  request.mutable_sampling()->set_temperature(0);
  request.set_ignore_eos(true);
  return request;
}

inline void SetTokens(const std::vector<int32_t>& ids, v1::Input* input) {
  input->mutable_tokens()->mutable_ids()->Assign(ids.begin(), ids.end());
}

// --- Prometheus text exposition -------------------------------------------

// The sum of the samples of `name` (exact name, any labels) whose label set
// contains every string of `label_parts` (e.g. "method=\"Generate\"").
// nullopt when no sample matches.
inline std::optional<double> MetricSum(
    absl::string_view exposition, absl::string_view name,
    const std::vector<std::string>& label_parts = {}) {
  std::optional<double> sum;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    if (!absl::StartsWith(line, name)) continue;
    absl::string_view rest = line.substr(name.size());
    absl::string_view labels;
    if (!rest.empty() && rest[0] == '{') {
      const size_t close = rest.find('}');
      if (close == absl::string_view::npos) continue;
      labels = rest.substr(0, close + 1);
      rest = rest.substr(close + 1);
    }
    if (rest.empty() || rest[0] != ' ') continue;  // a longer metric name
    bool match = true;
    for (const std::string& part : label_parts) {
      match = match && absl::StrContains(labels, part);
    }
    if (!match) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(rest, ' ', absl::SkipEmpty());
    double value = 0;
    if (fields.empty() || !absl::SimpleAtod(fields[0], &value)) continue;
    sum = sum.value_or(0) + value;
  }
  return sum;
}

// True when the exposition declares the metric family (a "# TYPE" line).
inline bool HasMetricFamily(absl::string_view exposition,
                            absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() >= 3 && fields[0] == "#" && fields[1] == "TYPE" &&
        fields[2] == name) {
      return true;
    }
  }
  return false;
}

// --- JSON (enough for kvctl's output) --------------------------------------

struct Json;
using JsonArray = std::vector<Json>;
using JsonObjectMap = std::map<std::string, Json>;

// A parsed JSON value. Numbers keep their text so integers can be told apart.
struct Json {
  std::variant<std::nullptr_t, bool, std::string, JsonArray, JsonObjectMap>
      value;
  bool is_number = false;  // value holds the number's text

  bool is_string() const {
    return !is_number && std::holds_alternative<std::string>(value);
  }
  bool is_object() const {
    return std::holds_alternative<JsonObjectMap>(value);
  }
  bool is_integer() const {
    return is_number && std::get<std::string>(value).find_first_of(".eE") ==
                            std::string::npos;
  }
  const std::string& str() const { return std::get<std::string>(value); }
  const JsonObjectMap& object() const { return std::get<JsonObjectMap>(value); }
  const JsonArray& array() const { return std::get<JsonArray>(value); }
  double number() const { return std::strtod(str().c_str(), nullptr); }
  int64_t integer() const { return std::strtoll(str().c_str(), nullptr, 10); }
  bool has(const std::string& key) const {
    return is_object() && object().count(key) > 0;
  }
  const Json& operator[](const std::string& key) const {
    return object().at(key);
  }
};

class JsonParser {
 public:
  // The one JSON value in `text` (surrounding whitespace allowed).
  static std::optional<Json> Parse(absl::string_view text) {
    JsonParser parser(text);
    std::optional<Json> value = parser.Value();
    parser.SkipSpace();
    if (!value.has_value() || parser.pos_ != text.size()) return std::nullopt;
    return value;
  }

 private:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
  }
  bool Consume(absl::string_view token) {
    if (!absl::StartsWith(text_.substr(pos_), token)) return false;
    pos_ += token.size();
    return true;
  }

  std::optional<Json> Value() {
    SkipSpace();
    if (pos_ >= text_.size()) return std::nullopt;
    const char c = text_[pos_];
    Json json;
    if (c == '{') return Object();
    if (c == '[') return Array();
    if (c == '"') {
      std::optional<std::string> s = String();
      if (!s.has_value()) return std::nullopt;
      json.value = *std::move(s);
      return json;
    }
    if (Consume("true")) return Json{true, false};
    if (Consume("false")) return Json{false, false};
    if (Consume("null")) return Json{nullptr, false};
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           absl::string_view("+-0123456789.eE").find(text_[pos_]) !=
               absl::string_view::npos) {
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    json.value = std::string(text_.substr(start, pos_ - start));
    json.is_number = true;
    double unused;
    if (!absl::SimpleAtod(json.str(), &unused)) return std::nullopt;
    return json;
  }

  std::optional<Json> Object() {
    ++pos_;  // '{'
    JsonObjectMap map;
    SkipSpace();
    if (Consume("}")) return Json{std::move(map), false};
    while (true) {
      SkipSpace();
      std::optional<std::string> key = String();
      if (!key.has_value()) return std::nullopt;
      SkipSpace();
      if (!Consume(":")) return std::nullopt;
      std::optional<Json> value = Value();
      if (!value.has_value() || map.count(*key) > 0) return std::nullopt;
      map.emplace(*std::move(key), *std::move(value));
      SkipSpace();
      if (Consume("}")) return Json{std::move(map), false};
      if (!Consume(",")) return std::nullopt;
    }
  }

  std::optional<Json> Array() {
    ++pos_;  // '['
    JsonArray array;
    SkipSpace();
    if (Consume("]")) return Json{std::move(array), false};
    while (true) {
      std::optional<Json> value = Value();
      if (!value.has_value()) return std::nullopt;
      array.push_back(*std::move(value));
      SkipSpace();
      if (Consume("]")) return Json{std::move(array), false};
      if (!Consume(",")) return std::nullopt;
    }
  }

  // A string literal, unescaped to UTF-8. Raw control characters and
  // invalid escapes are errors, as in RFC 8259.
  std::optional<std::string> String() {
    if (!Consume("\"")) return std::nullopt;
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return std::nullopt;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          std::optional<uint32_t> cp = Hex4();
          if (!cp.has_value()) return std::nullopt;
          if (*cp >= 0xD800 && *cp <= 0xDBFF) {  // a surrogate pair
            if (!Consume("\\u")) return std::nullopt;
            std::optional<uint32_t> low = Hex4();
            if (!low.has_value() || *low < 0xDC00 || *low > 0xDFFF) {
              return std::nullopt;
            }
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00);
          }
          AppendUtf8(*cp, &out);
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::optional<uint32_t> Hex4() {
    if (pos_ + 4 > text_.size()) return std::nullopt;
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        value |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        value |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return std::nullopt;
      }
    }
    return value;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_INTEGRATION_INTEGRATION_UTIL_H_
