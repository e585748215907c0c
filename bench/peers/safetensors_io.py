"""save_safetensors for the fixture scripts: the safetensors layout (8-byte little-endian header
size, JSON header padded to 8 bytes, raw little-endian data), written from torch tensors."""

import json
import struct

import torch

NAMES = {torch.float64: "F64", torch.int64: "I64", torch.float32: "F32",
         torch.bfloat16: "BF16", torch.float16: "F16"}


def raw(t):
    """The tensor's bytes (numpy has no bfloat16: 16-bit floats go through an integer view)."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save_safetensors(path, tensors):
    """Writes the dict name -> tensor to `path`, in the dict's order."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = raw(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)
