// kvctl: the command-line client of kvserve (its commands are in README.md
// ("kvctl") and kUsage below). Flags may come before or after the
// subcommand.
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/proto_json.h"
#include "core/util/command_line.h"
#include "core/util/json_depth.h"
#include "kvserve_build_info.h"

ABSL_FLAG(std::string, addr, "127.0.0.1:50051", "Server address, HOST:PORT.");
ABSL_FLAG(std::optional<absl::Duration>, timeout, std::nullopt,
          "Deadline of each call, e.g. 10s or 500ms. Default: 2s for health, "
          "none for generate, 30s otherwise.");
ABSL_FLAG(std::string, owner, "",
          "Owner label sent with session calls (with an API key the key "
          "decides the owner: leave it empty).");
ABSL_FLAG(std::string, tls_ca, "",
          "Connect over TLS, verifying the server against these PEM CA "
          "certificates.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate chain for mutual TLS (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, api_key, "",
          "API key sent as `authorization: Bearer KEY` on every call. "
          "Default: the environment variable KVSERVE_API_KEY (which, unlike "
          "the flag, other users cannot see in the process list).");
ABSL_FLAG(bool, json, false,
          "Print JSON (one object per line) instead of text.");
ABSL_FLAG(std::optional<int64_t>, ttl_seconds, std::nullopt,
          "session create/fork: idle seconds after which the session is "
          "deleted (default: never).");
ABSL_FLAG(std::optional<int64_t>, tokens, std::nullopt,
          "session truncate: keep the first N tokens of the history.");
ABSL_FLAG(bool, include_tokens, false,
          "session get: also print the token history.");
ABSL_FLAG(std::string, session, "",
          "append/generate: the session id (generate: empty means an "
          "ephemeral session).");
ABSL_FLAG(std::optional<int32_t>, max_tokens, std::nullopt,
          "generate: the most tokens to generate (default: the server's).");
ABSL_FLAG(std::optional<float>, temperature, std::nullopt,
          "generate: sampling temperature; 0 is greedy (the server default).");
ABSL_FLAG(std::optional<int32_t>, top_k, std::nullopt,
          "generate: sample from the K most likely tokens (0: off).");
ABSL_FLAG(std::optional<float>, top_p, std::nullopt,
          "generate: nucleus sampling mass (0 or 1: off).");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "generate: RNG seed, for reproducible sampling (default: random).");
ABSL_FLAG(std::optional<int>, n, std::nullopt,
          "generate, chat: choices of the prompt (1 to 128), sharing one "
          "prefill; printed one after another once all are done (--json: "
          "each line carries its choice's \"index\").");
ABSL_FLAG(std::optional<float>, min_p, std::nullopt,
          "generate: keep tokens at least P times as likely as the most "
          "likely one (0: off).");
ABSL_FLAG(std::optional<float>, presence_penalty, std::nullopt,
          "generate: OpenAI's presence penalty in [-2, 2] (0: off).");
ABSL_FLAG(std::optional<float>, frequency_penalty, std::nullopt,
          "generate: OpenAI's frequency penalty in [-2, 2] (0: off).");
ABSL_FLAG(std::optional<float>, repeat_penalty, std::nullopt,
          "generate: llama.cpp's repeat penalty, > 0 (1: off).");
ABSL_FLAG(std::optional<int32_t>, repeat_last_n, std::nullopt,
          "generate: tokens of the history the repeat penalty looks at "
          "(default 64; -1: all; 0: off).");
ABSL_FLAG(std::vector<std::string>, logit_bias, {},
          "generate: ID:BIAS adds BIAS (in [-100, 100]) to token ID's logit. "
          "Repeatable, or comma-separated.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "generate: stop when the output contains STR. Repeatable, or a "
          "comma-separated list (write \\, for a literal comma).");
ABSL_FLAG(bool, ignore_eos, false,
          "generate: keep generating past the end-of-sequence token.");
ABSL_FLAG(std::optional<int32_t>, logprobs, std::nullopt,
          "generate --json: add each token's logprob and this many "
          "alternatives (0..20).");
ABSL_FLAG(bool, add_bos, false, "tokenize: prepend BOS as for a new session.");
ABSL_FLAG(bool, parse_special, false,
          "generate, append, tokenize: match control tokens (\"<|im_start|>\") "
          "in TEXT as whole tokens.");
ABSL_FLAG(std::string, system, "",
          "chat, template: a system message before the conversation.");
ABSL_FLAG(std::string, messages, "",
          "chat, template: a JSON file (\"-\": stdin) holding an array of "
          "messages {role, content, name, tool_call_id, tool_calls}, sent "
          "before TEXT's user message.");
ABSL_FLAG(std::string, grammar, "",
          "generate, chat: a GBNF file (llama.cpp's syntax, rule root) the "
          "output must follow.");
ABSL_FLAG(std::string, json_schema, "",
          "generate, chat: a JSON Schema file the output must validate "
          "against.");
ABSL_FLAG(bool, json_object, false,
          "generate, chat: the output is a JSON object.");
ABSL_FLAG(std::string, tools, "",
          "chat, template: a JSON file holding the array of tool definitions "
          "(OpenAI's `tools`).");
ABSL_FLAG(std::string, tool_choice, "",
          "chat with --tools: auto (the default), none, required, or the "
          "name of the function to call.");
ABSL_FLAG(bool, generation_prompt, true,
          "template: end with the header of an assistant reply.");

namespace kvserve {
namespace {

constexpr char kUsage[] = R"(command-line client of kvserve.

Usage: kvctl [flags] COMMAND [args]   (flags may also follow the command)

Commands:
  info                                  the served model and KV cache geometry
  health                                prints SERVING or NOT_SERVING (2 s deadline)
  session create [--ttl_seconds=N] [TEXT]   prints the new session id (last line)
  session get [--include_tokens] ID
  session delete ID
  session list
  session fork [--ttl_seconds=N] ID     prints the new session id (last line)
  session truncate --tokens=N ID        keeps the first N tokens of the history
  append --session=ID TEXT              prefills TEXT into the session
  generate [--session=ID] [--max_tokens=N] [--temperature=T] [--top_k=K]
           [--top_p=P] [--min_p=P] [--seed=S] [--presence_penalty=X]
           [--frequency_penalty=X] [--repeat_penalty=X] [--repeat_last_n=N]
           [--logit_bias=ID:BIAS]... [--stop=STR]... [--ignore_eos] [--json]
           PROMPT
                                        streams the generated text; with --json one
                                        {"token_id", "text"} object per token, then
                                        {"finish_reason", "usage", "timings"}
  chat [--session=ID] [--system=TEXT] [--messages=FILE] [--tools=FILE]
       [--tool_choice=auto|none|required|NAME] [generate's flags] [TEXT]
                                        one chat turn: TEXT as a user message,
                                        rendered with the model's chat template;
                                        streams the reply. Without TEXT: one turn
                                        per line of stdin, in --session or a new
                                        session (its id goes to stderr). With
                                        --tools the reply's tool calls follow
                                        it, one JSON object a line ({"id",
                                        "name", "arguments"}; --json: in the
                                        final object's "reply")
  template [--system=TEXT] [--messages=FILE] [--tools=FILE]
           [--nogeneration_prompt] [--json] [TEXT]
                                        the prompt the chat template renders
                                        (--json: with its token ids)
  tokenize [--add_bos] [--parse_special] TEXT   token ids and pieces
  detokenize ID...                      the text of the token ids

Connection: --addr=HOST:PORT; --tls_ca=FILE for TLS (--tls_cert=FILE and
--tls_key=FILE add a client certificate); --api_key=KEY or the environment
variable KVSERVE_API_KEY for a server with API keys.

Several TEXT words are joined with single spaces; use -- before text that
starts with a dash. An empty PROMPT with --session continues generation.
Ctrl-C during a call cancels it.

Errors go to stderr as "kvctl: CODE: message". Exit status:
  0    success (health: SERVING)
  1    usage error (unknown command or flag, missing argument)
  2    health: NOT_SERVING
  3    UNAVAILABLE: server unreachable or shutting down
  4    DEADLINE_EXCEEDED
  5    NOT_FOUND: unknown session
  6    INVALID_ARGUMENT
  7    OUT_OF_RANGE: context full
  8    FAILED_PRECONDITION or ABORTED: session busy
  9    RESOURCE_EXHAUSTED: server overloaded, retry later
  10   PERMISSION_DENIED or UNAUTHENTICATED
  11   UNIMPLEMENTED
  12   CANCELLED by the server
  13   any other error (INTERNAL, UNKNOWN, ..., or stdout not writable)
  130  interrupted (Ctrl-C or SIGTERM); the call was cancelled)";

enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,
  kExitNotServing = 2,
  kExitUnavailable = 3,
  kExitDeadline = 4,
  kExitNotFound = 5,
  kExitInvalidArgument = 6,
  kExitOutOfRange = 7,
  kExitFailedPrecondition = 8,
  kExitResourceExhausted = 9,
  kExitPermissionDenied = 10,
  kExitUnimplemented = 11,
  kExitCancelled = 12,
  kExitOther = 13,
  kExitInterrupted = 130,
};

int ExitCodeFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitDeadline;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kInvalidArgument:
      return kExitInvalidArgument;
    case absl::StatusCode::kOutOfRange:
      return kExitOutOfRange;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return kExitFailedPrecondition;
    case absl::StatusCode::kResourceExhausted:
      return kExitResourceExhausted;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitPermissionDenied;
    case absl::StatusCode::kUnimplemented:
      return kExitUnimplemented;
    case absl::StatusCode::kCancelled:
      return kExitCancelled;
    default:
      return kExitOther;
  }
}

// "NOT_FOUND" etc., the names gRPC users know.
std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) {
    if (c == ' ') {
      c = '_';
    } else if (c >= 'a' && c <= 'z') {
      c = static_cast<char>(c - 'a' + 'A');
    }
  }
  return name;
}

// Set once SIGINT or SIGTERM arrived; the call in flight is then cancelled.
std::atomic<bool> g_interrupted{false};

int Fail(const absl::Status& status) {
  if (g_interrupted.load()) {
    std::cerr << "kvctl: CANCELLED: interrupted" << std::endl;
    return kExitInterrupted;
  }
  std::cerr << "kvctl: " << CodeName(status.code()) << ": " << status.message()
            << std::endl;
  return ExitCodeFor(status.code());
}

int UsageError(absl::string_view message) {
  std::cerr << "kvctl: " << message << " (see kvctl --help)" << std::endl;
  return kExitUsage;
}

// Watches SIGINT and SIGTERM (blocked in every thread, gRPC's included) and
// cancels the calls in flight when one arrives; a second one exits at once.
class SignalWatcher {
 public:
  // REQUIRES: called before any other thread is started.
  explicit SignalWatcher(Cancellation* cancellation)
      : cancellation_(cancellation) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    thread_ = std::thread([this] { Run(); });
  }
  ~SignalWatcher() {
    stop_.store(true);
    thread_.join();
  }
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  void Run() {
    const timespec poll_interval = {0, 50 * 1000 * 1000};
    while (!stop_.load()) {
      const int signal = sigtimedwait(&signals_, nullptr, &poll_interval);
      if (signal < 0) continue;  // timeout or EINTR
      if (g_interrupted.exchange(true)) {
        std::quick_exit(kExitInterrupted);
      }
      cancellation_->Cancel();
    }
  }

  Cancellation* cancellation_;
  sigset_t signals_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Writes to stdout and flushes; false once stdout is gone (closed pipe).
bool WriteOut(absl::string_view text) {
  if (!text.empty() &&
      std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) {
    return false;
  }
  return std::fflush(stdout) == 0;
}

int WriteFailed() {
  std::cerr << "kvctl: cannot write to stdout" << std::endl;
  return kExitOther;
}

// The command line after the flags: the command words and their arguments.
struct Args {
  std::vector<std::string> words;

  size_t size() const { return words.size(); }
  // Words [from, end) joined by single spaces.
  std::string Text(size_t from) const {
    if (from >= words.size()) return "";
    return absl::StrJoin(words.begin() + from, words.end(), " ");
  }
};

// absl keeps only the last value of a repeated flag, so --stop values are
// taken out of argv before parsing and collected here, commas split.
std::vector<std::string> TakeStopFlags(std::vector<char*>* argv) {
  std::vector<std::string> values;
  std::vector<char*> kept;
  bool flags_ended = false;
  for (size_t i = 0; i < argv->size(); ++i) {
    absl::string_view arg = (*argv)[i];
    if (i == 0 || flags_ended) {
      kept.push_back((*argv)[i]);
      continue;
    }
    if (arg == "--") flags_ended = true;
    std::optional<std::string> value;
    for (absl::string_view name : {"--stop", "-stop"}) {
      if (arg == name && i + 1 < argv->size()) {
        value = (*argv)[++i];
        break;
      }
      if (absl::StartsWith(arg, absl::StrCat(name, "="))) {
        value = std::string(arg.substr(name.size() + 1));
        break;
      }
    }
    if (!value.has_value()) {
      kept.push_back((*argv)[i]);
      continue;
    }
    std::string current;
    for (size_t j = 0; j < value->size(); ++j) {
      const char c = (*value)[j];
      if (c == '\\' && j + 1 < value->size() && (*value)[j + 1] == ',') {
        current.push_back(',');
        ++j;
      } else if (c == ',') {
        if (!current.empty()) values.push_back(current);
        current.clear();
      } else {
        current.push_back(c);
      }
    }
    if (!current.empty()) values.push_back(current);
  }
  *argv = std::move(kept);
  return values;
}

CallOptions MakeCallOptions(Cancellation* cancellation,
                            std::optional<absl::Duration> default_timeout) {
  CallOptions options;
  options.timeout = absl::GetFlag(FLAGS_timeout);
  if (!options.timeout.has_value()) options.timeout = default_timeout;
  options.cancellation = cancellation;
  return options;
}

// Prints a message as JSON or "name: value" lines.
bool PrintMessage(const google::protobuf::Message& message) {
  return WriteOut(absl::GetFlag(FLAGS_json)
                      ? DumpJson(ProtoToJson(message)) + "\n"
                      : ProtoToText(message));
}

class Commands {
 public:
  Commands(Client* client, Cancellation* cancellation)
      : client_(client), cancellation_(cancellation) {}

  int Run(const Args& args) {
    const std::string& command = args.words[0];
    if (command == "info") return Info(args);
    if (command == "health") return Health(args);
    if (command == "session") return Session(args);
    if (command == "append") return Append(args);
    if (command == "generate") return Generate(args);
    if (command == "tokenize") return Tokenize(args);
    if (command == "chat") return Chat(args);
    if (command == "template") return Template(args);
    if (command == "detokenize") return Detokenize(args);
    return UsageError(absl::StrCat("unknown command \"", command, "\""));
  }

 private:
  CallOptions Options(
      std::optional<absl::Duration> default_timeout = std::nullopt) const {
    return MakeCallOptions(cancellation_, default_timeout);
  }

  int Info(const Args& args) {
    if (args.size() != 1) return UsageError("info takes no arguments");
    absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo(Options());
    if (!info.ok()) return Fail(info.status());
    return PrintMessage(*info) ? kExitOk : WriteFailed();
  }

  int Health(const Args& args) {
    if (args.size() != 1) return UsageError("health takes no arguments");
    absl::StatusOr<ServingStatus> status =
        client_->Health(Options(absl::Seconds(2)));
    const ServingStatus shown =
        status.ok() ? *status : ServingStatus::kNotServing;
    if (!WriteOut(absl::StrCat(ServingStatusName(shown), "\n"))) {
      return WriteFailed();
    }
    if (!status.ok()) return Fail(status.status());
    return shown == ServingStatus::kServing ? kExitOk : kExitNotServing;
  }

  int Session(const Args& args) {
    if (args.size() < 2) {
      return UsageError(
          "session needs a subcommand: create, get, delete, list, fork or "
          "truncate");
    }
    const std::string& sub = args.words[1];
    const std::string owner = absl::GetFlag(FLAGS_owner);
    if (sub == "create") {
      v1::CreateSessionRequest request;
      if (args.size() > 2) request.mutable_initial()->set_text(args.Text(2));
      if (auto ttl = absl::GetFlag(FLAGS_ttl_seconds)) {
        request.set_ttl_seconds(*ttl);
      }
      request.set_owner(owner);
      return PrintNewSession(client_->CreateSession(request, Options()));
    }
    if (sub == "list") {
      if (args.size() != 2) return UsageError("session list takes no ID");
      return List(owner);
    }
    if (args.size() != 3) {
      return UsageError(absl::StrCat("session ", sub, " needs one ID"));
    }
    const std::string& id = args.words[2];
    if (sub == "get") {
      v1::GetSessionRequest request;
      request.set_session_id(id);
      request.set_include_tokens(absl::GetFlag(FLAGS_include_tokens));
      request.set_owner(owner);
      absl::StatusOr<v1::Session> session =
          client_->GetSession(request, Options());
      if (!session.ok()) return Fail(session.status());
      return PrintMessage(*session) ? kExitOk : WriteFailed();
    }
    if (sub == "delete") {
      v1::DeleteSessionRequest request;
      request.set_session_id(id);
      request.set_owner(owner);
      absl::Status status = client_->DeleteSession(request, Options());
      return status.ok() ? kExitOk : Fail(status);
    }
    if (sub == "fork") {
      v1::ForkSessionRequest request;
      request.set_session_id(id);
      if (auto ttl = absl::GetFlag(FLAGS_ttl_seconds)) {
        request.set_ttl_seconds(*ttl);
      }
      request.set_owner(owner);
      return PrintNewSession(client_->ForkSession(request, Options()));
    }
    if (sub == "truncate") {
      const std::optional<int64_t> tokens = absl::GetFlag(FLAGS_tokens);
      if (!tokens.has_value()) {
        return UsageError("session truncate needs --tokens=N");
      }
      v1::TruncateSessionRequest request;
      request.set_session_id(id);
      request.set_tokens(*tokens);
      request.set_owner(owner);
      absl::StatusOr<v1::Session> session =
          client_->TruncateSession(request, Options());
      if (!session.ok()) return Fail(session.status());
      return PrintMessage(*session) ? kExitOk : WriteFailed();
    }
    return UsageError(absl::StrCat("unknown session subcommand \"", sub, "\""));
  }

  // The id alone for people and scripts; the whole session with --json.
  int PrintNewSession(const absl::StatusOr<v1::Session>& session) {
    if (!session.ok()) return Fail(session.status());
    const bool written = absl::GetFlag(FLAGS_json)
                             ? PrintMessage(*session)
                             : WriteOut(session->session_id() + "\n");
    return written ? kExitOk : WriteFailed();
  }

  int List(const std::string& owner) {
    v1::ListSessionsRequest request;
    request.set_owner(owner);
    // Bounded, in case a server kept returning the same page token.
    for (int page = 0; page < 100000; ++page) {
      absl::StatusOr<v1::ListSessionsResponse> response =
          client_->ListSessions(request, Options());
      if (!response.ok()) return Fail(response.status());
      for (const v1::Session& session : response->sessions()) {
        const std::string line =
            absl::GetFlag(FLAGS_json)
                ? DumpJson(ProtoToJson(session)) + "\n"
                : absl::StrCat(session.session_id(),
                               " tokens=", session.num_tokens(),
                               " kv_bytes=", session.kv_bytes(),
                               " tier=", session.tier(),
                               session.busy() ? " busy" : "", "\n");
        if (!WriteOut(line)) return WriteFailed();
      }
      if (response->next_page_token().empty() ||
          response->next_page_token() == request.page_token()) {
        return kExitOk;
      }
      request.set_page_token(response->next_page_token());
    }
    return kExitOk;
  }

  int Append(const Args& args) {
    const std::string session_id = absl::GetFlag(FLAGS_session);
    if (session_id.empty()) return UsageError("append needs --session=ID");
    if (args.size() < 2) return UsageError("append needs TEXT");
    v1::AppendRequest request;
    request.set_session_id(session_id);
    request.mutable_input()->set_text(args.Text(1));
    request.set_owner(absl::GetFlag(FLAGS_owner));
    absl::StatusOr<v1::AppendResponse> response =
        client_->Append(request, Options());
    if (!response.ok()) return Fail(response.status());
    return PrintMessage(*response) ? kExitOk : WriteFailed();
  }

  int Generate(const Args& args) {
    absl::StatusOr<v1::GenerateRequest> from_flags = GenerateRequestFromFlags();
    if (!from_flags.ok()) return UsageError(from_flags.status().message());
    v1::GenerateRequest& request = *from_flags;
    if (args.size() < 2 && request.session_id().empty()) {
      return UsageError("generate needs a PROMPT (or --session=ID)");
    }
    if (args.size() >= 2) request.mutable_prompt()->set_text(args.Text(1));
    request.mutable_prompt()->set_parse_special(
        absl::GetFlag(FLAGS_parse_special));
    return Stream(request);
  }

  // A chat turn: the messages of --system, --messages and TEXT.
  int Chat(const Args& args) {
    absl::StatusOr<std::vector<v1::ChatMessage>> messages =
        MessagesFromFlags(args.size() >= 2 ? args.Text(1) : "");
    if (!messages.ok()) return UsageError(messages.status().message());
    absl::StatusOr<v1::GenerateRequest> from_flags = GenerateRequestFromFlags();
    if (!from_flags.ok()) return UsageError(from_flags.status().message());
    v1::GenerateRequest& request = *from_flags;
    if (absl::Status s = ToolsFromFlags(request); !s.ok()) {
      return UsageError(s.message());
    }
    if (args.size() >= 2) {
      if (messages->empty()) return UsageError("chat needs a message");
      *request.mutable_prompt()->mutable_messages()->mutable_messages() = {
          messages->begin(), messages->end()};
      return Stream(request);
    }
    // One turn per line of stdin, in one session.
    if (request.session_id().empty()) {
      v1::CreateSessionRequest create;
      create.set_owner(absl::GetFlag(FLAGS_owner));
      absl::StatusOr<v1::Session> session =
          client_->CreateSession(create, Options());
      if (!session.ok()) return Fail(session.status());
      request.set_session_id(session->session_id());
      std::cerr << "kvctl: session " << session->session_id() << std::endl;
    }
    std::string line;
    bool first = true;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      std::vector<v1::ChatMessage> turn;
      if (first) turn = *messages;  // --system and --messages start it
      first = false;
      turn.emplace_back();
      turn.back().set_role("user");
      turn.back().set_content(line);
      *request.mutable_prompt()->mutable_messages()->mutable_messages() = {
          turn.begin(), turn.end()};
      if (int code = Stream(request); code != kExitOk) return code;
    }
    return kExitOk;
  }

  // --tools and --tool_choice into a chat request.
  static absl::Status ToolsFromFlags(v1::GenerateRequest& request) {
    const std::string path = absl::GetFlag(FLAGS_tools);
    const std::string choice = absl::GetFlag(FLAGS_tool_choice);
    if (path.empty()) {
      if (choice.empty()) return absl::OkStatus();
      return absl::InvalidArgumentError("--tool_choice needs --tools=FILE");
    }
    absl::StatusOr<std::string> tools = ToolsJson(path);
    if (!tools.ok()) return tools.status();
    request.mutable_prompt()->mutable_messages()->set_tools_json(*tools);
    v1::ToolChoice* c = request.mutable_tool_choice();
    if (choice.empty() || choice == "auto") {
      c->set_mode(v1::ToolChoice::MODE_AUTO);
    } else if (choice == "none") {
      c->set_mode(v1::ToolChoice::MODE_NONE);
    } else if (choice == "required") {
      c->set_mode(v1::ToolChoice::MODE_REQUIRED);
    } else {
      c->set_mode(v1::ToolChoice::MODE_FUNCTION);
      c->set_function(choice);
    }
    return absl::OkStatus();
  }

  // The array of tools in the JSON file at `path`, as JSON text.
  static absl::StatusOr<std::string> ToolsJson(const std::string& path) {
    absl::StatusOr<nlohmann::ordered_json> tools = ReadJsonFile(path);
    if (!tools.ok()) return tools.status();
    if (!tools->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tools: ", path, " must hold a JSON array of tools"));
    }
    return tools->dump();
  }

  int Template(const Args& args) {
    absl::StatusOr<std::vector<v1::ChatMessage>> messages =
        MessagesFromFlags(args.size() >= 2 ? args.Text(1) : "");
    if (!messages.ok()) return UsageError(messages.status().message());
    v1::ApplyChatTemplateRequest request;
    *request.mutable_messages() = {messages->begin(), messages->end()};
    request.set_add_generation_prompt(absl::GetFlag(FLAGS_generation_prompt));
    if (const std::string path = absl::GetFlag(FLAGS_tools); !path.empty()) {
      absl::StatusOr<std::string> tools = ToolsJson(path);
      if (!tools.ok()) return UsageError(tools.status().message());
      request.set_tools_json(*std::move(tools));
    }
    absl::StatusOr<v1::ApplyChatTemplateResponse> response =
        client_->ApplyChatTemplate(request, Options());
    if (!response.ok()) return Fail(response.status());
    if (absl::GetFlag(FLAGS_json)) {
      return PrintMessage(*response) ? kExitOk : WriteFailed();
    }
    return WriteOut(response->text()) ? kExitOk : WriteFailed();
  }

  // --system, then the messages of --messages, then `text` as a user
  // message (when not empty).
  static absl::StatusOr<std::vector<v1::ChatMessage>> MessagesFromFlags(
      const std::string& text) {
    std::vector<v1::ChatMessage> messages;
    auto add = [&messages](std::string role, std::string content) {
      messages.emplace_back();
      messages.back().set_role(std::move(role));
      messages.back().set_content(std::move(content));
    };
    if (const std::string system = absl::GetFlag(FLAGS_system);
        !system.empty()) {
      add("system", system);
    }
    if (const std::string path = absl::GetFlag(FLAGS_messages); !path.empty()) {
      absl::StatusOr<nlohmann::ordered_json> json = ReadJsonFile(path);
      if (!json.ok()) return json.status();
      absl::StatusOr<std::vector<v1::ChatMessage>> parsed =
          ChatMessagesFromJson(*json);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--messages: ", path, ": ", parsed.status().message()));
      }
      messages.insert(messages.end(), parsed->begin(), parsed->end());
    }
    if (!text.empty()) add("user", text);
    return messages;
  }

  // A file's bytes ("-": stdin).
  static absl::StatusOr<std::string> ReadFile(const std::string& path) {
    std::string data;
    if (path == "-") {
      data.assign(std::istreambuf_iterator<char>(std::cin),
                  std::istreambuf_iterator<char>());
    } else {
      std::ifstream in(path, std::ios::binary);
      if (!in)
        return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
      data.assign(std::istreambuf_iterator<char>(in),
                  std::istreambuf_iterator<char>());
    }
    return data;
  }

  static absl::StatusOr<nlohmann::ordered_json> ReadJsonFile(
      const std::string& path) {
    absl::StatusOr<std::string> read = ReadFile(path);
    if (!read.ok()) return read.status();
    const std::string& data = *read;
    // dump() and copies recurse (a file nested a million deep overflowed
    // the stack): nothing deeper than the limit is kept.
    JsonDepthLimit<nlohmann::ordered_json> limit;
    nlohmann::ordered_json json = nlohmann::ordered_json::parse(
        data, limit.callback(), /*allow_exceptions=*/false);
    if (limit.exceeded()) return limit.Error(path);
    if (json.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not JSON"));
    }
    return json;
  }

  static absl::StatusOr<v1::GenerateRequest> GenerateRequestFromFlags() {
    v1::GenerateRequest request;
    request.set_session_id(absl::GetFlag(FLAGS_session));
    if (auto v = absl::GetFlag(FLAGS_max_tokens)) request.set_max_tokens(*v);
    v1::SamplingParams& sampling = *request.mutable_sampling();
    if (auto v = absl::GetFlag(FLAGS_temperature)) sampling.set_temperature(*v);
    if (auto v = absl::GetFlag(FLAGS_top_k)) sampling.set_top_k(*v);
    if (auto v = absl::GetFlag(FLAGS_top_p)) sampling.set_top_p(*v);
    if (auto v = absl::GetFlag(FLAGS_seed)) sampling.set_seed(*v);
    if (auto v = absl::GetFlag(FLAGS_min_p)) sampling.set_min_p(*v);
    if (auto v = absl::GetFlag(FLAGS_presence_penalty)) {
      sampling.set_presence_penalty(*v);
    }
    if (auto v = absl::GetFlag(FLAGS_frequency_penalty)) {
      sampling.set_frequency_penalty(*v);
    }
    if (auto v = absl::GetFlag(FLAGS_repeat_penalty)) {
      sampling.set_repeat_penalty(*v);
    }
    if (auto v = absl::GetFlag(FLAGS_repeat_last_n)) {
      sampling.set_repeat_last_n(*v);
    }
    for (const std::string& entry : absl::GetFlag(FLAGS_logit_bias)) {
      const size_t colon = entry.find(':');
      int32_t id = 0;
      float bias = 0;
      if (colon == std::string::npos ||
          !absl::SimpleAtoi(absl::string_view(entry).substr(0, colon), &id) ||
          !absl::SimpleAtof(absl::string_view(entry).substr(colon + 1),
                            &bias)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--logit_bias: \"", entry, "\" is not ID:BIAS, e.g. 42:-100"));
      }
      (*sampling.mutable_logit_bias())[id] = bias;
    }
    for (const std::string& stop : absl::GetFlag(FLAGS_stop)) {
      request.add_stop(stop);
    }
    request.set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
    if (auto v = absl::GetFlag(FLAGS_logprobs)) request.set_logprobs(*v);
    if (auto v = absl::GetFlag(FLAGS_n)) request.set_n(*v);
    const std::string grammar = absl::GetFlag(FLAGS_grammar);
    const std::string schema = absl::GetFlag(FLAGS_json_schema);
    const bool json_object = absl::GetFlag(FLAGS_json_object);
    if (!grammar.empty() + !schema.empty() + json_object > 1) {
      return absl::InvalidArgumentError(
          "--grammar, --json_schema and --json_object: one at a time");
    }
    if (!grammar.empty()) {
      absl::StatusOr<std::string> text = ReadFile(grammar);
      if (!text.ok()) return text.status();
      request.mutable_constraint()->set_grammar(*std::move(text));
    } else if (!schema.empty()) {
      absl::StatusOr<nlohmann::ordered_json> json = ReadJsonFile(schema);
      if (!json.ok()) return json.status();
      request.mutable_constraint()->set_json_schema(json->dump());
    } else if (json_object) {
      request.mutable_constraint()->set_json_object(true);
    }
    request.set_owner(absl::GetFlag(FLAGS_owner));
    return request;
  }

  // Streams a Generate's output to stdout. Several choices: --json lines
  // as they come, each with its "index"; text once all are done, choice
  // by choice.
  int Stream(const v1::GenerateRequest& request) {
    const bool json = absl::GetFlag(FLAGS_json);
    const bool several = request.n() > 1;
    bool write_failed = false;
    bool printed_text = false;
    std::vector<std::string> texts(std::max(request.n(), 1));
    auto on_token = [&](int index, const v1::GeneratedToken& token) {
      std::string out;
      if (json) {
        Json line = TokenToJson(token);
        if (several) line["index"] = index;
        out = DumpJson(line) + "\n";
      } else if (several) {
        texts[index] += token.text();
        return true;
      } else {
        out = token.text();
        printed_text = true;
      }
      write_failed = !WriteOut(out);
      return !write_failed;
    };
    absl::StatusOr<std::vector<v1::GenerateFinal>> finals =
        client_->GenerateChoices(request, on_token, Options());
    if (write_failed) return WriteFailed();
    if (!finals.ok()) {
      if (printed_text) WriteOut("\n");
      return Fail(finals.status());
    }
    std::string out;
    for (size_t i = 0; i < finals->size(); ++i) {
      const v1::GenerateFinal& final_message = (*finals)[i];
      if (json) {
        Json line = FinalToJson(final_message);
        if (several) line["index"] = i;
        out += DumpJson(line) + "\n";
      } else if (several) {
        absl::StrAppend(&out, i == 0 ? "" : "\n", "--- choice ", i, " ---\n",
                        texts[i], final_message.text(), "\n");
      } else {
        out += final_message.text() + "\n";
        // A parsed reply's calls, one a line.
        for (const v1::ToolCall& c : final_message.reply().tool_calls()) {
          out += DumpJson(Json{{"id", c.id()},
                               {"name", c.name()},
                               {"arguments", c.arguments()}}) +
                 "\n";
        }
      }
    }
    return WriteOut(out) ? kExitOk : WriteFailed();
  }

  int Tokenize(const Args& args) {
    if (args.size() < 2) return UsageError("tokenize needs TEXT");
    v1::TokenizeRequest request;
    request.set_text(args.Text(1));
    request.set_add_bos(absl::GetFlag(FLAGS_add_bos));
    request.set_parse_special(absl::GetFlag(FLAGS_parse_special));
    absl::StatusOr<v1::TokenizeResponse> response =
        client_->Tokenize(request, Options());
    if (!response.ok()) return Fail(response.status());
    if (absl::GetFlag(FLAGS_json)) {
      return PrintMessage(*response) ? kExitOk : WriteFailed();
    }
    std::string out;
    for (int i = 0; i < response->token_ids_size(); ++i) {
      absl::StrAppend(&out, response->token_ids(i), "\t",
                      i < response->pieces_size()
                          ? DumpJson(Json(response->pieces(i)))
                          : "",
                      "\n");
    }
    return WriteOut(out) ? kExitOk : WriteFailed();
  }

  int Detokenize(const Args& args) {
    if (args.size() < 2) return UsageError("detokenize needs token IDs");
    v1::DetokenizeRequest request;
    for (size_t i = 1; i < args.size(); ++i) {
      int32_t id;
      if (!absl::SimpleAtoi(args.words[i], &id)) {
        return UsageError(
            absl::StrCat("not a token id: \"", args.words[i], "\""));
      }
      request.add_token_ids(id);
    }
    absl::StatusOr<v1::DetokenizeResponse> response =
        client_->Detokenize(request, Options());
    if (!response.ok()) return Fail(response.status());
    if (absl::GetFlag(FLAGS_json)) {
      return PrintMessage(*response) ? kExitOk : WriteFailed();
    }
    return WriteOut(response->text() + "\n") ? kExitOk : WriteFailed();
  }

  Client* client_;
  Cancellation* cancellation_;
};

void ConfigureUsage() {
  ConfigureCommandLine("kvctl", kUsage, "client/", KVSERVE_VERSION,
                       KVSERVE_COMMIT);
}

int Main(int argc, char** argv) {
  // A closed stdout must show up as a failed write, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  ConfigureUsage();
  std::vector<char*> raw_args(argv, argv + argc);
  std::vector<std::string> stops = TakeStopFlags(&raw_args);
  std::optional<std::vector<char*>> parsed =
      ParseCommandLine(static_cast<int>(raw_args.size()), raw_args.data());
  if (!parsed.has_value()) return kExitOk;  // --help or --version
  const std::vector<char*>& positional = *parsed;
  if (!stops.empty()) absl::SetFlag(&FLAGS_stop, stops);

  Args args;
  for (size_t i = 1; i < positional.size(); ++i) {
    args.words.emplace_back(positional[i]);
  }
  if (args.words.empty()) {
    std::cerr << "kvctl: " << kUsage << std::endl;
    return kExitUsage;
  }

  Cancellation cancellation;
  SignalWatcher watcher(&cancellation);
  ConnectOptions connect;
  connect.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  connect.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  connect.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  connect.api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* key = std::getenv("KVSERVE_API_KEY");
      connect.api_key.empty() && key != nullptr) {
    connect.api_key = key;
  }
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(absl::GetFlag(FLAGS_addr), connect);
  if (!client.ok()) return UsageError(client.status().message());
  Commands commands(client->get(), &cancellation);
  return commands.Run(args);
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
