// Strict JSON and the safetensors reader: valid files, and one test per malformed-header rule, each
// checking that the error names the file, the tensor and the problem.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "fp4moe/safetensors.h"
#include "src/io/json.h"
#include "test_util.h"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;

// ---- JSON ------------------------------------------------------------------------------------------

TEST(Json, ParsesValidDocuments) {
  io::JsonValue v;
  ASSERT_OK(io::parse_json(R"( {"a": [1, -2, 3.5e2, true, false, null], "b": {"c": "x\"\\\/\b\f\n\r\t"},
                               "u": "\u00e9\ud83d\ude00", "raw": "é😀", "e": [], "o": {}} )",
                           &v));
  ASSERT_TRUE(v.is_object());
  const io::JsonValue* a = v.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->elements().size(), 6u);
  int64_t i = 0;
  double d = 0;
  EXPECT_TRUE(a->elements()[1].as_int64(&i));
  EXPECT_EQ(i, -2);
  EXPECT_TRUE(a->elements()[2].as_double(&d));
  EXPECT_EQ(d, 350.0);
  EXPECT_TRUE(a->elements()[2].as_int64(&i));  // integral value written with an exponent
  EXPECT_EQ(i, 350);
  EXPECT_TRUE(a->elements()[3].boolean());
  EXPECT_TRUE(a->elements()[5].is_null());
  EXPECT_EQ(v.find("b")->find("c")->str(), "x\"\\/\b\f\n\r\t");
  EXPECT_EQ(v.find("u")->str(), "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("raw")->str(), v.find("u")->str());
  EXPECT_TRUE(v.find("e")->elements().empty());
  EXPECT_TRUE(v.find("o")->members().empty());
  EXPECT_EQ(v.find("missing"), nullptr);

  io::JsonValue n;
  ASSERT_OK(io::parse_json("2.5", &n));
  EXPECT_FALSE(n.as_int64(&i));
  ASSERT_OK(io::parse_json("-0", &n));
  EXPECT_TRUE(n.as_int64(&i));
  EXPECT_EQ(i, 0);
}

TEST(Json, RejectsMalformedDocuments) {
  const char* bad[] = {
      "",                        // nothing
      "{",                       // unterminated
      "{\"a\":1,}",              // trailing comma
      "[1,]",                    // trailing comma
      "[1 2]",                   // missing comma
      "{\"a\" 1}",               // missing colon
      "{1:2}",                   // non-string key
      "01",                      // leading zero
      "+1",                      // plus sign
      "1.",                      // fraction without digits
      ".5",                      // no integer part
      "1e",                      // exponent without digits
      "-",                       // lone minus
      "NaN",                     // not JSON
      "Infinity",                //
      "tru",                     // truncated literal
      "nul",                     //
      "\"abc",                   // unterminated string
      "\"a\x01\"",               // raw control character
      "\"\\x\"",                 // invalid escape
      "\"\\u12\"",               // short \u escape
      "\"\\ud800\"",             // lone high surrogate
      "\"\\udc00\"",             // lone low surrogate
      "\"\\ud800\\u0041\"",      // high surrogate + non-surrogate
      "\"\xc0\xaf\"",            // overlong UTF-8
      "\"\xed\xa0\x80\"",        // UTF-8-encoded surrogate
      "\"\xf4\x90\x80\x80\"",    // above U+10FFFF
      "\"\xe2\x82\"",            // truncated UTF-8 sequence
      "\"\x80\"",                // lone continuation byte
      "{\"a\":1,\"a\":2}",       // duplicate key
      "{} {}",                   // two values
      "[1] x",                   // trailing garbage
  };
  for (const char* text : bad) {
    io::JsonValue v;
    const Status s = io::parse_json(text, &v);
    EXPECT_FALSE(s.ok()) << "accepted: " << text;
    EXPECT_EQ(s.code(), StatusCode::kIoError) << text;
    EXPECT_NE(s.message().find("JSON error at byte"), std::string::npos) << s.message();
  }
}

TEST(Json, LimitsNestingDepth) {
  io::JsonValue v;
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_OK(io::parse_json(ok, &v));
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  const Status s = io::parse_json(deep, &v);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nesting deeper than 64"), std::string::npos) << s.message();
  // A hostile depth far beyond the limit must fail cleanly, not overflow the stack.
  const std::string hostile(1 << 20, '[');
  EXPECT_FALSE(io::parse_json(hostile, &v).ok());
  io::JsonCursor cursor(hostile);
  EXPECT_FALSE(cursor.skip_value().ok());
}

TEST(Json, CursorReadsIntegersStrictly) {
  auto read = [](const char* text, uint64_t* v) {
    io::JsonCursor c(text);
    return c.read_uint64(v);
  };
  uint64_t v = 0;
  EXPECT_OK(read("18446744073709551615", &v));
  EXPECT_EQ(v, ~uint64_t(0));
  EXPECT_FALSE(read("18446744073709551616", &v).ok());  // 2^64
  EXPECT_FALSE(read("-1", &v).ok());
  EXPECT_FALSE(read("1.0", &v).ok());
  EXPECT_FALSE(read("1e3", &v).ok());
  EXPECT_FALSE(read("\"1\"", &v).ok());
}

// ---- safetensors: building file images ----------------------------------------------------------

std::vector<uint8_t> file_image(const std::string& header, size_t data_bytes, uint64_t declared_len = ~uint64_t(0)) {
  const uint64_t n = declared_len == ~uint64_t(0) ? header.size() : declared_len;
  std::vector<uint8_t> f(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) f[i] = uint8_t(n >> (8 * i));
  std::memcpy(f.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) f[8 + header.size() + i] = uint8_t(i * 7 + 1);
  return f;
}

Status open_image(const std::vector<uint8_t>& f, std::unique_ptr<SafetensorsFile>* out) {
  return SafetensorsFile::from_buffer(f.data(), f.size(), "mem.safetensors", out);
}

// Expects a kIoError whose message contains every one of `parts` (file, tensor, problem).
void expect_rejected(const std::string& header, size_t data_bytes, std::vector<std::string> parts,
                     uint64_t declared_len = ~uint64_t(0)) {
  const auto f = file_image(header, data_bytes, declared_len);
  std::unique_ptr<SafetensorsFile> file;
  const Status s = open_image(f, &file);
  ASSERT_FALSE(s.ok()) << "accepted header: " << header;
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
  parts.push_back("mem.safetensors");
  for (const auto& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
}

const char* kTwoTensors =
    R"({"b": {"dtype": "F32", "shape": [2, 3], "data_offsets": [4, 28]},)"
    R"( "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
    R"( "__metadata__": {"format": "pt", "note": "x"}})";

TEST(Safetensors, ReadsValidFile) {
  const auto f = file_image(kTwoTensors, 28);
  std::unique_ptr<SafetensorsFile> file;
  ASSERT_OK(open_image(f, &file));
  ASSERT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->tensors()[0].name, "a");  // file order (by offset), not header order
  EXPECT_EQ(file->tensors()[1].name, "b");
  const TensorInfo* b = file->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, Dtype::kF32);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b->num_elements(), 6);
  EXPECT_EQ(b->num_bytes(), 24u);
  EXPECT_EQ(file->find("c"), nullptr);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().size(), 2u);
  EXPECT_EQ(file->data(*b), f.data() + 8 + std::string(kTwoTensors).size() + 4);
  std::vector<uint8_t> buf(24);
  ASSERT_OK(file->read(*b, 0, 24, buf.data()));
  EXPECT_EQ(0, std::memcmp(buf.data(), file->data(*b), 24));
  const Status s = file->read(*b, 20, 8, buf.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s.message();
}

TEST(Safetensors, AcceptsEdgeCases) {
  std::unique_ptr<SafetensorsFile> file;
  // No tensors at all.
  EXPECT_OK(open_image(file_image("{}", 0), &file));
  // Trailing-space padding (writers pad the header to 8 bytes), scalars, empty tensors, sub-byte F4.
  const std::string h =
      R"({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}, "z": {"dtype": "BF16", "shape": [0, 5],)"
      R"( "data_offsets": [4, 4]}, "q": {"dtype": "F4", "shape": [2, 3], "data_offsets": [4, 7]},)"
      R"( "e": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [7, 8]}}     )";
  ASSERT_OK(open_image(file_image(h, 8), &file));
  EXPECT_EQ(file->find("s")->num_elements(), 1);
  EXPECT_EQ(file->find("z")->num_bytes(), 0u);
  EXPECT_EQ(file->find("q")->num_bytes(), 3u);
  EXPECT_EQ(file->find("e")->dtype, Dtype::kF8E4M3);
  // Every dtype name round-trips.
  for (const char* name : {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32",
                           "F32", "I64", "U64", "F64", "C64", "F4", "F6_E2M3", "F6_E3M2"}) {
    Dtype d;
    ASSERT_OK(parse_dtype(name, &d));
    EXPECT_STREQ(to_string(d), name);
  }
}

TEST(Safetensors, RejectsBadFraming) {
  std::unique_ptr<SafetensorsFile> file;
  std::vector<uint8_t> tiny = {1, 0, 0};
  Status s = open_image(tiny, &file);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("too short"), std::string::npos) << s.message();
  expect_rejected("{}", 0, {"exceeds the limit of 100000000"}, 100'000'001);
  expect_rejected("{}", 0, {"runs past the end", "truncated"}, 50);
  expect_rejected("[]", 0, {"does not begin with '{'"});
  expect_rejected(" {}", 0, {"does not begin with '{'"});
  expect_rejected("{\"a\": ", 0, {"JSON error", "unexpected end"});
  expect_rejected("{} x", 0, {"unexpected data after the end"});
  expect_rejected(std::string("{}\0\0", 4), 0, {"unexpected data after the end"});
  expect_rejected("{\"a\": 5}", 0, {"'a'", "expected an object"});
  expect_rejected("{\"\xff\": {}}", 0, {"invalid UTF-8"});
}

TEST(Safetensors, RejectsBadTensorEntries) {
  auto entry = [](const std::string& body) { return "{\"w\": {" + body + "}}"; };
  expect_rejected(entry(R"("dtype": "F33", "shape": [1], "data_offsets": [0, 4])"), 4, {"'w'", "'F33'", "not a safetensors dtype"});
  expect_rejected(entry(R"("dtype": 3, "shape": [1], "data_offsets": [0, 4])"), 4, {"'w'", "expected a string"});
  expect_rejected(entry(R"("dtype": "F32", "shape": [-1], "data_offsets": [0, 4])"), 4, {"'w'", "non-negative integer"});
  expect_rejected(entry(R"("dtype": "F32", "shape": [1.0], "data_offsets": [0, 4])"), 4, {"'w'", "non-negative integer"});
  expect_rejected(entry(R"("dtype": "F32", "shape": 1, "data_offsets": [0, 4])"), 4, {"'w'", "expected an array"});
  expect_rejected(entry(R"("dtype": "F32", "shape": [1], "data_offsets": [0, 5])"), 5,
                  {"'w'", "shape [1] of F32 is 4 bytes but data_offsets [0, 5] span 5"});
  expect_rejected(entry(R"("dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4])"), 4,
                  {"'w'", "more than 2^63 elements"});
  expect_rejected(entry(R"("dtype": "F32", "shape": [2305843009213693952], "data_offsets": [0, 4])"), 4,
                  {"'w'", "is 9223372036854775808 bytes"});
  expect_rejected(entry(R"("dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 4])"), 4,
                  {"'w'", "too large"});
  expect_rejected(entry(R"("dtype": "F4", "shape": [3], "data_offsets": [0, 1])"), 1, {"'w'", "not a whole number of bytes"});
  std::string rank65 = "[";
  for (int i = 0; i < 65; ++i) rank65 += i ? ",1" : "1";
  expect_rejected(entry(R"("dtype": "U8", "shape": )" + rank65 + R"(], "data_offsets": [0, 1])"), 1,
                  {"'w'", "more than 64 dimensions"});
  expect_rejected(entry(R"("dtype": "U8", "shape": [1], "data_offsets": [0])"), 1, {"'w'", "has 1 value(s)"});
  expect_rejected(entry(R"("dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2])"), 1, {"'w'", "more than 2 values"});
  expect_rejected(entry(R"("dtype": "U8", "shape": [0], "data_offsets": [1, 0])"), 1, {"'w'", "begin > end"});
  expect_rejected(entry(R"("dtype": "U8", "shape": [1], "data_offsets": [0, 18446744073709551616])"), 1,
                  {"'w'", "does not fit in 64 bits"});
  expect_rejected(entry(R"("dtype": "U8", "shape": [1])"), 1, {"'w'", "missing 'data_offsets'"});
  expect_rejected(entry(R"("shape": [1], "data_offsets": [0, 1])"), 1, {"'w'", "missing 'dtype'"});
  expect_rejected(entry(R"("dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1)"), 1, {"'w'", "unknown field 'x'"});
  expect_rejected(entry(R"("dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1])"), 1,
                  {"'w'", "'dtype' given twice"});
  expect_rejected(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                  2, {"'w'", "appears twice"});
  expect_rejected(R"({"": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", 1, {"empty name"});
}

TEST(Safetensors, RejectsBadMetadata) {
  expect_rejected(R"({"__metadata__": {"a": 1}})", 0, {"__metadata__ key 'a'", "values must be strings"});
  expect_rejected(R"({"__metadata__": []})", 0, {"__metadata__", "expected an object"});
  expect_rejected(R"({"__metadata__": {"a": "x", "a": "y"}})", 0, {"key 'a' twice"});
  expect_rejected(R"({"__metadata__": {}, "__metadata__": {}})", 0, {"two '__metadata__'"});
}

TEST(Safetensors, RejectsBadLayout) {
  auto t = [](const char* name, int b, int e) {
    // Built with += (GCC 12 gives a false -Wrestrict on "literal" + std::string chains).
    std::string s = "\"";
    s += name;
    s += "\": {\"dtype\": \"U8\", \"shape\": [";
    s += std::to_string(e - b);
    s += "], \"data_offsets\": [";
    s += std::to_string(b);
    s += ", ";
    s += std::to_string(e);
    s += "]}";
    return s;
  };
  auto obj = [](std::initializer_list<std::string> tensors) {
    std::string s = "{";
    for (const std::string& x : tensors) {
      if (s.size() > 1) s += ", ";
      s += x;
    }
    s += "}";
    return s;
  };
  expect_rejected(obj({t("a", 0, 8), t("b", 4, 12)}), 12, {"'b' [4, 12) overlaps tensor 'a' [0, 8)"});
  expect_rejected(obj({t("a", 0, 8), t("b", 0, 8)}), 8, {"overlaps"});
  expect_rejected(obj({t("a", 0, 4), t("b", 6, 10)}), 10, {"'b' begins at byte 6", "2-byte hole after tensor 'a'"});
  expect_rejected(obj({t("a", 2, 6)}), 6, {"'a' begins at byte 2", "hole after the header"});
  expect_rejected(obj({t("a", 0, 4), t("b", 4, 16)}), 10, {"'b' ends at byte 16", "only 10 data bytes", "truncated"});
  expect_rejected(obj({t("a", 0, 4)}), 9, {"5 trailing bytes after the last tensor"});
  // A zero-byte tensor inside another one still overlaps it.
  expect_rejected(obj({t("a", 0, 8), t("z", 4, 4)}), 8, {"'z'", "overlaps tensor 'a'"});
}

TEST(Safetensors, QuotesHostileNames) {
  // Names are printed escaped and cut short so errors stay one readable line.
  const std::string long_name(500, 'n');
  const std::string h = "{\"" + long_name + "\\n\": {\"dtype\": \"X\", \"shape\": [], \"data_offsets\": [0, 0]}}";
  const auto f = file_image(h, 0);
  std::unique_ptr<SafetensorsFile> file;
  const Status s = open_image(f, &file);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nnn...'"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

// ---- On disk ----------------------------------------------------------------------------------------


TEST(Safetensors, OpensFilesOnDisk) {
  testing::TempDir dir("fp4moe_test_io");
  const std::string path = dir.path() + "/model.safetensors";
  const auto f = file_image(kTwoTensors, 28);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(f.data()), f.size());
  std::unique_ptr<SafetensorsFile> file;
  ASSERT_OK(SafetensorsFile::open(path, &file));
  EXPECT_EQ(file->file_bytes(), f.size());
  EXPECT_EQ(file->path(), path);
  std::vector<uint8_t> buf(4);
  ASSERT_OK(file->read(*file->find("a"), 0, 4, buf.data()));
  EXPECT_EQ(buf[1], 8);

  // Truncated on disk: named with the path.
  const std::string cut = dir.path() + "/cut.safetensors";
  std::ofstream(cut, std::ios::binary).write(reinterpret_cast<const char*>(f.data()), f.size() - 3);
  Status s = SafetensorsFile::open(cut, &file);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(cut), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();

  // A file that shrinks while open: large reads go through pread() and fail cleanly (a memcpy from the
  // mapping would raise SIGBUS instead).
  {
    const std::string big = dir.path() + "/big.safetensors";
    const std::string h = R"({"w": {"dtype": "U8", "shape": [131072], "data_offsets": [0, 131072]}})";
    const auto image = file_image(h, 131072);
    std::ofstream(big, std::ios::binary).write(reinterpret_cast<const char*>(image.data()), image.size());
    std::unique_ptr<SafetensorsFile> f;
    ASSERT_OK(SafetensorsFile::open(big, &f));
    std::vector<uint8_t> buf(131072);
    ASSERT_OK(f->read(*f->find("w"), 0, buf.size(), buf.data()));
    EXPECT_EQ(0, std::memcmp(buf.data(), image.data() + 8 + h.size(), buf.size()));
    fs::resize_file(big, 8 + h.size() + 1000);
    const Status r = f->read(*f->find("w"), 0, buf.size(), buf.data());
    EXPECT_EQ(r.code(), StatusCode::kIoError);
    EXPECT_NE(r.message().find("unexpected end of file"), std::string::npos) << r.message();
  }

  s = SafetensorsFile::open(dir.path() + "/missing.safetensors", &file);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("cannot open"), std::string::npos) << s.message();
  s = SafetensorsFile::open(dir.path(), &file);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
  const std::string empty = dir.path() + "/empty.safetensors";
  std::ofstream(empty, std::ios::binary).flush();
  s = SafetensorsFile::open(empty, &file);
  EXPECT_NE(s.message().find("0 bytes, too short"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp4moe
