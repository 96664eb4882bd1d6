"""tools/st_save.py: write tensors as a safetensors file with PyTorch and
NumPy (Tensor.numpy) alone, without the safetensors package (Debian has
none).

    import torch, sys
    sys.path.insert(0, "tools")
    from st_save import save_file
    mha = torch.nn.MultiheadAttention(512, 8, batch_first=True)
    save_file({"mha." + k: v for k, v in mha.state_dict().items()},
              "mha.safetensors", {"num_heads": "8"})

The format (https://github.com/huggingface/safetensors): an 8-byte
little-endian header length, a JSON header naming each tensor's dtype,
shape and [begin, end) byte offsets in the data that follows (plus an
optional "__metadata__" map of strings), padded with spaces to a multiple
of 8, then the tensors' little-endian bytes, one after another.
"""
import json
import struct

# torch dtype name -> (safetensors dtype, bytes per element)
_DTYPES = {
    "torch.float64": ("F64", 8),
    "torch.float32": ("F32", 4),
    "torch.float16": ("F16", 2),
    "torch.bfloat16": ("BF16", 2),
    "torch.int64": ("I64", 8),
    "torch.int32": ("I32", 4),
    "torch.uint8": ("U8", 1),
    "torch.bool": ("BOOL", 1),
}


def _raw(t):
    """The tensor's bytes, little-endian, row-major."""
    import torch

    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits
        t = t.view(torch.int16)
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def save_file(tensors, path, metadata=None):
    """Writes `tensors` (a dict of name -> torch.Tensor) to `path`, in the
    dict's order, with `metadata` (a dict of str -> str) as __metadata__."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        dtype, size = _DTYPES[str(t.dtype)]
        raw = _raw(t)
        assert len(raw) == t.numel() * size
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
