// safetensors reader: mmap, header validation (every rule listed in include/fp4moe/safetensors.h).
#include "fp4moe/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/io/json.h"

namespace fp4moe {

namespace {

struct DtypeRow {
  Dtype dtype;
  const char* name;
  int bits;
};

constexpr DtypeRow kDtypes[] = {
    {Dtype::kBool, "BOOL", 8},       {Dtype::kU8, "U8", 8},           {Dtype::kI8, "I8", 8},
    {Dtype::kF8E4M3, "F8_E4M3", 8},  {Dtype::kF8E5M2, "F8_E5M2", 8},  {Dtype::kF8E8M0, "F8_E8M0", 8},
    {Dtype::kI16, "I16", 16},        {Dtype::kU16, "U16", 16},        {Dtype::kF16, "F16", 16},
    {Dtype::kBF16, "BF16", 16},      {Dtype::kI32, "I32", 32},        {Dtype::kU32, "U32", 32},
    {Dtype::kF32, "F32", 32},        {Dtype::kI64, "I64", 64},        {Dtype::kU64, "U64", 64},
    {Dtype::kF64, "F64", 64},        {Dtype::kC64, "C64", 64},        {Dtype::kF4, "F4", 4},
    {Dtype::kF6E2M3, "F6_E2M3", 6},  {Dtype::kF6E3M2, "F6_E3M2", 6},
};

template <typename... Args>
Status io_error(const Args&... args) {
  return Status(StatusCode::kIoError, detail::concat(args...));
}

// Messages quote names from the file: keep them printable and short so a hostile name cannot flood
// a log or inject terminal escapes.
std::string quoted(std::string_view s) {
  constexpr size_t kMaxShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const unsigned char c = s[i];
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(char(c));
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const char* to_string(Dtype dtype) {
  for (const auto& row : kDtypes)
    if (row.dtype == dtype) return row.name;
  return "?";
}

int dtype_bits(Dtype dtype) {
  for (const auto& row : kDtypes)
    if (row.dtype == dtype) return row.bits;
  return 0;
}

Status parse_dtype(std::string_view name, Dtype* out) {
  for (const auto& row : kDtypes) {
    if (name == row.name) {
      *out = row.dtype;
      return Status::Ok();
    }
  }
  std::string all;
  for (const auto& row : kDtypes) all += std::string(all.empty() ? "" : ", ") + row.name;
  return io_error("dtype = ", quoted(name), " is not a safetensors dtype (", all, ")");
}

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at parse time not to overflow
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped_ && base_) munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

Status SafetensorsFile::open(const std::string& path, std::unique_ptr<SafetensorsFile>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error(path, ": not a regular file");
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    return io_error(path, ": file is ", size, " bytes, too short for the 8-byte header length");
  }
  void* base = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  if (base == MAP_FAILED) {
    ::close(fd);
    return io_error(path, ": mmap of ", size, " bytes failed: ", std::strerror(map_err));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(base);
  f->size_ = size;
  f->mapped_ = true;
  f->fd_ = fd;  // kept for pread() of large ranges (see read())
  FP4MOE_RETURN_IF_ERROR(f->parse());
  *out = std::move(f);
  return Status::Ok();
}

Status SafetensorsFile::from_buffer(const uint8_t* data, size_t size, std::string name,
                                    std::unique_ptr<SafetensorsFile>* out) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(name);
  f->base_ = data;
  f->size_ = size;
  if (size < 8) return io_error(f->path_, ": file is ", size, " bytes, too short for the 8-byte header length");
  FP4MOE_RETURN_IF_ERROR(f->parse());
  *out = std::move(f);
  return Status::Ok();
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::read(const TensorInfo& t, uint64_t offset, uint64_t num_bytes, void* dst) const {
  if (offset > t.num_bytes() || num_bytes > t.num_bytes() - offset)
    return invalid_argument(path_, ": tensor ", quoted(t.name), ": read of bytes [", offset, ", ", offset + num_bytes,
                            ") is outside its ", t.num_bytes(), " bytes");
  // Large ranges: pread() copies from the page cache straight into dst. Faulting the mapping in
  // instead costs one page fault per 4 KiB page and ran at less than half the speed of pread() on a
  // 4 GB checkpoint (fp4moe-check --load-rate); the mapping serves the header and small reads.
  constexpr uint64_t kPreadMinBytes = 64 << 10;
  if (fd_ >= 0 && num_bytes >= kPreadMinBytes) {
    uint64_t done = 0;
    const uint64_t file_offset = 8 + header_bytes_ + t.data_begin + offset;
    while (done < num_bytes) {
      const ssize_t n = ::pread(fd_, static_cast<uint8_t*>(dst) + done, num_bytes - done, off_t(file_offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return io_error(path_, ": tensor ", quoted(t.name), ": read of ", num_bytes, " bytes at file offset ", file_offset,
                        " failed: ", n == 0 ? "unexpected end of file (truncated while open?)" : std::strerror(errno));
      done += uint64_t(n);
    }
    return Status::Ok();
  }
  std::memcpy(dst, data(t) + offset, num_bytes);
  return Status::Ok();
}

Status SafetensorsFile::parse() {
  const std::string& file = path_;
  const uint64_t n = read_le64(base_);
  if (n > kMaxSafetensorsHeaderBytes)
    return io_error(file, ": header length ", n, " exceeds the limit of ", kMaxSafetensorsHeaderBytes, " bytes");
  if (n > size_ - 8)
    return io_error(file, ": header length ", n, " runs past the end of the ", size_, "-byte file (truncated?)");
  header_bytes_ = n;
  data_ = base_ + 8 + n;
  const uint64_t data_bytes = size_ - 8 - n;
  const std::string_view header(reinterpret_cast<const char*>(base_ + 8), n);
  if (header.empty() || header[0] != '{')
    return io_error(file, ": header does not begin with '{'");

  io::JsonCursor cursor(header);
  auto json_error = [&](const Status& s, const std::string& where) {
    return io_error(file, ": header", where, ": ", s.message());
  };
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> seen;  // name -> index, for duplicates
  bool have_metadata = false;
  if (Status s = cursor.enter_object(); !s.ok()) return json_error(s, "");
  while (true) {
    bool more;
    std::string name;
    if (Status s = cursor.next_key(&more, &name); !s.ok()) return json_error(s, "");
    if (!more) break;

    if (name == "__metadata__") {
      if (have_metadata) return io_error(file, ": header has two '__metadata__' entries");
      have_metadata = true;
      const std::string where = " (__metadata__)";
      if (Status s = cursor.enter_object(); !s.ok()) return json_error(s, where);
      while (true) {
        std::string key, value;
        if (Status s = cursor.next_key(&more, &key); !s.ok()) return json_error(s, where);
        if (!more) break;
        if (Status s = cursor.read_string(&value); !s.ok())
          return json_error(s, " (__metadata__ key " + quoted(key) + ", values must be strings)");
        if (!metadata_.emplace(key, std::move(value)).second)
          return io_error(file, ": __metadata__ has the key ", quoted(key), " twice");
      }
      continue;
    }

    const std::string where = " (tensor " + quoted(name) + ")";
    if (name.empty()) return io_error(file, ": header has a tensor with an empty name");
    if (!seen.emplace(name, tensors.size()).second)
      return io_error(file, ": tensor ", quoted(name), " appears twice in the header");
    TensorInfo t;
    t.name = name;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    if (Status s = cursor.enter_object(); !s.ok()) return json_error(s, where);
    while (true) {
      std::string field;
      if (Status s = cursor.next_key(&more, &field); !s.ok()) return json_error(s, where);
      if (!more) break;
      if (field == "dtype") {
        if (have_dtype) return io_error(file, ": tensor ", quoted(name), ": 'dtype' given twice");
        have_dtype = true;
        std::string dtype;
        if (Status s = cursor.read_string(&dtype); !s.ok()) return json_error(s, where + " dtype");
        if (Status s = parse_dtype(dtype, &t.dtype); !s.ok())
          return io_error(file, ": tensor ", quoted(name), ": ", s.message());
      } else if (field == "shape") {
        if (have_shape) return io_error(file, ": tensor ", quoted(name), ": 'shape' given twice");
        have_shape = true;
        if (Status s = cursor.enter_array(); !s.ok()) return json_error(s, where + " shape");
        while (true) {
          if (Status s = cursor.next_element(&more); !s.ok()) return json_error(s, where + " shape");
          if (!more) break;
          uint64_t d;
          if (Status s = cursor.read_uint64(&d); !s.ok()) return json_error(s, where + " shape");
          if (d > uint64_t(INT64_MAX))
            return io_error(file, ": tensor ", quoted(name), ": shape dimension ", d, " is too large");
          if (t.shape.size() >= size_t(kMaxSafetensorsRank))
            return io_error(file, ": tensor ", quoted(name), ": shape has more than ", kMaxSafetensorsRank,
                            " dimensions");
          t.shape.push_back(int64_t(d));
        }
      } else if (field == "data_offsets") {
        if (have_offsets) return io_error(file, ": tensor ", quoted(name), ": 'data_offsets' given twice");
        have_offsets = true;
        uint64_t v[2];
        int count = 0;
        if (Status s = cursor.enter_array(); !s.ok()) return json_error(s, where + " data_offsets");
        while (true) {
          if (Status s = cursor.next_element(&more); !s.ok()) return json_error(s, where + " data_offsets");
          if (!more) break;
          uint64_t x;
          if (Status s = cursor.read_uint64(&x); !s.ok()) return json_error(s, where + " data_offsets");
          if (count == 2)
            return io_error(file, ": tensor ", quoted(name), ": data_offsets must be [begin, end], has more than 2 values");
          v[count++] = x;
        }
        if (count != 2)
          return io_error(file, ": tensor ", quoted(name), ": data_offsets must be [begin, end], has ", count,
                          " value(s)");
        t.data_begin = v[0];
        t.data_end = v[1];
      } else {
        return io_error(file, ": tensor ", quoted(name), ": unknown field ", quoted(field),
                        " (expected dtype, shape, data_offsets)");
      }
    }
    if (!have_dtype || !have_shape || !have_offsets)
      return io_error(file, ": tensor ", quoted(name), ": missing ",
                      !have_dtype ? "'dtype'" : !have_shape ? "'shape'" : "'data_offsets'");
    if (t.data_begin > t.data_end)
      return io_error(file, ": tensor ", quoted(name), ": data_offsets [", t.data_begin, ", ", t.data_end,
                      "] has begin > end");
    // Byte size of the shape, with every product checked for overflow.
    unsigned __int128 bits = dtype_bits(t.dtype);
    bool overflow = false;
    uint64_t elems = 1;
    for (int64_t d : t.shape) {
      if (__builtin_mul_overflow(elems, uint64_t(d), &elems) || elems > uint64_t(INT64_MAX)) {
        overflow = true;
        break;
      }
    }
    if (overflow)
      return io_error(file, ": tensor ", quoted(name), ": shape ", t.shape_string(), " has more than 2^63 elements");
    bits *= elems;
    if (bits % 8 != 0)
      return io_error(file, ": tensor ", quoted(name), ": shape ", t.shape_string(), " of ", to_string(t.dtype),
                      " is not a whole number of bytes");
    const unsigned __int128 bytes = bits / 8;
    if (bytes != t.data_end - t.data_begin)
      return io_error(file, ": tensor ", quoted(name), ": shape ", t.shape_string(), " of ", to_string(t.dtype), " is ",
                      uint64_t(bytes), " bytes but data_offsets [", t.data_begin, ", ", t.data_end, "] span ",
                      t.data_end - t.data_begin);
    tensors.push_back(std::move(t));
  }
  if (Status s = cursor.finish(); !s.ok()) return json_error(s, "");

  // The tensors must tile the data buffer [0, data_bytes) exactly.
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.data_begin != b.data_begin ? a.data_begin < b.data_begin : a.data_end < b.data_end;
  });
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : tensors) {
    if (t.data_begin < expected)
      return io_error(file, ": tensor ", quoted(t.name), " [", t.data_begin, ", ", t.data_end, ") overlaps tensor ",
                      quoted(prev->name), " [", prev->data_begin, ", ", prev->data_end, ")");
    if (t.data_begin > expected)
      return io_error(file, ": tensor ", quoted(t.name), " begins at byte ", t.data_begin, " of the data buffer, leaving a ",
                      t.data_begin - expected, "-byte hole after ",
                      prev ? "tensor " + quoted(prev->name) : std::string("the header"));
    if (t.data_end > data_bytes)
      return io_error(file, ": tensor ", quoted(t.name), " ends at byte ", t.data_end, " of the data buffer but the file holds only ",
                      data_bytes, " data bytes (truncated file)");
    expected = t.data_end;
    prev = &t;
  }
  if (expected != data_bytes)
    return io_error(file, ": ", data_bytes - expected, " trailing bytes after the last tensor (data buffer is ", data_bytes,
                    " bytes, tensors end at ", expected, ")");

  tensors_ = std::move(tensors);
  index_.clear();
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  return Status::Ok();
}

}  // namespace fp4moe
