// Helpers shared by the communicator implementations: data-type sizes and names, count checks, and the
// "rank r of group 'g'" prefix of every error message.
#include "src/comm/communicator.h"

namespace fp4moe::comm {

size_t size_of(DataType type) {
  switch (type) {
    case DataType::kU8: return 1;
    case DataType::kBF16: return 2;
    case DataType::kF32: return 4;
    case DataType::kI32: return 4;
    case DataType::kI64: return 8;
  }
  return 0;
}

const char* to_string(DataType type) {
  switch (type) {
    case DataType::kU8: return "u8";
    case DataType::kBF16: return "bf16";
    case DataType::kF32: return "f32";
    case DataType::kI32: return "i32";
    case DataType::kI64: return "i64";
  }
  return "?";
}

Status check_counts(const Communicator& comm, const char* op, const char* what, const std::vector<size_t>& counts,
                    size_t* total) {
  if (counts.size() != size_t(comm.size()))
    return invalid_argument(describe(comm), ": ", op, ": ", what, " has ", counts.size(),
                            " entries, the group has ", comm.size(), " ranks");
  size_t sum = 0;
  for (size_t c : counts) sum += c;
  *total = sum;
  return Status::Ok();
}

std::string describe(const Communicator& comm) {
  return detail::concat("rank ", comm.rank(), " of group '", comm.name(), "' (size ", comm.size(), ")");
}

}  // namespace fp4moe::comm
