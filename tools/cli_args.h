// Command-line parsing shared by the tools: numbers and output paths, checked before any work starts
// so that a typo fails at once, naming the flag and the text as typed.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

namespace fp4moe::cli {

// `text` as a decimal integer in [lo, hi]: the whole text (no empty string, no trailing characters),
// no wrap-around of values beyond int64. Returns "" or the error message.
inline std::string parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi,
                             int64_t* out) {
  std::string range = "[";  // (appended, not chained with +: GCC 12 warns falsely on that, -Wrestrict)
  range += std::to_string(lo);
  range += ", ";
  range += std::to_string(hi);
  range += "]";
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end) return flag + " = '" + text + "' is not an integer in " + range;
  if (errno == ERANGE || x < lo || x > hi) return flag + " = '" + text + "' is outside " + range;
  *out = int64_t(x);
  return "";
}

// Whether a file can be written at `path` (its directory exists and is writable; an existing file
// is writable), so a long run does not end by failing to save its results. Returns "" or the error.
inline std::string check_writable(const std::string& flag, const std::string& path) {
  if (path.empty()) return flag + " is empty";
  if (struct stat st{}; stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return flag + " = '" + path + "' is a directory; give a file name";
    return access(path.c_str(), W_OK) == 0 ? "" : flag + " = '" + path + "' exists and is not writable";
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(dir.c_str(), W_OK) != 0)
    return flag + " = '" + path + "': its directory '" + dir + "' does not exist or is not writable";
  return "";
}

// Whether `path` is an existing directory this process can create files in. Returns "" or the error.
inline std::string check_writable_dir(const std::string& flag, const std::string& path) {
  if (path.empty()) return flag + " is empty";
  if (access((path + "/.").c_str(), W_OK) != 0)
    return flag + " = '" + path + "' is not an existing directory this process can write to";
  return "";
}

// Whether `path` can be read (a file the run needs from its start). Returns "" or the error.
inline std::string check_readable(const std::string& flag, const std::string& path) {
  if (path.empty()) return flag + " is empty";
  if (access(path.c_str(), R_OK) != 0) return flag + " = '" + path + "' does not exist or is not readable";
  return "";
}

// `s` as the inside of a JSON string: quotes, backslashes and control characters escaped.
inline std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      static const char* const kHex = "0123456789abcdef";
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

// Runs a tool's body; an exception that escapes it (out of host memory, a thread that could not be
// started) ends the tool with its message and status 1 instead of std::terminate's abort.
template <typename F>
int run_main(const char* tool, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of host memory (a request too large for this machine?)\n", tool);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
  }
  return 1;
}

}  // namespace fp4moe::cli
