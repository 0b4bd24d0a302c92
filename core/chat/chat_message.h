// ChatMessage: one message of a conversation, as the API carries it and a
// session keeps it.
#ifndef KVSERVE_CORE_CHAT_CHAT_MESSAGE_H_
#define KVSERVE_CORE_CHAT_CHAT_MESSAGE_H_

#include <string>

namespace kvserve {

// In a chat template a message is a dict with "role" and "content" always
// (content None when content_null), and "name", "tool_call_id",
// "tool_calls" only when set (so `message.name is defined` tells them
// apart).
struct ChatMessage {
  std::string role{};
  std::string content{};
  std::string name{};          // empty: absent
  std::string tool_call_id{};  // empty: absent
  // A JSON array of tool calls, handed to the template as objects (lists
  // and dicts), not as a string; empty: absent.
  std::string tool_calls_json{};
  // The client sent content null (JSON): the template sees None, as
  // transformers passes it (content is then empty).
  bool content_null = false;

  bool operator==(const ChatMessage& o) const {
    return role == o.role && content == o.content && name == o.name &&
           tool_call_id == o.tool_call_id &&
           tool_calls_json == o.tool_calls_json &&
           content_null == o.content_null;
  }
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_CHAT_CHAT_MESSAGE_H_
