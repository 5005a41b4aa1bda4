#!/usr/bin/env python3
"""Writes the small seed corpus of the safetensors fuzzer into fuzz/corpus/ (standard library only).

Two framings, matching fuzz/safetensors_fuzz.cpp: `file-*` seeds are whole .safetensors images
(8-byte little-endian header length, header, data); `hdr-*` seeds are 2 bytes of data-buffer size
followed by a bare header, which the target frames itself. Valid and invalid headers both, so the
fuzzer starts next to every accept/reject boundary.
"""
import json
import pathlib
import struct

out = pathlib.Path(__file__).resolve().parent / "corpus"
out.mkdir(exist_ok=True)


def file_image(header: str, data: bytes) -> bytes:
    h = header.encode("utf-8")
    return struct.pack("<Q", len(h)) + h + data


def hdr(header: str, data_bytes: int) -> bytes:
    return struct.pack("<H", data_bytes) + header.encode("utf-8")


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


valid = {
    "__metadata__": {"format": "pt"},
    "model.layers.0.mlp.experts.0.gate_proj.weight": t("U8", [4, 8], 0, 32),
    "model.layers.0.mlp.experts.0.gate_proj.weight_scale": t("F8_E4M3", [4, 1], 32, 36),
    "model.layers.0.mlp.experts.0.gate_proj.weight_scale_2": t("F32", [], 36, 40),
    "model.layers.0.mlp.experts.0.gate_proj.input_scale": t("F32", [1], 40, 44),
    "e": t("BF16", [0, 3], 44, 44),
    "q": t("F4", [2, 3], 44, 47),
}
seeds = {
    "file-valid": file_image(json.dumps(valid), bytes(range(47))),
    "file-valid-padded": file_image(json.dumps({"a": t("I64", [2], 0, 16)}) + "    ", bytes(16)),
    "file-empty": file_image("{}", b""),
    "file-truncated": file_image(json.dumps({"a": t("F32", [4], 0, 16)}), bytes(10)),
    "file-bad-length": struct.pack("<Q", 1 << 40) + b"{}",
    "hdr-valid": hdr(json.dumps(valid), 47),
    "hdr-overlap": hdr(json.dumps({"a": t("U8", [8], 0, 8), "b": t("U8", [8], 4, 12)}), 12),
    "hdr-hole": hdr(json.dumps({"a": t("U8", [4], 0, 4), "b": t("U8", [4], 6, 10)}), 10),
    "hdr-size-mismatch": hdr(json.dumps({"a": t("F32", [3], 0, 8)}), 8),
    "hdr-bad-dtype": hdr(json.dumps({"a": t("F33", [1], 0, 4)}), 4),
    "hdr-overflow": hdr(json.dumps({"a": t("F32", [1 << 32, 1 << 32], 0, 4)}), 4),
    "hdr-metadata-number": hdr('{"__metadata__": {"a": 1}}', 0),
    "hdr-unicode": hdr('{"\\u00e9\\ud83d\\ude00": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', 1),
    "json-config": json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
                               "routed_scaling_factor": 2.5, "rope_scaling": None, "tie": False,
                               "eps": 1e-06}).encode(),
}
# Configurations of each supported architecture (tiny sizes), as config.json documents; the target
# also reads each one as hf_quant_config.json, so the ModelOpt one carries a "quantization" object.
ct = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
                                                                        "group_size": 16}}}}
configs = {
    "cfg-deepseek-modelopt": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                              "hidden_size": 128, "moe_intermediate_size": 64, "n_routed_experts": 8,
                              "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
                              "routed_scaling_factor": 2.5, "norm_topk_prob": True, "n_shared_experts": 1,
                              "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_hidden_layers": 3,
                              "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                              "quantization": {"quant_algo": "NVFP4", "group_size": 16}},
    "cfg-qwen3-ct": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 128,
                     "moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2,
                     "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [1],
                     "num_hidden_layers": 2, "quantization_config": ct},
    "cfg-mixtral-modelopt": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 128,
                             "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
                             "num_hidden_layers": 1,
                             "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}},
    "cfg-llama4": {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
                   "text_config": {"model_type": "llama4_text", "hidden_size": 128, "intermediate_size": 64,
                                   "num_local_experts": 4, "num_experts_per_tok": 1,
                                   "interleave_moe_layer_step": 2, "num_hidden_layers": 4, "moe_layers": [1, 3]},
                   "quantization": {"quant_algo": "NVFP4", "group_size": 16}},
    "cfg-gpt-oss": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 128,
                    "intermediate_size": 64, "num_local_experts": 4, "experts_per_token": 2,
                    "swiglu_limit": 7.0, "num_hidden_layers": 2, "quantization_config": {"quant_method": "mxfp4"}},
}
for name, cfg in configs.items():
    seeds[name] = json.dumps(cfg).encode()
for name, data in seeds.items():
    (out / name).write_bytes(data)
print(f"wrote {len(seeds)} seeds to {out}")
