// Minimal readers for the flat fields of ../shared/golden/*.json that the
// tokenizer tests need (an integer array, a string), so the tests read the
// golden file instead of copying its values.
#ifndef KVSERVE_TESTS_TESTING_GOLDEN_JSON_H_
#define KVSERVE_TESTS_TESTING_GOLDEN_JSON_H_

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/tokenizer/unicode.h"

namespace kvserve::testing {

inline std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Position just after `"key":` and any whitespace, or npos.
inline size_t JsonValueStart(const std::string& json, const std::string& key) {
  size_t p = json.find("\"" + key + "\"");
  if (p == std::string::npos) return p;
  p = json.find(':', p);
  if (p == std::string::npos) return p;
  ++p;
  while (p < json.size() && std::isspace(static_cast<unsigned char>(json[p]))) {
    ++p;
  }
  return p;
}

inline std::vector<int32_t> JsonIntArray(const std::string& json,
                                         const std::string& key) {
  std::vector<int32_t> out;
  size_t p = JsonValueStart(json, key);
  if (p == std::string::npos || json[p] != '[') return out;
  size_t end = json.find(']', p);
  std::string body = json.substr(p + 1, end - p - 1);
  std::istringstream in(body);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

// The JSON string value of `key`, unescaped (\uXXXX incl. surrogate pairs).
inline std::optional<std::string> JsonString(const std::string& json,
                                             const std::string& key) {
  size_t p = JsonValueStart(json, key);
  if (p == std::string::npos || json[p] != '"') return std::nullopt;
  std::string out;
  for (++p; p < json.size() && json[p] != '"'; ++p) {
    if (json[p] != '\\') {
      out += json[p];
      continue;
    }
    char e = json[++p];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        uint32_t cp = std::stoul(json.substr(p + 1, 4), nullptr, 16);
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && json.compare(p + 1, 2, "\\u") == 0) {
          uint32_t lo = std::stoul(json.substr(p + 3, 4), nullptr, 16);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          p += 6;
        }
        AppendUtf8(cp, out);
        break;
      }
      default:
        out += e;
        break;
    }
  }
  return out;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_GOLDEN_JSON_H_
