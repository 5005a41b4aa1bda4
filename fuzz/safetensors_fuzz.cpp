// libFuzzer target for the untrusted-input parsers of src/io: the safetensors header validation
// (SafetensorsFile::from_buffer), the strict JSON DOM (parse_json) and the checkpoint configuration
// logic on top of it (config.json / hf_quant_config.json -> MoeProblem).
//
// Each input is used three ways:
//   1. as a whole .safetensors file image;
//   2. as a header only: the first 2 bytes pick a data-buffer size (0..4095), the rest is the header,
//      framed with a correct length prefix, so the fuzzer reaches the shape/offset/tiling checks
//      without first having to guess an 8-byte length;
//   3. as a JSON document; when it parses, as config.json (without, then with itself as
//      hf_quant_config.json).
// An accepted file must satisfy the reader's contract; it is checked here (every tensor's bytes
// inside the buffer, tiling exact), so a validation hole shows up as a crash, not a silent pass.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "fp4moe/safetensors.h"
#include "src/io/checkpoint_config.h"
#include "src/io/json.h"

namespace {

void check_accepted(const fp4moe::SafetensorsFile& f, const uint8_t* image, size_t size) {
  uint64_t expected = 0;
  volatile uint8_t sink = 0;
  for (const auto& t : f.tensors()) {
    if (t.data_begin != expected) std::abort();
    if (t.num_bytes() != uint64_t(t.num_elements()) * fp4moe::dtype_bits(t.dtype) / 8) std::abort();
    if (f.find(t.name) != &t) std::abort();
    const uint8_t* p = f.data(t);
    if (p < image || p + t.num_bytes() > image + size) std::abort();
    // Touch the first and last byte: ASan reports any access outside the buffer.
    if (t.num_bytes() > 0) sink = sink + p[0] + p[t.num_bytes() - 1];
    expected = t.data_end;
  }
  if (8 + f.header_bytes() + expected != size) std::abort();
  (void)sink;
}

void run_file(const uint8_t* image, size_t size) {
  std::unique_ptr<fp4moe::SafetensorsFile> f;
  if (fp4moe::SafetensorsFile::from_buffer(image, size, "fuzz.safetensors", &f).ok()) check_accepted(*f, image, size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run_file(data, size);

  if (size >= 2) {
    const size_t data_bytes = (size_t(data[0]) | (size_t(data[1]) << 8)) & 4095;
    const size_t header_bytes = size - 2;
    // An exact-size heap copy so ASan sees reads past the end of the image.
    std::vector<uint8_t> image(8 + header_bytes + data_bytes);
    for (int i = 0; i < 8; ++i) image[i] = uint8_t(uint64_t(header_bytes) >> (8 * i));
    if (header_bytes) std::memcpy(image.data() + 8, data + 2, header_bytes);
    for (size_t i = 0; i < data_bytes; ++i) image[8 + header_bytes + i] = uint8_t(i);
    run_file(image.data(), image.size());
  }

  fp4moe::io::JsonValue value;
  if (fp4moe::io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), &value).ok()) {
    fp4moe::CheckpointInfo info;
    if (fp4moe::io::checkpoint_config_from_json("fuzz", value, nullptr, &info).ok() &&
        !fp4moe::validate(info.problem).ok())
      std::abort();  // an accepted configuration must describe a valid problem
    (void)fp4moe::io::checkpoint_config_from_json("fuzz", value, &value, &info);
  }
  return 0;
}
