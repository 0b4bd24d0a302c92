// build/kvctl as a user runs it, against a real kvserve: output formats,
// flags before or after the command, exit codes and error messages.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

class KvctlTest : public SharedServerTest {
 protected:
  // Runs kvctl with --addr of the shared server first.
  CommandResult Kvctl(const std::vector<std::string>& args) {
    return KvctlAt(server().grpc_address(), args);
  }

  CommandResult KvctlAt(const std::string& address,
                        const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/kvctl", "--addr=" + address};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<CommandResult> result = RunCommand(argv, absl::Seconds(30));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
  }
};

// The parsed lines of `generate --json`: tokens, then the final object.
struct JsonStream {
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  std::string text;
  std::optional<Json> final_object;
};

JsonStream ParseJsonStream(const std::string& out) {
  JsonStream stream;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::optional<Json> json = JsonParser::Parse(line);
    EXPECT_TRUE(json.has_value()) << "not JSON: " << line;
    if (!json.has_value()) continue;
    EXPECT_TRUE(json->is_object()) << line;
    EXPECT_FALSE(stream.final_object.has_value())
        << "a line after the final object: " << line;
    if (json->has("token_id")) {
      EXPECT_TRUE((*json)["token_id"].is_integer()) << line;
      EXPECT_TRUE((*json)["text"].is_string()) << line;
      stream.ids.push_back(static_cast<int32_t>((*json)["token_id"].integer()));
      stream.pieces.push_back((*json)["text"].str());
      stream.text += (*json)["text"].str();
    } else {
      stream.final_object = *json;
    }
  }
  return stream;
}

TEST_F(KvctlTest, HealthPrintsServingAndExitsZero) {
  CommandResult result = Kvctl({"health"});
  EXPECT_EQ(result.status.code, 0) << result.err;
  EXPECT_EQ(result.out, "SERVING\n");
}

TEST_F(KvctlTest, HealthOfAnUnreachableServerFailsFast) {
  const absl::Time start = absl::Now();
  // Nothing listens on port 1.
  CommandResult result = KvctlAt("127.0.0.1:1", {"health"});
  EXPECT_TRUE(result.status.exited);
  EXPECT_EQ(result.status.code, 3) << result.err;  // UNAVAILABLE
  EXPECT_EQ(result.out, "NOT_SERVING\n");
  EXPECT_TRUE(absl::StartsWith(result.err, "kvctl: UNAVAILABLE: "))
      << result.err;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Issue 35 item 6: --help states exit 2 for NOT_SERVING. A server that got
// SIGTERM says NOT_SERVING while its queued requests run to their end.
TEST_F(KvctlTest, HealthOfADrainingServerIsNotServingAndExitsTwo) {
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--max_running=1");  // the requests below queue
  flags.push_back("--shutdown_grace_seconds=60");
  auto server = ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = *Client::Connect((*server)->grpc_address());
  // Seconds of work: 16 requests of 500 tokens, one at a time.
  std::atomic<int> tokens{0};
  std::vector<std::thread> streams;
  for (int i = 0; i < 16; ++i) {
    streams.emplace_back([&] {
      v1::GenerateRequest request = GreedyRequest(500);
      request.mutable_prompt()->set_text("Once upon a time");
      (void)client->Generate(request, [&](const v1::GeneratedToken&) {
        tokens.fetch_add(1);
        return true;
      });
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (tokens.load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE((*server)->SendSignal(SIGTERM).ok());
  while (!absl::StrContains((*server)->stderr_text(), "draining") &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  CommandResult result = KvctlAt((*server)->grpc_address(), {"health"});
  const int still_running = 16 * 500 - tokens.load();
  EXPECT_EQ(result.status.code, 2) << result.err;
  EXPECT_EQ(result.out, "NOT_SERVING\n");
  EXPECT_EQ(result.err, "");
  EXPECT_GT(still_running, 0) << "the requests ended before the check";
  ASSERT_TRUE((*server)->SendSignal(SIGKILL).ok());  // no need to wait
  for (std::thread& t : streams) t.join();
}

TEST_F(KvctlTest, GenerateJsonMatchesTheClientsTokens) {
  CommandResult result =
      Kvctl({"generate", "--json", "--max_tokens=8", "--ignore_eos",
             "--temperature=0", "Once upon a time"});
  ASSERT_EQ(result.status.code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(Lines(result.out).size(), 9u) << result.out;
  JsonStream stream = ParseJsonStream(result.out);
  ASSERT_TRUE(stream.final_object.has_value()) << result.out;
  const Json& final_object = *stream.final_object;
  EXPECT_EQ(final_object["finish_reason"].str(), "length");
  EXPECT_EQ(final_object["usage"]["generated_tokens"].integer(), 8);
  EXPECT_TRUE(final_object["usage"]["prompt_tokens"].is_integer());
  EXPECT_GT(final_object["usage"]["prompt_tokens"].integer(), 1);
  EXPECT_TRUE(final_object["usage"]["cached_prompt_tokens"].is_integer());
  for (const char* timing :
       {"queue_seconds", "prefill_seconds", "decode_seconds"}) {
    ASSERT_TRUE(final_object["timings"].has(timing)) << timing;
    EXPECT_TRUE(final_object["timings"][timing].is_number);
    EXPECT_GE(final_object["timings"][timing].number(), 0);
  }

  v1::GenerateRequest request = GreedyRequest(8);
  request.mutable_prompt()->set_text("Once upon a time");
  absl::StatusOr<Generated> expected = GenerateAll(client(), request);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(stream.ids, expected->ids);
  EXPECT_EQ(stream.text + (final_object.has("text") ? final_object["text"].str()
                                                    : std::string()),
            expected->text);
}

TEST_F(KvctlTest, PlainGeneratePrintsTheTextAndFlagsMayComeFirst) {
  CommandResult after = Kvctl({"generate", "--max_tokens=6", "--ignore_eos",
                               "--temperature=0", "The", "dog"});
  ASSERT_EQ(after.status.code, 0) << after.err;
  CommandResult before = Kvctl({"--max_tokens=6", "--ignore_eos",
                                "--temperature=0", "generate", "The dog"});
  ASSERT_EQ(before.status.code, 0) << before.err;
  EXPECT_EQ(after.out, before.out);

  v1::GenerateRequest request = GreedyRequest(6);
  request.mutable_prompt()->set_text("The dog");
  absl::StatusOr<Generated> expected = GenerateAll(client(), request);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(after.out, expected->text + "\n");
}

TEST_F(KvctlTest, StopFlagsAreRepeatableAndCommaSeparated) {
  // Greedy output without stops, then stop at a piece of it.
  CommandResult plain = Kvctl({"generate", "--json", "--max_tokens=24",
                               "--ignore_eos", "--temperature=0", "Stop me"});
  ASSERT_EQ(plain.status.code, 0) << plain.err;
  JsonStream stream = ParseJsonStream(plain.out);
  ASSERT_EQ(stream.ids.size(), 24u);
  // A stop string: the text of one token from the middle of the output.
  std::string stop;
  for (size_t i = 12; i < 23 && stop.empty(); ++i) {
    const std::string& piece = stream.pieces[i];
    if (!absl::StripAsciiWhitespace(piece).empty() &&
        piece.find_first_of(",\\") == std::string::npos) {
      stop = piece;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no token text to stop at: " << plain.out;

  for (const std::vector<std::string>& stop_flags :
       std::vector<std::vector<std::string>>{
           {"--stop=" + stop},
           {"--stop=\xe2\x88\x85never", "--stop", stop},
           {"--stop=never,again," + stop},
       }) {
    std::vector<std::string> args = {"generate",        "--json",
                                     "--max_tokens=24", "--ignore_eos",
                                     "--temperature=0", "Stop me"};
    args.insert(args.begin() + 1, stop_flags.begin(), stop_flags.end());
    CommandResult stopped = Kvctl(args);
    ASSERT_EQ(stopped.status.code, 0) << stopped.err;
    JsonStream result = ParseJsonStream(stopped.out);
    ASSERT_TRUE(result.final_object.has_value()) << stopped.out;
    EXPECT_EQ((*result.final_object)["finish_reason"].str(), "stop")
        << "stop \"" << stop << "\" via " << absl::StrJoin(stop_flags, " ")
        << "\n"
        << stopped.out;
    EXPECT_LT(result.ids.size(), 24u);
  }
}

TEST_F(KvctlTest, SessionLifecycle) {
  CommandResult created = Kvctl({"session", "create", "Hello", "world"});
  ASSERT_EQ(created.status.code, 0) << created.err;
  std::vector<std::string> lines = Lines(created.out);
  ASSERT_FALSE(lines.empty());
  const std::string id = lines.back();
  EXPECT_GE(id.size(), 16u) << created.out;

  CommandResult got = Kvctl({"session", "get", id});
  ASSERT_EQ(got.status.code, 0) << got.err;
  EXPECT_TRUE(absl::StrContains(got.out, "session_id: " + id)) << got.out;

  CommandResult got_json = Kvctl({"--json", "session", "get", id});
  ASSERT_EQ(got_json.status.code, 0) << got_json.err;
  std::optional<Json> session = JsonParser::Parse(got_json.out);
  ASSERT_TRUE(session.has_value()) << got_json.out;
  EXPECT_EQ((*session)["session_id"].str(), id);
  ASSERT_TRUE((*session)["num_tokens"].is_integer()) << got_json.out;
  const int64_t tokens = (*session)["num_tokens"].integer();
  EXPECT_GT(tokens, 1);

  CommandResult generated =
      Kvctl({"generate", "--session=" + id, "--json", "--max_tokens=3",
             "--ignore_eos", ", said the"});
  ASSERT_EQ(generated.status.code, 0) << generated.err;
  JsonStream stream = ParseJsonStream(generated.out);
  ASSERT_TRUE(stream.final_object.has_value());
  EXPECT_EQ(stream.ids.size(), 3u);
  EXPECT_EQ((*stream.final_object)["session_id"].str(), id);
  EXPECT_GE((*stream.final_object)["usage"]["cached_prompt_tokens"].integer(),
            tokens - 1);

  CommandResult listed = Kvctl({"session", "list"});
  ASSERT_EQ(listed.status.code, 0) << listed.err;
  EXPECT_TRUE(absl::StrContains(listed.out, id)) << listed.out;

  CommandResult deleted = Kvctl({"session", "delete", id});
  EXPECT_EQ(deleted.status.code, 0) << deleted.err;
  CommandResult gone = Kvctl({"session", "get", id});
  EXPECT_EQ(gone.status.code, 5) << gone.err;  // NOT_FOUND
  EXPECT_TRUE(absl::StartsWith(gone.err, "kvctl: NOT_FOUND: ")) << gone.err;
  EXPECT_EQ(gone.out, "");
}

TEST_F(KvctlTest, InvalidArgumentHasItsOwnExitCode) {
  CommandResult result = Kvctl({"generate", "--max_tokens=0", "hi"});
  EXPECT_EQ(result.status.code, 6) << result.err;
  EXPECT_TRUE(absl::StartsWith(result.err, "kvctl: INVALID_ARGUMENT: "))
      << result.err;
  EXPECT_EQ(result.out, "");
  CommandResult negative = Kvctl({"generate", "--temperature=-1", "hi"});
  EXPECT_EQ(negative.status.code, 6) << negative.err;
}

TEST_F(KvctlTest, UsageErrorsExitOne) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"frobnicate"},
           {"session", "get"},
           {"session", "truncate", "x"},
           {"append", "text"},
           {"generate"},
           {"generate", "--logit_bias=5", "x"},
           {"--no_such_flag", "info"}}) {
    CommandResult result = Kvctl(args);
    EXPECT_EQ(result.status.code, 1)
        << absl::StrJoin(args, " ") << ": " << result.err;
    EXPECT_FALSE(result.err.empty());
  }
}

// Issue 37 item 6: kvctl passes the penalties and logit_bias; the server
// names a value out of range.
TEST_F(KvctlTest, GenerateTakesLogitBiasAndPenalties) {
  CommandResult greedy = Kvctl({"generate", "--json", "--max_tokens=1",
                                "--ignore_eos", "--temperature=0", "Once"});
  ASSERT_EQ(greedy.status.code, 0) << greedy.err;
  const int32_t first = ParseJsonStream(greedy.out).ids.at(0);
  // The greedy choice banned: another token comes first.
  CommandResult banned =
      Kvctl({"generate", "--json", "--max_tokens=1", "--ignore_eos",
             "--temperature=0", absl::StrCat("--logit_bias=", first, ":-100"),
             "--presence_penalty=0.5", "--repeat_penalty=1.1", "--min_p=0.01",
             "Once"});
  ASSERT_EQ(banned.status.code, 0) << banned.err;
  EXPECT_NE(ParseJsonStream(banned.out).ids.at(0), first);
  CommandResult bad =
      Kvctl({"generate", "--frequency_penalty=5", "--max_tokens=1", "Once"});
  EXPECT_EQ(bad.status.code, 6) << bad.err;  // INVALID_ARGUMENT
  EXPECT_TRUE(
      absl::StrContains(bad.err, "frequency_penalty must be in [-2, 2]"))
      << bad.err;
}

// Issue 37: --n asks for several choices; --json lines carry their index,
// each choice ends with its own final object; plain text prints them one
// after another.
TEST_F(KvctlTest, GenerateTakesSeveralChoices) {
  CommandResult result =
      Kvctl({"generate", "--json", "--n=3", "--max_tokens=4", "--ignore_eos",
             "--temperature=1", "--seed=8", "Once"});
  ASSERT_EQ(result.status.code, 0) << result.err;
  std::vector<int> tokens(3, 0), finals(3, 0);
  for (const std::string& line : Lines(result.out)) {
    std::optional<Json> json = JsonParser::Parse(line);
    ASSERT_TRUE(json.has_value() && json->has("index")) << line;
    const int64_t index = (*json)["index"].integer();
    ASSERT_TRUE(index >= 0 && index < 3) << line;
    if (json->has("token_id")) {
      EXPECT_EQ(finals[index], 0) << "a token after its final: " << line;
      ++tokens[index];
    } else {
      ++finals[index];
    }
  }
  EXPECT_EQ(tokens, (std::vector<int>{4, 4, 4})) << result.out;
  EXPECT_EQ(finals, (std::vector<int>{1, 1, 1})) << result.out;

  CommandResult text = Kvctl({"generate", "--n=2", "--max_tokens=2", "Once"});
  ASSERT_EQ(text.status.code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(text.out, "--- choice 0 ---\n")) << text.out;
  EXPECT_TRUE(absl::StrContains(text.out, "--- choice 1 ---\n")) << text.out;

  CommandResult bad = Kvctl({"generate", "--n=129", "Once"});
  EXPECT_EQ(bad.status.code, 6) << bad.err;  // INVALID_ARGUMENT
  EXPECT_TRUE(absl::StrContains(bad.err, "n must be in [0, 128]")) << bad.err;
}

// Issue 38 item 2: --grammar and --json_object constrain the output; a
// grammar that does not compile is the server's INVALID_ARGUMENT.
TEST_F(KvctlTest, GenerateFollowsAGrammarFile) {
  ScratchDir dir;
  const std::string grammar = dir.File("yes_no.gbnf");
  ASSERT_TRUE(WriteTextFile(grammar, "root ::= \"yes\" | \"no\"\n"));
  for (const char* seed : {"--seed=1", "--seed=2", "--seed=3"}) {
    CommandResult r = Kvctl({"generate", "--grammar=" + grammar, seed,
                             "--temperature=1", "--max_tokens=8", "Is it?"});
    ASSERT_EQ(r.status.code, 0) << r.err;
    EXPECT_TRUE(r.out == "yes\n" || r.out == "no\n") << r.out;
  }
  CommandResult json = Kvctl({"generate", "--json_object", "--seed=2",
                              "--temperature=1", "--max_tokens=200", "A cat:"});
  ASSERT_EQ(json.status.code, 0) << json.err;
  EXPECT_EQ(json.out.substr(0, 1), "{") << json.out;

  const std::string schema = dir.File("schema.json");
  ASSERT_TRUE(WriteTextFile(
      schema, R"({"type": "object", "properties": {"ok": {"type": "boolean"}},
                  "required": ["ok"], "additionalProperties": false})"));
  CommandResult structured =
      Kvctl({"generate", "--json_schema=" + schema, "--seed=4",
             "--temperature=1", "--max_tokens=40", "Status:"});
  ASSERT_EQ(structured.status.code, 0) << structured.err;
  EXPECT_TRUE(structured.out == "{\"ok\": true}\n" ||
              structured.out == "{\"ok\": false}\n" ||
              absl::StrContains(structured.out, "\"ok\""))
      << structured.out;

  ASSERT_TRUE(WriteTextFile(grammar, "root ::= yes\n"));
  CommandResult bad = Kvctl({"generate", "--grammar=" + grammar, "x"});
  EXPECT_EQ(bad.status.code, 6) << bad.err;  // INVALID_ARGUMENT
  EXPECT_TRUE(absl::StrContains(bad.err, "rule `yes` is used but never"))
      << bad.err;
  CommandResult both =
      Kvctl({"generate", "--grammar=" + grammar, "--json_object", "x"});
  EXPECT_EQ(both.status.code, 1) << both.err;
}

TEST_F(KvctlTest, InfoJsonMatchesTheClient) {
  CommandResult result = Kvctl({"info", "--json"});
  ASSERT_EQ(result.status.code, 0) << result.err;
  std::optional<Json> info = JsonParser::Parse(result.out);
  ASSERT_TRUE(info.has_value()) << result.out;
  absl::StatusOr<v1::ModelInfo> expected = client().GetModelInfo();
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ((*info)["n_heads"].integer(), expected->n_heads());
  EXPECT_EQ((*info)["n_kv_heads"].integer(), expected->n_kv_heads());
  EXPECT_TRUE((*info)["kv_cache_capacity_bytes"].is_integer());
  EXPECT_EQ((*info)["kv_cache_capacity_bytes"].integer(),
            expected->kv_cache_capacity_bytes());

  CommandResult text = Kvctl({"info"});
  ASSERT_EQ(text.status.code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(
      text.out, absl::StrCat("n_kv_heads: ", expected->n_kv_heads(), "\n")))
      << text.out;
  // The CPU the server computes on.
  EXPECT_FALSE(expected->cpu().empty());
  EXPECT_TRUE(absl::StrContains(text.out, "\ncpu: " + expected->cpu() + "\n"))
      << text.out;
  EXPECT_TRUE(absl::StrContains(text.out, "\nisa: " + expected->isa() + "\n"))
      << text.out;
  EXPECT_EQ((*info)["isa"].str(), expected->isa());
}

TEST_F(KvctlTest, HelpListsItsOwnFlagsAndExitsZero) {
  absl::StatusOr<CommandResult> result =
      RunCommand({BinDir() + "/kvctl", "--help"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->status.code, 0) << result->err;
  EXPECT_TRUE(absl::StrContains(result->out, "--addr")) << result->out;
  EXPECT_TRUE(absl::StrContains(result->out, "Server address")) << result->out;
  EXPECT_TRUE(absl::StrContains(result->out, "Flags from client/kvctl.cc"))
      << result->out;
  EXPECT_TRUE(absl::StrContains(result->out, "Exit status")) << result->out;
}

TEST_F(KvctlTest, TokenizeListsIdsAndPieces) {
  CommandResult result = Kvctl({"tokenize", "--json", "Hello world"});
  ASSERT_EQ(result.status.code, 0) << result.err;
  std::optional<Json> json = JsonParser::Parse(result.out);
  ASSERT_TRUE(json.has_value()) << result.out;
  v1::TokenizeRequest request;
  request.set_text("Hello world");
  absl::StatusOr<v1::TokenizeResponse> expected = client().Tokenize(request);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const JsonArray& ids = (*json)["token_ids"].array();
  ASSERT_EQ(ids.size(), static_cast<size_t>(expected->token_ids_size()));
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(ids[i].integer(), expected->token_ids(static_cast<int>(i)));
  }
}

// Ctrl-C during a stream cancels it: kvctl stops quickly with exit 130.
TEST_F(KvctlTest, InterruptCancelsTheStream) {
  const std::string out_file =
      absl::StrCat(::testing::TempDir(), "/kvctl_interrupt_", getpid());
  const std::string script =
      absl::StrCat("'", BinDir(), "/kvctl' --addr=", server().grpc_address(),
                   " generate --max_tokens=1000 --ignore_eos 'Keep going' > '",
                   out_file, "' & pid=$!; i=0; while [ ! -s '", out_file,
                   "' ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; "
                   "kill -INT $pid; wait $pid; echo $?");
  absl::StatusOr<CommandResult> result =
      RunCommand({"/bin/sh", "-c", script}, absl::Seconds(30));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->out, "130\n") << result->err;
  EXPECT_TRUE(absl::StrContains(result->err, "kvctl: CANCELLED: interrupted"))
      << result->err;
  std::remove(out_file.c_str());
}

}  // namespace
}  // namespace kvserve::testing
