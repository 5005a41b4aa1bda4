// Strict JSON (RFC 8259) for untrusted input: safetensors headers, config.json, index files.
//
// Two layers:
//   JsonCursor - a pull parser driven by the caller's schema: the caller asks for an object, an array,
//                a string or an integer and gets a Status naming the byte offset when the text is not
//                that. Memory stays proportional to what the caller keeps (the safetensors reader keeps
//                only tensor entries), so a 100 MB hostile header cannot blow up into a tree of
//                gigabytes.
//   JsonValue  - a small DOM built on the cursor, for the few-kilobyte configuration files.
//
// Strictness (all rejected with an error): invalid UTF-8 (overlong forms, surrogates, > U+10FFFF),
// raw control characters in strings, lone UTF-16 surrogate escapes, leading zeros, '+' signs, NaN/inf
// literals, trailing commas, duplicate object keys (DOM), nesting deeper than max_depth, any
// non-whitespace after the top-level value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp4moe/status.h"

namespace fp4moe::io {

enum class JsonType { kNull, kBool, kNumber, kString, kArray, kObject };
const char* to_string(JsonType type);

// A number as written. is_integer: only digits (and a leading '-'), no fraction or exponent.
struct JsonNumber {
  std::string_view text;
  bool is_integer = false;
};

class JsonCursor {
 public:
  static constexpr int kDefaultMaxDepth = 64;
  // The cursor views `text`, which must outlive it; a temporary string is rejected at compile time.
  explicit JsonCursor(std::string_view text, int max_depth = kDefaultMaxDepth);
  explicit JsonCursor(const char* text, int max_depth = kDefaultMaxDepth)
      : JsonCursor(std::string_view(text), max_depth) {}
  explicit JsonCursor(std::string&& text, int max_depth = kDefaultMaxDepth) = delete;

  // Type of the next value (after whitespace), not consumed.
  Status peek(JsonType* type);
  Status read_null();
  Status read_bool(bool* out);
  Status read_string(std::string* out);
  Status read_number(JsonNumber* out);
  // An integer in [0, 2^64): integer syntax only ("1.0", "1e3" and "-0" are rejected).
  Status read_uint64(uint64_t* out);

  // Objects and arrays, member by member: enter_*() consumes the opening bracket; next_key()/
  // next_element() report whether another member follows (consuming the separator and, for objects, the
  // key and ':'), or consume the closing bracket and report false. The caller reads each value itself.
  Status enter_object();
  Status next_key(bool* has_member, std::string* key);
  Status enter_array();
  Status next_element(bool* has_element);

  // Validates and discards one value of any type.
  Status skip_value();
  // Only whitespace may remain.
  Status finish();

  size_t offset() const { return pos_; }
  // A kIoError "JSON error at byte <offset>: <what>" (callers prefix the file name).
  Status error(std::string_view what) const;

 private:
  void skip_whitespace();
  Status expect_literal(std::string_view literal);
  Status read_string_raw(std::string* out);
  Status push_level(bool is_object);

  std::string_view text_;
  size_t pos_ = 0;
  int max_depth_;
  // Per open container: whether no member has been read yet (decides whether a ',' is expected).
  std::vector<bool> first_in_level_;
};

struct JsonMember;

class JsonValue {
 public:
  JsonType type() const { return type_; }
  bool is_null() const { return type_ == JsonType::kNull; }
  bool is_bool() const { return type_ == JsonType::kBool; }
  bool is_number() const { return type_ == JsonType::kNumber; }
  bool is_string() const { return type_ == JsonType::kString; }
  bool is_array() const { return type_ == JsonType::kArray; }
  bool is_object() const { return type_ == JsonType::kObject; }

  bool boolean() const { return bool_; }
  const std::string& str() const { return str_; }  // the string, or a number's text
  const std::vector<JsonValue>& elements() const { return elements_; }
  const std::vector<JsonMember>& members() const { return members_; }
  // Member `key` of an object; nullptr when this is not an object or has no such member.
  const JsonValue* find(std::string_view key) const;

  // Numeric views; false when this is not a number or the value does not fit.
  bool as_double(double* out) const;
  // Integers written with a fraction or exponent are accepted when the value is integral (configs
  // sometimes write 8.0), as long as it is exactly representable.
  bool as_int64(int64_t* out) const;

 private:
  friend Status parse_json_value(JsonCursor& cursor, int depth, JsonValue* out);
  JsonType type_ = JsonType::kNull;
  bool bool_ = false;
  std::string str_;
  std::vector<JsonValue> elements_;
  std::vector<JsonMember> members_;
};

struct JsonMember {
  std::string key;
  JsonValue value;
};

// Parses a whole document. Duplicate keys in an object are an error.
Status parse_json(std::string_view text, JsonValue* out, int max_depth = JsonCursor::kDefaultMaxDepth);

}  // namespace fp4moe::io
