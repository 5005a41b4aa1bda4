// A read-only, memory-mapped reader of one .safetensors file.
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON header
//   {"<tensor>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// (optionally padded with trailing spaces), then the data buffer; offsets are relative to its start.
//
// The header is untrusted input. open() / from_buffer() accept a file only if all of these hold, and
// otherwise return a kIoError Status naming the file, the tensor (where there is one) and the problem:
//   - the file holds at least 8 bytes, N <= kMaxSafetensorsHeaderBytes and 8 + N <= file size;
//   - the header is strict JSON (src/io/json.h), begins with '{' and is one object;
//   - every tensor entry has exactly the members dtype, shape, data_offsets; the dtype is one of the
//     safetensors dtypes below; the shape is at most kMaxSafetensorsRank non-negative integers whose
//     product (times the dtype's bits, over 8) is the byte size data_offsets span, without overflow;
//     data_offsets is [begin, end] with begin <= end; names are non-empty and unique;
//   - __metadata__, if present, maps strings to strings;
//   - the tensors tile the data buffer exactly: sorted by offset each begins where the previous one
//     ended, the first at 0, the last at the end of the file (no overlap, no hole, no truncation, no
//     trailing bytes). This is the rule of the safetensors format itself; it also rules out polyglot
//     files.
// Tensor data carries no alignment guarantee beyond one byte (the format does not promise any).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fp4moe/status.h"

namespace fp4moe {

// The safetensors dtypes, spelled as in the format (to_string gives "F8_E4M3", ...).
enum class Dtype : uint8_t {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kF8E8M0,
  kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32,
  kI64, kU64, kF64, kC64,
  kF4, kF6E2M3, kF6E3M2,  // sub-byte: a tensor's bit count must be a multiple of 8
};
const char* to_string(Dtype dtype);
Status parse_dtype(std::string_view name, Dtype* out);
int dtype_bits(Dtype dtype);

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
constexpr int kMaxSafetensorsRank = 64;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  // byte range [data_begin, data_end) of the data buffer
  uint64_t data_end = 0;

  int64_t num_elements() const;
  uint64_t num_bytes() const { return data_end - data_begin; }
  std::string shape_string() const;  // "[2, 3]"
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header against the file size.
  static Status open(const std::string& path, std::unique_ptr<SafetensorsFile>* out);
  // Validates an in-memory file image. The bytes are not copied and must outlive the object; `name`
  // stands in for the path in messages.
  static Status from_buffer(const uint8_t* data, size_t size, std::string name, std::unique_ptr<SafetensorsFile>* out);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return size_; }
  uint64_t header_bytes() const { return header_bytes_; }
  // Tensors in file order (ascending data_begin).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes inside the mapping.
  const uint8_t* data(const TensorInfo& tensor) const { return data_ + tensor.data_begin; }
  // Copies bytes [offset, offset + num_bytes) of `tensor` to dst (range checked). For files opened from
  // disk, ranges of 64 KiB and more are read with pread() (faster than faulting the mapping in); a file
  // that shrank while open then gives an error instead of SIGBUS.
  Status read(const TensorInfo& tensor, uint64_t offset, uint64_t num_bytes, void* dst) const;

 private:
  SafetensorsFile() = default;
  Status parse();

  std::string path_;
  const uint8_t* base_ = nullptr;  // whole file
  const uint8_t* data_ = nullptr;  // data buffer (base_ + 8 + header_bytes_)
  uint64_t size_ = 0;
  uint64_t header_bytes_ = 0;
  bool mapped_ = false;
  int fd_ = -1;  // open() only
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // keys view tensors_[i].name
  std::map<std::string, std::string> metadata_;
};

}  // namespace fp4moe
