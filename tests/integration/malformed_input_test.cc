// Requests no well-behaved client sends, against a real server: string
// fields that are not UTF-8 (sent as raw bytes, since the C++ protobuf API
// refuses to serialize them), session ids and owners of a megabyte, TTLs at
// the int64 limit, and a client that stops reading a Generate stream.
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/channel.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_callback.h"
#include "gtest/gtest.h"
#include "kvserve/v1/inference.pb.h"
#include "tests/integration/integration_util.h"

namespace kvserve::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::string_view kPlaceholder = "PLACEHOLDER";
constexpr std::string_view kInvalid = "bad\xff\xfe-bytes";  // as long

// `message` serialized with its one kPlaceholder swapped for invalid UTF-8.
std::string Corrupt(const google::protobuf::Message& message) {
  std::string wire = message.SerializeAsString();
  const size_t at = wire.find(kPlaceholder);
  EXPECT_NE(at, std::string::npos);
  wire.replace(at, kInvalid.size(), kInvalid);
  return wire;
}

grpc::ByteBuffer ToBuffer(std::string_view bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

class MalformedInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> flags = TestServerFlags();
    flags.push_back("--stream_write_timeout_seconds=1");
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(flags);
    if (!server.ok()) {
      *start_error_ = server.status().ToString();
      return;
    }
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(start_error_->empty()) << *start_error_;
    // A plain channel: kvserve::Client would also put a session id into
    // the x-session-id header, where a megabyte is refused before sending.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
    channel_ = grpc::CreateCustomChannel(
        server_->grpc_address(), grpc::InsecureChannelCredentials(), args);
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  // One unary call of `method` (e.g. "Tokenize") with these request bytes.
  grpc::Status Call(const std::string& method, std::string_view request,
                    std::string* response = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    grpc::ByteBuffer in = ToBuffer(request), out;
    std::promise<grpc::Status> done;
    stub_->UnaryCall(&context, "/kvserve.v1.Inference/" + method, {}, &in, &out,
                     [&](grpc::Status s) { done.set_value(s); });
    grpc::Status status = done.get_future().get();
    if (status.ok() && response != nullptr) {
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(out.Dump(&slices).ok());
      response->clear();
      for (const grpc::Slice& s : slices) {
        response->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return status;
  }

  static inline ServerProcess* server_ = nullptr;
  static inline std::string* start_error_ = new std::string();
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

// A Generate through the generic API as a bidi stream: sends the request,
// and reads every response only if `read`; OnDone gives the status.
class RawGenerate
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawGenerate(grpc::GenericStub& stub, std::string_view request, bool read)
      : request_(ToBuffer(request)), read_(read) {
    stub.PrepareBidiStreamingCall(&context_, "/kvserve.v1.Inference/Generate",
                                  {}, this);
    StartWrite(&request_);
    StartWritesDone();
    if (read_) StartRead(&response_);
    StartCall();
  }
  // For a client that did not read: reads the rest.
  void StartReading() { StartRead(&response_); }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++responses_;
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override { done_.set_value(status); }
  // The status, or DEADLINE_EXCEEDED (as a test failure) after `timeout`;
  // then the call is cancelled and waited for.
  grpc::Status Wait(absl::Duration timeout) {
    std::future<grpc::Status> f = done_.get_future();
    if (f.wait_for(absl::ToChronoSeconds(timeout)) ==
        std::future_status::timeout) {
      context_.TryCancel();
      f.wait();
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "the stream did not end");
    }
    return f.get();
  }
  int responses() const { return responses_; }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  const bool read_;
  int responses_ = 0;  // read by the test after OnDone
  std::promise<grpc::Status> done_;
};

TEST_F(MalformedInputTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  v1::TokenizeRequest tokenize;
  tokenize.set_text(std::string(kPlaceholder));
  grpc::Status s = Call("Tokenize", Corrupt(tokenize));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "text is not valid UTF-8");

  v1::CreateSessionRequest create;
  create.set_owner(std::string(kPlaceholder));
  s = Call("CreateSession", Corrupt(create));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "owner is not valid UTF-8");

  v1::ApplyChatTemplateRequest chat;
  chat.add_messages()->set_content("hi");
  chat.add_messages()->set_content(std::string(kPlaceholder));
  s = Call("ApplyChatTemplate", Corrupt(chat));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "messages[1].content is not valid UTF-8");

  v1::GenerateRequest generate;
  v1::ChatMessages* messages = generate.mutable_prompt()->mutable_messages();
  messages->add_messages()->set_content("hello");
  messages->add_messages()->set_content(std::string(kPlaceholder));
  RawGenerate stream(*stub_, Corrupt(generate), /*read=*/true);
  s = stream.Wait(absl::Seconds(30));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "prompt.messages.messages[1].content is not valid UTF-8");

  s = Call("GetSession", std::string_view("\x0a\x64"
                                          "abc",
                                          5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("malformed request"));

  // The server still serves, and valid text still works.
  tokenize.set_text("héllo");
  std::string out;
  ASSERT_TRUE(Call("Tokenize", tokenize.SerializeAsString(), &out).ok());
  v1::TokenizeResponse tokens;
  ASSERT_TRUE(tokens.ParseFromString(out));
  EXPECT_GT(tokens.token_ids_size(), 0);
  // protobuf's own "contains invalid UTF-8" log was silenced.
  EXPECT_THAT(server_->stderr_text(), Not(HasSubstr("invalid UTF-8")));
}

TEST_F(MalformedInputTest, HugeOrMalformedSessionIdIsNotFoundWithShortMessage) {
  const std::string huge(1 << 20, 'a');
  for (const std::string& id : {huge, std::string("ZZZZ-not-hex"),
                                std::string(32, 'G'), std::string(33, 'a')}) {
    SCOPED_TRACE(id.substr(0, 40));
    v1::GetSessionRequest get;
    get.set_session_id(id);
    grpc::Status s = Call("GetSession", get.SerializeAsString());
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_LT(s.error_message().size(), 120u) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("not found"));

    v1::DeleteSessionRequest del;
    del.set_session_id(id);
    EXPECT_EQ(Call("DeleteSession", del.SerializeAsString()).error_code(),
              grpc::StatusCode::NOT_FOUND);
    v1::ForkSessionRequest fork;
    fork.set_session_id(id);
    EXPECT_EQ(Call("ForkSession", fork.SerializeAsString()).error_code(),
              grpc::StatusCode::NOT_FOUND);
    v1::TruncateSessionRequest truncate;
    truncate.set_session_id(id);
    EXPECT_EQ(
        Call("TruncateSession", truncate.SerializeAsString()).error_code(),
        grpc::StatusCode::NOT_FOUND);
    v1::AppendRequest append;
    append.set_session_id(id);
    append.mutable_input()->set_text("x");
    EXPECT_EQ(Call("Append", append.SerializeAsString()).error_code(),
              grpc::StatusCode::NOT_FOUND);

    v1::GenerateRequest generate;
    generate.set_session_id(id);
    generate.set_max_tokens(1);
    RawGenerate stream(*stub_, generate.SerializeAsString(), /*read=*/true);
    s = stream.Wait(absl::Seconds(30));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_LT(s.error_message().size(), 120u);
  }
  v1::GetSessionRequest get;
  get.set_session_id(huge);
  grpc::Status s = Call("GetSession", get.SerializeAsString());
  EXPECT_EQ(s.error_message(),
            absl::StrCat("session \"", std::string(64, 'a'), "…\" not found"));

  // A client-chosen id at creation is INVALID_ARGUMENT, truncated too.
  v1::CreateSessionRequest create;
  create.set_session_id(huge);
  s = Call("CreateSession", create.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(s.error_message().size(), 160u) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("32 lowercase hex digits"));
}

TEST_F(MalformedInputTest, OwnerLabelAndTtlLimits) {
  v1::CreateSessionRequest create;
  create.set_owner(std::string(257, 'o'));
  grpc::Status s = Call("CreateSession", create.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("owner has 257 bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("limit of 256"));
  v1::ListSessionsRequest list;
  list.set_owner(std::string(1 << 20, 'o'));
  s = Call("ListSessions", list.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(s.error_message().size(), 120u);

  create.set_owner(std::string(256, 'o'));
  create.set_ttl_seconds(std::numeric_limits<int64_t>::max());
  s = Call("CreateSession", create.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("at most 3153600000"));

  create.set_ttl_seconds(3153600000);
  std::string out;
  ASSERT_TRUE(Call("CreateSession", create.SerializeAsString(), &out).ok());
  v1::Session session;
  ASSERT_TRUE(session.ParseFromString(out));
  EXPECT_EQ(session.ttl_seconds(), 3153600000);
  EXPECT_EQ(session.owner(), std::string(256, 'o'));
}

// The Generate requests that ended with `code`, as the server counts them.
double GenerateCount(const ServerProcess& server, const std::string& code) {
  absl::StatusOr<std::string> metrics =
      HttpGet(server.metrics_port(), "/metrics");
  if (!metrics.ok()) return -1;
  return MetricSum(*metrics, "kvserve_request_duration_seconds_count",
                   {"method=\"Generate\"", absl::StrCat("code=\"", code, "\"")})
      .value_or(0);
}

TEST_F(MalformedInputTest, StalledReaderIsCancelledAfterTheWriteTimeout) {
  // Long responses (20 alternatives per token) fill the flow-control
  // window long before the 2048-token context is used up.
  v1::GenerateRequest generate = GreedyRequest(2000);
  generate.set_logprobs(20);
  generate.mutable_prompt()->set_text("once upon a time");
  const double cancelled_before = GenerateCount(*server_, "CANCELLED");
  const absl::Time start = absl::Now();
  RawGenerate stalled(*stub_, generate.SerializeAsString(), /*read=*/false);
  // The server ends the call on its side while the client reads nothing.
  ASSERT_TRUE(WaitForStderr(*server_,
                            "a response waited more than 1s for the client to "
                            "read it (--stream_write_timeout_seconds=1)",
                            absl::Seconds(60)));
  EXPECT_GE(absl::Now() - start, absl::Seconds(1));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (GenerateCount(*server_, "CANCELLED") < cancelled_before + 1 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(GenerateCount(*server_, "CANCELLED"), cancelled_before + 1);
  // What the client then reads ends cancelled, short of the 2000 tokens.
  stalled.StartReading();
  grpc::Status s = stalled.Wait(absl::Seconds(30));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  EXPECT_LT(stalled.responses(), 2000);

  // A reading client of the same request is served to the end.
  RawGenerate reading(*stub_, generate.SerializeAsString(), /*read=*/true);
  s = reading.Wait(absl::Seconds(120));
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reading.responses(), 2001);  // 2000 tokens and the final message
}

}  // namespace
}  // namespace kvserve::testing
