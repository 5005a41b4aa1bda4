// Strict JSON cursor and DOM (see json.h for the accepted grammar).
#include "src/io/json.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>
#include <unordered_set>

namespace fp4moe::io {

const char* to_string(JsonType type) {
  switch (type) {
    case JsonType::kNull: return "null";
    case JsonType::kBool: return "boolean";
    case JsonType::kNumber: return "number";
    case JsonType::kString: return "string";
    case JsonType::kArray: return "array";
    case JsonType::kObject: return "object";
  }
  return "?";
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

// Length of the well-formed UTF-8 sequence starting at s[0] (Unicode table 3-7), or 0 if ill-formed.
size_t utf8_sequence_length(const unsigned char* s, size_t avail) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;       // no overlong 3-byte forms
    else if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;       // no overlong 4-byte forms
    else if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // continuation byte, overlong 2-byte lead (C0, C1) or F5..FF
  }
  if (avail < len) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return len;
}

}  // namespace

JsonCursor::JsonCursor(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

Status JsonCursor::error(std::string_view what) const {
  return Status(StatusCode::kIoError, detail::concat("JSON error at byte ", pos_, ": ", what));
}

void JsonCursor::skip_whitespace() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    ++pos_;
  }
}

Status JsonCursor::peek(JsonType* type) {
  skip_whitespace();
  if (pos_ >= text_.size()) return error("unexpected end of input, expected a value");
  const char c = text_[pos_];
  switch (c) {
    case '{': *type = JsonType::kObject; return Status::Ok();
    case '[': *type = JsonType::kArray; return Status::Ok();
    case '"': *type = JsonType::kString; return Status::Ok();
    case 't': case 'f': *type = JsonType::kBool; return Status::Ok();
    case 'n': *type = JsonType::kNull; return Status::Ok();
    default:
      if (c == '-' || is_digit(c)) {
        *type = JsonType::kNumber;
        return Status::Ok();
      }
  }
  return error(detail::concat("unexpected character 0x", std::hex, int((unsigned char)c), ", expected a value"));
}

Status JsonCursor::expect_literal(std::string_view literal) {
  if (text_.substr(pos_, literal.size()) != literal)
    return error(detail::concat("invalid literal, expected '", literal, "'"));
  pos_ += literal.size();
  return Status::Ok();
}

Status JsonCursor::read_null() {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(peek(&t));
  if (t != JsonType::kNull) return error(detail::concat("expected null, found ", to_string(t)));
  return expect_literal("null");
}

Status JsonCursor::read_bool(bool* out) {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(peek(&t));
  if (t != JsonType::kBool) return error(detail::concat("expected a boolean, found ", to_string(t)));
  *out = text_[pos_] == 't';
  return expect_literal(*out ? "true" : "false");
}

Status JsonCursor::read_string(std::string* out) {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(peek(&t));
  if (t != JsonType::kString) return error(detail::concat("expected a string, found ", to_string(t)));
  return read_string_raw(out);
}

// Precondition: text_[pos_] == '"'.
Status JsonCursor::read_string_raw(std::string* out) {
  out->clear();
  ++pos_;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text_.data());
  while (true) {
    if (pos_ >= text_.size()) return error("unterminated string");
    const unsigned char c = bytes[pos_];
    if (c == '"') {
      ++pos_;
      return Status::Ok();
    }
    if (c < 0x20) return error(detail::concat("raw control character 0x", std::hex, int(c), " in a string"));
    if (c == '\\') {
      if (pos_ + 1 >= text_.size()) return error("unterminated escape sequence");
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          auto read_hex4 = [&](uint32_t* v) -> Status {
            if (pos_ + 4 > text_.size()) return error("truncated \\u escape");
            *v = 0;
            for (int i = 0; i < 4; ++i) {
              const int h = hex_value(text_[pos_ + i]);
              if (h < 0) return error("invalid hex digit in \\u escape");
              *v = *v * 16 + uint32_t(h);
            }
            pos_ += 4;
            return Status::Ok();
          };
          uint32_t cp = 0;
          FP4MOE_RETURN_IF_ERROR(read_hex4(&cp));
          if (cp >= 0xDC00 && cp <= 0xDFFF) return error("lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            // A high surrogate must be followed by an escaped low surrogate.
            if (text_.substr(pos_, 2) != "\\u") return error("high surrogate not followed by a low surrogate");
            pos_ += 2;
            uint32_t low = 0;
            FP4MOE_RETURN_IF_ERROR(read_hex4(&low));
            if (low < 0xDC00 || low > 0xDFFF) return error("high surrogate not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(cp, out);
          break;
        }
        default:
          pos_ -= 1;
          return error(detail::concat("invalid escape '\\", e, "'"));
      }
      continue;
    }
    const size_t len = utf8_sequence_length(bytes + pos_, text_.size() - pos_);
    if (len == 0) return error("invalid UTF-8 in a string");
    out->append(text_.data() + pos_, len);
    pos_ += len;
  }
}

Status JsonCursor::read_number(JsonNumber* out) {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(peek(&t));
  if (t != JsonType::kNumber) return error(detail::concat("expected a number, found ", to_string(t)));
  const size_t start = pos_;
  bool integer = true;
  if (text_[pos_] == '-') ++pos_;
  if (pos_ >= text_.size() || !is_digit(text_[pos_])) return error("a '-' must be followed by a digit");
  if (text_[pos_] == '0') {
    ++pos_;
    if (pos_ < text_.size() && is_digit(text_[pos_])) return error("leading zeros are not allowed in numbers");
  } else {
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
  }
  if (pos_ < text_.size() && text_[pos_] == '.') {
    integer = false;
    ++pos_;
    if (pos_ >= text_.size() || !is_digit(text_[pos_])) return error("a '.' must be followed by a digit");
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    integer = false;
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (pos_ >= text_.size() || !is_digit(text_[pos_])) return error("an exponent must have digits");
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
  }
  out->text = text_.substr(start, pos_ - start);
  out->is_integer = integer;
  return Status::Ok();
}

Status JsonCursor::read_uint64(uint64_t* out) {
  const size_t start = (skip_whitespace(), pos_);
  JsonNumber n;
  FP4MOE_RETURN_IF_ERROR(read_number(&n));
  if (!n.is_integer || n.text[0] == '-') {
    pos_ = start;
    return error(detail::concat("expected a non-negative integer, found ", n.text));
  }
  const auto r = std::from_chars(n.text.data(), n.text.data() + n.text.size(), *out);
  if (r.ec != std::errc() || r.ptr != n.text.data() + n.text.size()) {
    pos_ = start;
    return error(detail::concat("integer ", n.text, " does not fit in 64 bits"));
  }
  return Status::Ok();
}

Status JsonCursor::push_level(bool is_object) {
  if (int(first_in_level_.size()) >= max_depth_)
    return error(detail::concat("nesting deeper than ", max_depth_, " levels"));
  first_in_level_.push_back(true);
  return Status::Ok();
}

Status JsonCursor::enter_object() {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(peek(&t));
  if (t != JsonType::kObject) return error(detail::concat("expected an object, found ", to_string(t)));
  FP4MOE_RETURN_IF_ERROR(push_level(true));
  ++pos_;
  return Status::Ok();
}

Status JsonCursor::next_key(bool* has_member, std::string* key) {
  if (first_in_level_.empty()) return internal_error("JsonCursor::next_key outside an object");
  skip_whitespace();
  if (pos_ >= text_.size()) return error("unterminated object");
  if (text_[pos_] == '}') {
    ++pos_;
    first_in_level_.pop_back();
    *has_member = false;
    return Status::Ok();
  }
  if (!first_in_level_.back()) {
    if (text_[pos_] != ',') return error("expected ',' or '}' in an object");
    ++pos_;
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == '}') return error("trailing ',' in an object");
  }
  first_in_level_.back() = false;
  if (pos_ >= text_.size() || text_[pos_] != '"') return error("expected a string key in an object");
  FP4MOE_RETURN_IF_ERROR(read_string_raw(key));
  skip_whitespace();
  if (pos_ >= text_.size() || text_[pos_] != ':') return error("expected ':' after an object key");
  ++pos_;
  *has_member = true;
  return Status::Ok();
}

Status JsonCursor::enter_array() {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(peek(&t));
  if (t != JsonType::kArray) return error(detail::concat("expected an array, found ", to_string(t)));
  FP4MOE_RETURN_IF_ERROR(push_level(false));
  ++pos_;
  return Status::Ok();
}

Status JsonCursor::next_element(bool* has_element) {
  if (first_in_level_.empty()) return internal_error("JsonCursor::next_element outside an array");
  skip_whitespace();
  if (pos_ >= text_.size()) return error("unterminated array");
  if (text_[pos_] == ']') {
    ++pos_;
    first_in_level_.pop_back();
    *has_element = false;
    return Status::Ok();
  }
  if (!first_in_level_.back()) {
    if (text_[pos_] != ',') return error("expected ',' or ']' in an array");
    ++pos_;
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == ']') return error("trailing ',' in an array");
  }
  first_in_level_.back() = false;
  *has_element = true;
  return Status::Ok();
}

Status JsonCursor::skip_value() {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(peek(&t));
  switch (t) {
    case JsonType::kNull: return read_null();
    case JsonType::kBool: {
      bool b;
      return read_bool(&b);
    }
    case JsonType::kNumber: {
      JsonNumber n;
      return read_number(&n);
    }
    case JsonType::kString: {
      std::string s;
      return read_string_raw(&s);
    }
    case JsonType::kArray: {
      FP4MOE_RETURN_IF_ERROR(enter_array());
      bool more;
      while (true) {
        FP4MOE_RETURN_IF_ERROR(next_element(&more));
        if (!more) return Status::Ok();
        FP4MOE_RETURN_IF_ERROR(skip_value());
      }
    }
    case JsonType::kObject: {
      FP4MOE_RETURN_IF_ERROR(enter_object());
      bool more;
      std::string key;
      while (true) {
        FP4MOE_RETURN_IF_ERROR(next_key(&more, &key));
        if (!more) return Status::Ok();
        FP4MOE_RETURN_IF_ERROR(skip_value());
      }
    }
  }
  return internal_error("JsonCursor::skip_value: unknown type");
}

Status JsonCursor::finish() {
  skip_whitespace();
  if (pos_ != text_.size()) return error("unexpected data after the end of the JSON value");
  return Status::Ok();
}

// ---- DOM -------------------------------------------------------------------------------------------

const JsonValue* JsonValue::find(std::string_view key) const {
  if (type_ != JsonType::kObject) return nullptr;
  for (const auto& m : members_)
    if (m.key == key) return &m.value;
  return nullptr;
}

bool JsonValue::as_double(double* out) const {
  if (type_ != JsonType::kNumber) return false;
  double v = 0;
  const auto r = std::from_chars(str_.data(), str_.data() + str_.size(), v);
  // Out-of-range literals (1e999) report result_out_of_range: not a usable value.
  if (r.ec != std::errc() || r.ptr != str_.data() + str_.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool JsonValue::as_int64(int64_t* out) const {
  if (type_ != JsonType::kNumber) return false;
  int64_t v = 0;
  const auto r = std::from_chars(str_.data(), str_.data() + str_.size(), v);
  if (r.ec == std::errc() && r.ptr == str_.data() + str_.size()) {
    *out = v;
    return true;
  }
  double d;
  // 2^53: beyond it a double no longer holds every integer, so "integral" would be a guess.
  if (!as_double(&d) || d != std::floor(d) || std::fabs(d) > 9007199254740992.0) return false;
  *out = int64_t(d);
  return true;
}

Status parse_json_value(JsonCursor& cursor, int depth, JsonValue* out) {
  JsonType t;
  FP4MOE_RETURN_IF_ERROR(cursor.peek(&t));
  out->type_ = t;
  switch (t) {
    case JsonType::kNull: return cursor.read_null();
    case JsonType::kBool: return cursor.read_bool(&out->bool_);
    case JsonType::kNumber: {
      JsonNumber n;
      FP4MOE_RETURN_IF_ERROR(cursor.read_number(&n));
      out->str_.assign(n.text);
      return Status::Ok();
    }
    case JsonType::kString: return cursor.read_string(&out->str_);
    case JsonType::kArray: {
      FP4MOE_RETURN_IF_ERROR(cursor.enter_array());
      bool more;
      while (true) {
        FP4MOE_RETURN_IF_ERROR(cursor.next_element(&more));
        if (!more) return Status::Ok();
        out->elements_.emplace_back();
        FP4MOE_RETURN_IF_ERROR(parse_json_value(cursor, depth + 1, &out->elements_.back()));
      }
    }
    case JsonType::kObject: {
      FP4MOE_RETURN_IF_ERROR(cursor.enter_object());
      std::unordered_set<std::string> seen;
      bool more;
      std::string key;
      while (true) {
        const size_t key_offset = cursor.offset();
        FP4MOE_RETURN_IF_ERROR(cursor.next_key(&more, &key));
        if (!more) return Status::Ok();
        if (!seen.insert(key).second)
          return Status(StatusCode::kIoError,
                        detail::concat("JSON error at byte ", key_offset, ": duplicate key '", key, "'"));
        out->members_.push_back(JsonMember{key, JsonValue()});
        FP4MOE_RETURN_IF_ERROR(parse_json_value(cursor, depth + 1, &out->members_.back().value));
      }
    }
  }
  return internal_error("parse_json_value: unknown type");
}

Status parse_json(std::string_view text, JsonValue* out, int max_depth) {
  JsonCursor cursor(text, max_depth);
  *out = JsonValue();
  FP4MOE_RETURN_IF_ERROR(parse_json_value(cursor, 0, out));
  return cursor.finish();
}

}  // namespace fp4moe::io
