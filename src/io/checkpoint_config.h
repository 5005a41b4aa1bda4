// Internal interface between the checkpoint configuration reader (checkpoint_config.cpp) and the
// shard/expert loader (checkpoint.cpp); also the entry point the fuzzer drives with in-memory JSON.
#pragma once

#include <string>

#include "fp4moe/checkpoint.h"
#include "src/io/json.h"

namespace fp4moe::io {

// The architectures fp4moe loads (config.json "architectures"[0]).
enum class Arch { kDeepSeekV3, kQwen3Moe, kMixtral, kLlama4, kGptOss };
Status find_arch(const std::string& name, Arch* out);
// The architecture of an info filled by read_checkpoint_config (valid by construction).
Arch arch_of(const CheckpointInfo& info);

bool file_exists(const std::string& path);
// Reads and strictly parses a JSON file of at most 256 MB; errors name the file.
Status read_json_file(const std::string& path, JsonValue* out);

// read_checkpoint_config on parsed documents: config.json and, if the checkpoint has one,
// hf_quant_config.json (else null). `directory` only names the files in messages.
Status checkpoint_config_from_json(const std::string& directory, const JsonValue& config, const JsonValue* hf_quant,
                                   CheckpointInfo* out);

}  // namespace fp4moe::io
