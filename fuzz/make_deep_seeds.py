#!/usr/bin/env python3
"""Writes the fuzz seeds that reach deep structures (fuzz/corpus/*/deep_*), deterministically.

libFuzzer grows inputs a few bytes at a time from its seeds, so nesting thousands of levels deep
is out of its reach unless a seed starts there. These seeds sit at, just past and far past each
parser's depth limit (docs/testing.md): ONNX messages (ONNX_MAX_NESTING = 100, io/onnx.h) and
JSON (jansson's JSON_PARSER_MAX_DEPTH = 2048) in safetensors headers, config.json,
genai_config.json and requests lines. Run from the repository root: python3 fuzz/make_deep_seeds.py
"""
import json
import os
import struct


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, payload):  # length-delimited field
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def nested_onnx(levels, with_output):
    """ModelProto > GraphProto > NodeProto > AttributeProto(GRAPH) > GraphProto ... levels times:
    1 + 3 * levels messages below the ModelProto (tests/test_onnx_read.c builds the same)."""
    graph = b""
    if with_output:  # the innermost graph declares one f32 output "y"
        tensor = varint(1 << 3) + varint(1)  # TypeProto.Tensor.elem_type = FLOAT
        vi = field(1, b"y") + field(2, field(1, tensor))
        graph = field(12, vi)
    for _ in range(levels):
        attr = field(1, b"body") + varint(20 << 3) + varint(5) + field(6, graph)
        node = field(4, b"If") + field(5, attr)
        graph = field(1, node)
    opset = varint(2 << 3) + varint(17)
    return varint(1 << 3) + varint(8) + field(8, opset) + field(7, graph)


def deep_json(depth, leaf="0"):
    return "[" * depth + leaf + "]" * depth


def safetensors(header):
    h = header.encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h


def write(corpus, name, data):
    path = os.path.join("fuzz", "corpus", corpus, name)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    # ONNX: moderately nested (10 subgraphs, 31 messages deep), at the limit (100), just past it
    # (103) and the crasher of issue 10 (3,000 subgraphs: 9,001 deep, stack overflow before).
    write("onnx", "deep_subgraphs_10", nested_onnx(10, True))
    write("onnx", "deep_subgraphs_33_at_limit", nested_onnx(33, True))
    write("onnx", "deep_subgraphs_34_past_limit", nested_onnx(34, True))
    write("onnx", "deep_subgraphs_3000_crasher", nested_onnx(3000, False))

    # JSON parsers: nesting at jansson's limit (accepted by the parser, refused by the schema)
    # and past it (a parse error), each in the place the reader looks first.
    for corpus, wrap in [
        ("hf_config", lambda j: '{"model_type": "qwen3_5_text", "text_config": %s}' % j),
        ("genai_config", lambda j: '{"model": {"type": "t", "decoder": {"inputs": %s}}}' % j),
        ("requests", lambda j: '{"id": "a", "prompt_tokens": %s}\n' % j),
    ]:
        write(corpus, "deep_json_2040", wrap(deep_json(2040)))
        write(corpus, "deep_json_3000", wrap(deep_json(3000)))
    tensor = '"t": {"dtype": "F32", "shape": %s, "data_offsets": [0, 4]}'
    write("safetensors", "deep_json_2040", safetensors("{" + tensor % deep_json(2040, "1") + "}") + bytes(4))
    write("safetensors", "deep_json_3000", safetensors("{" + tensor % deep_json(3000, "1") + "}") + bytes(4))
    meta = '{"__metadata__": %s}' % deep_json(2040, '"x"')
    write("safetensors", "deep_metadata_2040", safetensors(meta))


if __name__ == "__main__":
    main()
