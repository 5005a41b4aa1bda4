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
for name, data in seeds.items():
    (out / name).write_bytes(data)
print(f"wrote {len(seeds)} seeds to {out}")
