// The request's JSON reaches the chat template as sent (issue 37 item 5):
// the six templates of ../shared/templates served by the real server with
// --chat_template, rendered through HTTP /apply-template from OpenAI-shaped
// requests (tools in OpenAI's key order, an assistant turn whose content
// is null and whose call's arguments are a JSON string, a tool reply), and
// compared byte for byte with Python's jinja2 rendering what transformers'
// callers pass: the same keys in the same order, null as None, arguments
// parsed to an object.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/integration/integration_util.h"
#include "tests/testing/golden_json.h"
#include "tests/testing/jinja_reference.h"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"

namespace kvserve::testing {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr char kTools[] = R"([
  {"type": "function",
   "function": {
     "name": "get_weather",
     "description": "Get the current weather in a city (°C or °F).",
     "parameters": {
       "type": "object",
       "properties": {
         "city": {"type": "string", "description": "City name"},
         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
       },
       "required": ["city"]
     }
   }}
])";

// An OpenAI client's conversation: the call's arguments are a JSON string.
constexpr char kSent[] = R"([
  {"role": "system", "content": "You are brief."},
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null,
   "tool_calls": [{"id": "call12345", "type": "function",
                   "function": {"name": "get_weather",
                                "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
  {"role": "tool", "content": "20", "name": "get_weather",
   "tool_call_id": "call12345"},
  {"role": "user", "content": "Thanks"}
])";

// What transformers' callers hand the template for kSent: arguments as
// the object they encode, content None; keys as ChatTemplate orders them
// (role, content, name, tool_call_id, tool_calls).
constexpr char kPassed[] = R"([
  {"role": "system", "content": "You are brief."},
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null,
   "tool_calls": [{"id": "call12345", "type": "function",
                   "function": {"name": "get_weather",
                                "arguments": {"city": "Paris", "unit": "celsius"}}}]},
  {"role": "tool", "content": "20", "name": "get_weather",
   "tool_call_id": "call12345"},
  {"role": "user", "content": "Thanks"}
])";

struct Reply {
  int status = 0;
  OrderedJson json;
};

Reply PostJson(int port, const std::string& path, const OrderedJson& body) {
  ScratchDir dir;
  const std::string file = dir.File("body.json");
  EXPECT_TRUE(WriteTextFile(file, body.dump()));
  absl::StatusOr<CommandResult> r =
      RunCommand({"/usr/bin/curl", "-s", "-w", "\n%{http_code}", "-H",
                  "Content-Type: application/json", "--data-binary", "@" + file,
                  absl::StrCat("http://127.0.0.1:", port, path)});
  Reply reply;
  if (!r.ok()) {
    ADD_FAILURE() << r.status();
    return reply;
  }
  const size_t last = r->out.rfind('\n');
  if (last == std::string::npos ||
      !absl::SimpleAtoi(r->out.substr(last + 1), &reply.status)) {
    ADD_FAILURE() << "curl: " << r->out << r->err;
    return reply;
  }
  reply.json = OrderedJson::parse(r->out.substr(0, last), nullptr, false);
  return reply;
}

// The server's rendering as ChatTemplate's: the prompt, or the error.
absl::StatusOr<std::string> Rendered(const Reply& reply) {
  if (reply.status == 200) return reply.json["prompt"].get<std::string>();
  std::string message = reply.json.is_object()
                            ? reply.json["error"]["message"].get<std::string>()
                            : "no JSON";
  if (reply.status == 400) return absl::InvalidArgumentError(message);
  return absl::InternalError(absl::StrCat(reply.status, " ", message));
}

std::unique_ptr<ServerProcess> Serve(const std::string& template_path) {
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--http_listen=127.0.0.1:0");
  flags.push_back("--chat_template=" + template_path);
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(HttpTemplateReferenceTest, TheRequestsJsonReachesTheTemplateAsSent) {
  if (std::optional<std::string> why = Jinja2Unavailable())
    GTEST_SKIP() << *why;
  const std::string dir = SharedDir() + "/templates";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is missing";

  // The bos and eos text the server hands every template.
  ScratchDir scratch;
  const std::string probe = scratch.File("probe.jinja");
  ASSERT_TRUE(WriteTextFile(probe, "{{ bos_token }}\n{{ eos_token }}"));
  std::unique_ptr<ServerProcess> probing = Serve(probe);
  ASSERT_NE(probing, nullptr);
  const Reply special =
      PostJson(probing->http_port(), "/apply-template",
               {{"messages", {{{"role", "user"}, {"content", "x"}}}}});
  ASSERT_EQ(special.status, 200) << special.json.dump();
  const std::string both = special.json["prompt"];
  const std::string bos = both.substr(0, both.find('\n'));
  const std::string eos = both.substr(both.find('\n') + 1);

  const OrderedJson tools = OrderedJson::parse(kTools);
  const OrderedJson sent = OrderedJson::parse(kSent);
  const OrderedJson passed = OrderedJson::parse(kPassed);
  // The whole conversation with tools; without the system turn; the
  // assistant's null content alone, without tools.
  struct Case {
    std::string name;
    OrderedJson sent, passed, tools;
  };
  std::vector<Case> cases = {
      {"tools and a call", sent, passed, tools},
      {"no system turn", OrderedJson(sent.begin() + 1, sent.end()),
       OrderedJson(passed.begin() + 1, passed.end()), tools},
      {"null content",
       OrderedJson::array(
           {sent[1], {{"role", "assistant"}, {"content", nullptr}}, sent[4]}),
       OrderedJson::array({passed[1],
                           {{"role", "assistant"}, {"content", nullptr}},
                           passed[4]}),
       nullptr},
  };
  int templates = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    SCOPED_TRACE(entry.path().filename().string());
    std::optional<std::string> source = ReadWholeFile(entry.path().string());
    ASSERT_TRUE(source.has_value());
    std::unique_ptr<ServerProcess> server = Serve(entry.path().string());
    ASSERT_NE(server, nullptr);
    std::vector<Jinja2Case> reference;
    for (const Case& c : cases) {
      OrderedJson context = OrderedJson::object();
      context["messages"] = c.passed;
      context["add_generation_prompt"] = true;
      context["bos_token"] = bos;
      context["eos_token"] = eos;
      context["tools"] = c.tools;
      context["documents"] = nullptr;
      reference.push_back(Jinja2Case{.source = *source, .context = context});
    }
    absl::StatusOr<std::vector<Jinja2Result>> expected =
        RenderWithJinja2(reference);
    ASSERT_TRUE(expected.ok()) << expected.status();
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(cases[i].name);
      OrderedJson request = {{"messages", cases[i].sent},
                             {"add_generation_prompt", true}};
      if (!cases[i].tools.is_null()) request["tools"] = cases[i].tools;
      const Reply reply =
          PostJson(server->http_port(), "/apply-template", request);
      EXPECT_TRUE(AgreesWithJinja2((*expected)[i], Rendered(reply)))
          << Describe((*expected)[i]);
    }
  }
  EXPECT_EQ(templates, 6);
}

}  // namespace
}  // namespace kvserve::testing
