#include "core/session/session_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/util/little_endian.h"
#include "core/util/xxhash64.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

const char kId[] = "0123456789abcdef0123456789abcdef";

class SessionDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvserve_session_dir_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    auto dir = SessionDir::Open(root_ + "/a/b");  // parents are created
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }

  StoredSession Sample() {
    return StoredSession{.id = kId,
                         .owner = "alice",
                         .ttl = absl::Seconds(90),
                         .create_time = absl::FromUnixSeconds(1234),
                         .tokens = {1, 2, 3}};
  }

  std::string root_;
  std::unique_ptr<SessionDir> dir_;
};

TEST_F(SessionDirTest, ReplaysAppendsAndTruncations) {
  ASSERT_TRUE(dir_->Create(Sample()).ok());
  ASSERT_TRUE(dir_->Append(kId, 3, std::vector<int32_t>{4, 5, 6}).ok());
  ASSERT_TRUE(dir_->Append(kId, 4, {}).ok());  // truncate to 4
  ASSERT_TRUE(dir_->Append(kId, 4, std::vector<int32_t>{7}).ok());
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3, 4, 7}));
  EXPECT_EQ(s->owner, "alice");
  EXPECT_EQ(s->ttl, absl::Seconds(90));
  EXPECT_EQ(s->create_time, absl::FromUnixSeconds(1234));
  EXPECT_EQ(dir_->List(), std::vector<std::string>{kId});
}

TEST_F(SessionDirTest, ATornLastRecordIsIgnored) {
  ASSERT_TRUE(dir_->Create(Sample()).ok());
  ASSERT_TRUE(dir_->Append(kId, 3, std::vector<int32_t>{4, 5}).ok());
  struct stat st;
  ASSERT_EQ(stat(dir_->LogPath(kId).c_str(), &st), 0);
  ASSERT_TRUE(dir_->Append(kId, 5, std::vector<int32_t>{6, 7, 8}).ok());
  // Cut the last record in half, as a crash mid-write would.
  ASSERT_EQ(truncate(dir_->LogPath(kId).c_str(), st.st_size + 10), 0);
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
}

TEST_F(SessionDirTest, ACorruptRecordEndsTheReplay) {
  ASSERT_TRUE(dir_->Create(Sample()).ok());
  struct stat st;
  ASSERT_EQ(stat(dir_->LogPath(kId).c_str(), &st), 0);
  ASSERT_TRUE(dir_->Append(kId, 3, std::vector<int32_t>{4}).ok());
  {
    std::fstream f(dir_->LogPath(kId),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(st.st_size + 14);
    f.put('\x7f');
  }
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(SessionDirTest, AnUnreadableHeaderIsDataLoss) {
  std::ofstream(dir_->LogPath(kId)) << "garbage that is long enough";
  EXPECT_EQ(dir_->Load(kId).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SessionDirTest, RejectsIdsThatAreNotSessionIds) {
  EXPECT_FALSE(SessionDir::IsValidId("../../etc/passwd"));
  EXPECT_FALSE(SessionDir::IsValidId("0123456789ABCDEF0123456789abcdef"));
  EXPECT_EQ(dir_->Load("../x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dir_->Append("../x", 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionDirTest, RemoveDeletesLogAndSnapshot) {
  ASSERT_TRUE(dir_->Create(Sample()).ok());
  ASSERT_TRUE(dir_->WriteSnapshot(kId, "x").ok());
  std::ofstream(dir_->SnapshotPath(kId) + ".tmp") << "left by a crash";
  ASSERT_TRUE(dir_->Remove(kId).ok());
  EXPECT_EQ(dir_->Load(kId).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dir_->ReadSnapshot(kId).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(dir_->HasSnapshot(kId));
  struct stat st;
  EXPECT_NE(stat((dir_->SnapshotPath(kId) + ".tmp").c_str(), &st), 0);
  EXPECT_TRUE(dir_->List().empty());
}

TEST_F(SessionDirTest, SnapshotsAreWrittenReadAndStatted) {
  EXPECT_FALSE(dir_->HasSnapshot(kId));
  EXPECT_EQ(dir_->ReadSnapshot(kId).status().code(),
            absl::StatusCode::kNotFound);
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(dir_->WriteSnapshot(kId, bytes).ok());
  EXPECT_TRUE(dir_->HasSnapshot(kId));
  EXPECT_EQ(*dir_->ReadSnapshot(kId), bytes);
  ASSERT_TRUE(dir_->WriteSnapshot(kId, "newer").ok());  // replaced whole
  EXPECT_EQ(*dir_->ReadSnapshot(kId), "newer");
  dir_->RemoveSnapshot(kId);
  EXPECT_FALSE(dir_->HasSnapshot(kId));
  EXPECT_FALSE(dir_->HasSnapshot("../../etc/passwd"));
  EXPECT_EQ(dir_->WriteSnapshot("../x", "x").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionDirTest, TheLogGrowsByItsRecordsSizes) {
  const std::string header = SessionDir::StartRecords(Sample());
  const std::string append =
      SessionDir::AppendRecord(3, std::vector<int32_t>{4, 5});
  auto size = dir_->WriteRecord(kId, header, /*start=*/true);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, static_cast<int64_t>(header.size()));
  size = dir_->WriteRecord(kId, append, /*start=*/false);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, static_cast<int64_t>(header.size() + append.size()));
  EXPECT_EQ(dir_->LogSize(kId), *size);
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(s->log_bytes, *size);
  EXPECT_EQ(s->replayed_bytes, *size);
  // Starting again replaces the log.
  ASSERT_EQ(*dir_->WriteRecord(kId, header, /*start=*/true),
            static_cast<int64_t>(header.size()));
  EXPECT_EQ(dir_->Load(kId)->tokens, (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(SessionDirTest, ReplayedBytesStopAtADamagedRecord) {
  ASSERT_TRUE(dir_->Create(Sample()).ok());
  const int64_t good = dir_->LogSize(kId);
  ASSERT_TRUE(dir_->Append(kId, 3, std::vector<int32_t>{4}).ok());
  const int64_t full = dir_->LogSize(kId);
  ASSERT_EQ(truncate(dir_->LogPath(kId).c_str(), full - 1), 0);
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->log_bytes, full - 1);
  EXPECT_EQ(s->replayed_bytes, good);
  // A record whose checksum holds but whose base is impossible replays not.
  ASSERT_TRUE(dir_->Create(Sample()).ok());
  ASSERT_TRUE(dir_->Append(kId, 99, std::vector<int32_t>{4}).ok());
  s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->replayed_bytes, good);
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(SessionDirTest, StartRecordsBytesIsTheirSize) {
  StoredSession s = Sample();
  EXPECT_EQ(SessionDir::StartRecordsBytes(s.owner, s.tokens.size(), {}),
            static_cast<int64_t>(SessionDir::StartRecords(s).size()));
  s.messages = {ChatMessage{.role = "user", .content = "hello"},
                ChatMessage{.role = "assistant",
                            .content = "hi",
                            .name = "n",
                            .tool_call_id = "t",
                            .tool_calls_json = "[]"}};
  EXPECT_EQ(SessionDir::StartRecordsBytes(s.owner, s.tokens.size(), s.messages),
            static_cast<int64_t>(SessionDir::StartRecords(s).size()));
}

// A rewrite (compaction, repair) never truncates the log in place: a crash
// before the rename leaves the old log whole, and a reader holding the old
// file keeps reading it.
TEST_F(SessionDirTest, StartingALogAgainReplacesItAtomically) {
  ASSERT_TRUE(dir_->Create(Sample()).ok());
  ASSERT_TRUE(dir_->Append(kId, 3, std::vector<int32_t>{4, 5}).ok());
  const int64_t old_size = dir_->LogSize(kId);
  const int old_fd = ::open(dir_->LogPath(kId).c_str(), O_RDONLY);
  ASSERT_GE(old_fd, 0);
  StoredSession compacted = Sample();
  compacted.tokens = {1, 2, 3, 4, 5};
  const std::string header = SessionDir::StartRecords(compacted);
  ASSERT_EQ(*dir_->WriteRecord(kId, header, /*start=*/true),
            static_cast<int64_t>(header.size()));
  struct stat st;
  ASSERT_EQ(::fstat(old_fd, &st), 0);
  EXPECT_EQ(st.st_size, old_size);  // the old file was not truncated
  ::close(old_fd);
  EXPECT_FALSE(std::filesystem::exists(dir_->LogPath(kId) + ".tmp"));
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, compacted.tokens);
  EXPECT_EQ(s->log_bytes, static_cast<int64_t>(header.size()));
  // A crash mid-rewrite: only a stray temporary, the log as it was.
  std::ofstream(dir_->LogPath(kId) + ".tmp") << "torn";
  EXPECT_EQ(dir_->Load(kId)->tokens, compacted.tokens);
  ASSERT_TRUE(dir_->Remove(kId).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_->LogPath(kId) + ".tmp"));
}

TEST_F(SessionDirTest, SnapshotBytesStats) {
  EXPECT_EQ(dir_->SnapshotBytes(kId), -1);
  ASSERT_TRUE(dir_->WriteSnapshot(kId, "12345").ok());
  EXPECT_EQ(dir_->SnapshotBytes(kId), 5);
  EXPECT_EQ(dir_->SnapshotBytes("not an id"), -1);
}

TEST_F(SessionDirTest, AFileInTheWayIsAClearError) {
  std::ofstream(root_ + "/file") << "x";
  auto dir = SessionDir::Open(root_ + "/file");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("/file"), absl::string_view::npos);
}

TEST_F(SessionDirTest, StrayTemporariesOfACrashAreRemovedAtOpen) {
  const std::string dir = root_ + "/a/b/";
  auto touch = [](const std::string& path, int age_seconds) {
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fputs("partial", f);
    fclose(f);
    const struct timespec t[2] = {{time(nullptr) - age_seconds, 0},
                                  {time(nullptr) - age_seconds, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), t, 0), 0);
  };
  const std::string id(kId);
  touch(dir + id + ".kv.tmp", 3600);
  touch(dir + id + ".log.tmp", 3600);
  touch(dir + "ffffffffffffffffffffffffffffffff.kv.tmp", 5);  // in progress
  touch(dir + "notes.tmp", 3600);                             // not ours
  auto reopened = SessionDir::Open(root_ + "/a/b");
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE(std::filesystem::exists(dir + id + ".kv.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir + id + ".log.tmp"));
  EXPECT_TRUE(
      std::filesystem::exists(dir + "ffffffffffffffffffffffffffffffff.kv.tmp"));
  EXPECT_TRUE(std::filesystem::exists(dir + "notes.tmp"));
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

TEST_F(SessionDirTest, ReplaysAChatSessionsConversation) {
  StoredSession s = Sample();
  s.messages = {ChatMessage{.role = "system", .content = "Be brief."}};
  ASSERT_TRUE(dir_->Create(s).ok());
  const std::vector<ChatMessage> turn = {
      ChatMessage{.role = "user", .content = "Hi", .name = "ann"},
      ChatMessage{.role = "assistant",
                  .content = "",
                  .tool_calls_json = R"([{"id":"1"}])"}};
  ASSERT_TRUE(
      dir_->WriteRecord(kId,
                        SessionDir::AppendRecord(3, std::vector{4, 5}, 1, turn),
                        /*start=*/false)
          .ok());
  // A record without a conversation section leaves the messages alone.
  ASSERT_TRUE(dir_->Append(kId, 5, std::vector<int32_t>{6}).ok());
  auto loaded = dir_->Load(kId);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(loaded->messages.size(), 3u);
  EXPECT_EQ(loaded->messages[0], s.messages[0]);
  EXPECT_EQ(loaded->messages[1], turn[0]);
  EXPECT_EQ(loaded->messages[2], turn[1]);

  // A null content (an assistant turn that only called tools) stays null.
  const std::vector<ChatMessage> calls = {ChatMessage{
      .role = "assistant", .tool_calls_json = "[]", .content_null = true}};
  ASSERT_TRUE(dir_->WriteRecord(kId, SessionDir::AppendRecord(6, {}, 3, calls),
                                /*start=*/false)
                  .ok());
  loaded = dir_->Load(kId);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->messages.size(), 4u);
  EXPECT_TRUE(loaded->messages[3].content_null);
  EXPECT_FALSE(loaded->messages[2].content_null);
  StoredSession restarted = *loaded;
  ASSERT_TRUE(dir_->Create(restarted).ok());  // and through a fresh start
  EXPECT_EQ(dir_->Load(kId)->messages, loaded->messages);
  EXPECT_EQ(dir_->LogSize(kId),
            SessionDir::StartRecordsBytes(
                restarted.owner, restarted.tokens.size(), restarted.messages));

  // "Keep none": the conversation is cleared.
  ASSERT_TRUE(
      dir_->WriteRecord(kId, SessionDir::AppendRecord(1, {}, 0, {}), false)
          .ok());
  loaded = dir_->Load(kId);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->messages.empty());
  EXPECT_EQ(loaded->replayed_bytes, loaded->log_bytes);

  // A conversation base past the messages held is a corrupt record: the
  // replay stops before it.
  ASSERT_TRUE(
      dir_->WriteRecord(
              kId, SessionDir::AppendRecord(1, std::vector{9}, 5, turn), false)
          .ok());
  loaded = dir_->Load(kId);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tokens, (std::vector<int32_t>{1}));
  EXPECT_LT(loaded->replayed_bytes, loaded->log_bytes);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A log started with a chat session and three appended turns, the second a
// chat turn; what a replay holds after each write.
struct Turns {
  std::vector<int64_t> ends;  // the log's size after each write
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<ChatMessage>> messages;
};

Turns WriteTurns(SessionDir& dir, StoredSession s) {
  s.messages = {ChatMessage{.role = "system", .content = "Be brief."}};
  Turns t;
  t.ends.push_back(*dir.Create(s));
  t.tokens.push_back(s.tokens);
  t.messages.push_back(s.messages);
  for (int turn = 0; turn < 3; ++turn) {
    const std::vector<int32_t> more = {10 * turn + 1, 10 * turn + 2};
    const std::vector<ChatMessage> said = {
        ChatMessage{.role = "user", .content = "Hi"}};
    const bool chat = turn == 1;
    t.ends.push_back(*dir.WriteRecord(
        s.id,
        SessionDir::AppendRecord(s.tokens.size(), more,
                                 chat ? s.messages.size() : -1,
                                 chat ? said : std::vector<ChatMessage>{}),
        /*start=*/false));
    s.tokens.insert(s.tokens.end(), more.begin(), more.end());
    if (chat) s.messages.insert(s.messages.end(), said.begin(), said.end());
    t.tokens.push_back(s.tokens);
    t.messages.push_back(s.messages);
  }
  return t;
}

// Issue 35 item 5: one flipped byte in a log's header lost the whole
// session ("no readable header"). Every byte of a small log is flipped in
// turn: a damaged header is read from its copy, and a damaged record loses
// it and what follows, never a record before it.
TEST_F(SessionDirTest, AFlippedByteLosesNoRecordBeforeIt) {
  const StoredSession sample = Sample();
  const int64_t headers = SessionDir::StartRecordsBytes(sample.owner, 0, {});
  const Turns t = WriteTurns(*dir_, sample);
  const std::string log = ReadBytes(dir_->LogPath(kId));
  ASSERT_EQ(static_cast<int64_t>(log.size()), t.ends.back());
  for (int64_t offset = 0; offset < t.ends.back(); ++offset) {
    SCOPED_TRACE(::testing::Message() << "byte " << offset);
    std::string damaged = log;
    damaged[offset] ^= 0x10;
    WriteBytes(dir_->LogPath(kId), damaged);
    auto s = dir_->Load(kId);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->owner, "alice");
    EXPECT_EQ(s->ttl, absl::Seconds(90));
    EXPECT_EQ(s->create_time, absl::FromUnixSeconds(1234));
    EXPECT_EQ(s->log_bytes, t.ends.back());
    if (offset < headers) {  // in the header or its copy
      EXPECT_EQ(s->tokens, t.tokens.back());
      EXPECT_EQ(s->messages, t.messages.back());
      EXPECT_EQ(s->damaged_at, offset < headers / 2 ? 0 : headers / 2);
      EXPECT_EQ(s->records_replayed, 4);
      continue;
    }
    // The write holding the damaged byte, and those after it, are lost.
    const int w =
        std::upper_bound(t.ends.begin(), t.ends.end(), offset) - t.ends.begin();
    const int64_t start = w == 0 ? headers : t.ends[w - 1];
    EXPECT_EQ(s->damaged_at, start);
    EXPECT_EQ(s->replayed_bytes, start);
    EXPECT_EQ(s->records_replayed, w);
    EXPECT_EQ(s->tokens, w == 0 ? std::vector<int32_t>{} : t.tokens[w - 1]);
    EXPECT_EQ(s->messages,
              w == 0 ? std::vector<ChatMessage>{} : t.messages[w - 1]);
  }
  // Both copies of the header damaged: nothing says whose session it is.
  std::string damaged = log;
  damaged[20] ^= 1;
  damaged[headers / 2 + 20] ^= 1;
  WriteBytes(dir_->LogPath(kId), damaged);
  EXPECT_EQ(dir_->Load(kId).status().code(), absl::StatusCode::kDataLoss);
}

// A log (re)started with a long history holds it in records of
// kStartChunkTokens tokens: one flipped byte in its middle lost every
// token, now it loses the chunks from the damaged one on.
TEST_F(SessionDirTest, AFlippedByteInALongStartKeepsTheChunksBeforeIt) {
  StoredSession big = Sample();
  const int64_t chunk = SessionDir::kStartChunkTokens;
  big.tokens.resize(2 * chunk + 100);
  for (size_t i = 0; i < big.tokens.size(); ++i) big.tokens[i] = i % 1000;
  big.messages = {ChatMessage{.role = "user", .content = "long"}};
  const int64_t size = *dir_->Create(big);
  EXPECT_EQ(size, SessionDir::StartRecordsBytes(big.owner, big.tokens.size(),
                                                big.messages));
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, big.tokens);
  EXPECT_EQ(s->messages, big.messages);
  EXPECT_EQ(s->records_replayed, 3);
  EXPECT_EQ(s->damaged_at, -1);

  const int64_t headers = SessionDir::StartRecordsBytes(big.owner, 0, {});
  const int64_t second_chunk = headers + 12 + 16 + 4 * chunk;
  std::string log = ReadBytes(dir_->LogPath(kId));
  log[second_chunk + 12 + 16 + 4 * 100] ^= 0x10;  // the second chunk's 100th
  WriteBytes(dir_->LogPath(kId), log);
  s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, std::vector<int32_t>(big.tokens.begin(),
                                            big.tokens.begin() + chunk));
  // The conversation is in the last chunk: lost with it.
  EXPECT_TRUE(s->messages.empty());
  EXPECT_EQ(s->damaged_at, second_chunk);
  EXPECT_EQ(s->records_replayed, 1);
}

// Logs written before the header had a copy: one record holding owner,
// TTL, creation time, tokens and the conversation.
TEST_F(SessionDirTest, LogsOfTheFirstFormatStillLoad) {
  std::string payload = "KVSLOG1";
  PutU64(payload, 5);
  payload += "alice";
  PutU64(payload, absl::ToInt64Nanoseconds(absl::Seconds(90)));
  PutU64(payload, absl::ToUnixNanos(absl::FromUnixSeconds(1234)));
  PutU64(payload, 3);
  for (uint32_t t : {1, 2, 3}) PutU32(payload, t);
  PutU64(payload, 0);  // conversation: keep 0, then one message
  PutU64(payload, 1);
  for (std::string_view field : {"user", "hi", "", "", ""}) {
    PutU64(payload, field.size());
    payload += field;
  }
  std::string log;
  PutU32(log, payload.size());
  PutU64(log, Xxh64(payload.data(), payload.size(), 0));
  log += payload;
  log += SessionDir::AppendRecord(3, std::vector<int32_t>{4});
  WriteBytes(dir_->LogPath(kId), log);
  auto s = dir_->Load(kId);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->owner, "alice");
  EXPECT_EQ(s->ttl, absl::Seconds(90));
  EXPECT_EQ(s->create_time, absl::FromUnixSeconds(1234));
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(s->messages,
            (std::vector<ChatMessage>{{.role = "user", .content = "hi"}}));
  EXPECT_EQ(s->replayed_bytes, s->log_bytes);
  EXPECT_EQ(s->damaged_at, -1);
}

}  // namespace
}  // namespace kvserve
