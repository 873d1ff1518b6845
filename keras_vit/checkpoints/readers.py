"""Reading a checkpoint file into ``{name: numpy array}``, recognising the file by content.

One reader per container format; none of them knows what the names mean (that is
``layouts.py``). The file's extension is ignored: hub files are often renamed.
"""

import functools
import json
import os
import struct
import zipfile

import numpy as np

from keras_vit.dependencies import MissingDependencyError, require


class CheckpointReadError(ValueError):
    """A checkpoint file that cannot be read: truncated, corrupt, or holding more than arrays."""


class LazyArray:
    """One checkpoint array, read from its file only when used as an array.

    Readers return ``{name: LazyArray}``: names, shapes and dtypes are known at once, and
    the loader reads, converts and assigns one array at a time, so loading peaks near the
    model's own size instead of holding the whole file too. Any NumPy use (``np.asarray``,
    ``.T``, ``.reshape``) reads the array; nothing is kept.
    """

    def __init__(self, shape, dtype, read):
        self.shape, self.dtype, self._read = tuple(int(d) for d in shape), np.dtype(dtype), read

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __array__(self, dtype=None, copy=None):
        array = self._read()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __getattr__(self, name):  # .T, .reshape, .astype, ...: those of the array read now
        if name.startswith("_"):  # copy and pickle probe dunders before __init__ has run
            raise AttributeError(name)
        return getattr(self._read(), name)

    def __repr__(self):
        return f"LazyArray(shape={self.shape}, dtype={self.dtype})"


def sniff_container(path):
    """Which container a file is, from its first bytes (and zip member names)."""
    with open(path, "rb") as f:
        head = f.read(16)
    if not head:
        raise CheckpointReadError(f"{path} is empty (0 bytes): an interrupted copy or download? Fetch it again.")
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                _check_expansion(path, archive)
        except zipfile.BadZipFile as error:
            raise CheckpointReadError(
                f"{path} starts as a zip archive (.npz, .keras or PyTorch's format) but is not a complete one "
                f"({error}): a truncated or corrupt copy? Download or save it again."
            ) from None
        if any(n.endswith(".npy") for n in names):
            return "npz"
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if "config.json" in names and "model.weights.h5" in names:
            return "keras"
    if head.startswith(b"\x89HDF"):
        return "keras_weights"
    if len(head) >= 9:  # before the pickle test: a header length can start with 0x80 too
        (header_len,) = struct.unpack("<Q", head[:8])
        if 0 < header_len < 100_000_000 and head[8:9] == b"{":
            return "safetensors"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):  # torch's legacy pickle
        return "torch"
    raise CheckpointReadError(
        f"{path} is not a checkpoint keras-vit can read: expected one of .npz (original JAX), "
        ".pth/.bin (PyTorch), .safetensors, .keras or .weights.h5 content; the file's first "
        f"bytes are {head[:8]!r}."
    )


# A zip archive that would expand past this many times its size, and past MAX_EXPANDED_FLOOR
# bytes, is refused unread. Model files hold float arrays, which compress little (npz,
# PyTorch's zip and .keras files store them, or deflate them by 10-30%); a zip bomb expands
# a thousand-fold. Reading is bounded by the sizes the archive declares (zipfile stops there).
MAX_EXPANSION = 50
MAX_EXPANDED_FLOOR = 256 * 2**20


def _check_expansion(path, archive):
    expanded = sum(info.file_size for info in archive.infolist())
    size = os.path.getsize(path)
    if expanded > max(MAX_EXPANSION * size, MAX_EXPANDED_FLOOR):
        raise CheckpointReadError(
            f"{path} is a {size / 2**20:.1f} MB zip archive that declares {expanded / 2**30:.1f} GB of contents, "
            f"over {MAX_EXPANSION}x its size: no model file compresses like that (a zip bomb?). It is not read."
        )


def read_npz(path, safe_mode=True):
    # Each member's .npy header gives its shape and dtype; the data is read when used.
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        for member in archive.namelist():
            if not member.endswith(".npy"):
                continue
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                read_header = _NPY_HEADERS.get(version)
                if read_header is None:  # a format version without a public header reader: read it all
                    array = np.lib.format.read_array(archive.open(member), allow_pickle=False)
                    arrays[member[: -len(".npy")]] = array
                    continue
                shape, _, dtype = read_header(f)
            if dtype.hasobject:
                raise ValueError(f"{member} holds objects: it cannot be loaded with allow_pickle=False")
            arrays[member[: -len(".npy")]] = LazyArray(shape, dtype, functools.partial(_npz_member, path, member))
    return arrays


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _npz_member(path, member):
    with zipfile.ZipFile(path) as archive, archive.open(member) as f:
        return np.lib.format.read_array(f, allow_pickle=False)


def read_torch(path, safe_mode=True):
    torch = require("torch", "torch")  # imported here so other formats never pay for it

    # weights_only: tensors and plain containers only; a full unpickle can run any code.
    # mmap: the tensors stay in the file until used (the legacy pre-1.6 format cannot).
    try:
        state = torch.load(path, map_location="cpu", weights_only=safe_mode, mmap=True)
    except RuntimeError as error:
        if "mmap" not in str(error):
            raise
        state = torch.load(path, map_location="cpu", weights_only=safe_mode)
    # Training checkpoints wrap the weights ({"model": ...}, {"state_dict": ...}).
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    return {k: LazyArray(v.shape, _torch_numpy_dtype(v), functools.partial(_torch_array, v)) for k, v in state.items()}


def _torch_numpy_dtype(tensor):
    return "float32" if tensor.is_floating_point() and tensor.element_size() < 4 else str(tensor.dtype).split(".")[1]


def _torch_array(tensor):
    tensor = tensor.detach()
    return (tensor.float() if tensor.is_floating_point() and tensor.element_size() < 4 else tensor).numpy()


_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


def read_safetensors(path, safe_mode=True):
    # The format is an 8-byte header length, a JSON header, then raw little-endian
    # buffers; read directly so bfloat16 files work without torch.
    import ml_dtypes  # comes with jax and tensorflow

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > size - 8:
            raise CheckpointReadError(f"{path}: its header claims {header_len} bytes; the file has {size}.")
        header = json.loads(f.read(header_len))
    _check_safetensors_header(path, header, data_size=size - 8 - header_len)
    arrays = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        stored = ml_dtypes.bfloat16 if dtype == "BF16" else np.dtype(_SAFETENSORS_DTYPES[dtype])
        start = 8 + header_len + int(info["data_offsets"][0])
        half = dtype in ("BF16", "F16")
        read = functools.partial(_read_span, path, start, info["shape"], stored, half)
        arrays[name] = LazyArray(info["shape"], "float32" if half else stored, read)
    return arrays


def _read_span(path, start, shape, stored, widen):
    """One tensor's bytes read straight into a fresh array (half precision widened)."""
    array = np.empty(shape, stored)
    with open(path, "rb") as f:
        f.seek(start)
        f.readinto(memoryview(array.reshape(-1).view(np.uint8)))
    return array.astype("float32") if widen else array


def _check_safetensors_header(path, header, data_size):
    """Every tensor's byte range inside the data, its size its shape's, none overlapping:
    checked before the data is read, so a header that lies allocates nothing."""
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(x) for x in info["data_offsets"])
            count = int(np.prod(info["shape"], dtype=np.int64))
            itemsize = 2 if info["dtype"] == "BF16" else np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).itemsize
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointReadError(f"{path}: tensor {name!r} has a malformed header entry ({error!r}).") from None
        if not 0 <= start <= end <= data_size or end - start != count * itemsize:
            raise CheckpointReadError(
                f"{path}: tensor {name!r} claims bytes {start}..{end} for shape {info['shape']} of {info['dtype']}, "
                f"but the data holds {data_size} bytes: a corrupt or truncated file."
            )
        spans.append((start, end, name))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise CheckpointReadError(f"{path}: tensors {first!r} and {second!r} claim the same bytes.")


def read_keras(path, safe_mode=True):
    import keras

    model = keras.saving.load_model(path, compile=False, safe_mode=safe_mode)
    return {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}


def unsafe_keras_message(path):
    return (
        f"{path} holds Python code (a Lambda layer's function), which Keras' safe mode does not load: it could "
        "run anything. If you trust its source, opt in with safe_mode=False (keras_vit.load_model(path, "
        "safe_mode=False) or keras_vit.load_weights(model, path, safe_mode=False))."
    )


def keras_config(path):
    """The model config stored in a ``.keras`` file (its ``config.json``), without loading it."""
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json")).get("config", {})


READERS = {"npz": read_npz, "torch": read_torch, "safetensors": read_safetensors, "keras": read_keras}


def read_arrays(path, safe_mode=True):
    """``(container, {name: array})`` for any supported checkpoint file.

    ``safe_mode=False`` unpickles a PyTorch file whole (it may hold more than tensors) and
    allows a ``.keras`` file's Python code (a ``Lambda`` layer's function): only for files
    whose source you trust, since either can run any code. NumPy object arrays are never
    loaded.

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
    >>> np.savez(path, **{"embedding/kernel": np.zeros((16, 16, 3, 8), "float32")})
    >>> container, arrays = read_arrays(path)
    >>> container, arrays["embedding/kernel"].shape
    ('npz', (16, 16, 3, 8))
    """
    container = sniff_container(path)
    if container == "keras_weights":
        raise ValueError(
            f"{path} is a Keras .weights.h5 file, which holds no names to map: load it with "
            "model.load_weights(path) into a model built with the same arguments."
        )
    try:
        return container, READERS[container](path, safe_mode=safe_mode)
    except MissingDependencyError:
        raise  # the file may be fine: the reader's package is what is missing, and its error says so
    except Exception as error:
        raise CheckpointReadError(_unreadable(path, container, error)) from error


def _unreadable(path, container, error):
    """One paragraph on why ``path`` could not be read (library messages can run to pages)."""
    text = str(error)
    if container == "torch" and "weights_only" in text.lower():
        return (
            f"{path} holds Python objects besides tensors, which keras-vit does not unpickle by default: "
            "unpickling can run any code. If you trust its source, opt in with safe_mode=False "
            "(keras_vit.load_weights(model, path, safe_mode=False) or keras_vit.load_model(..., safe_mode=False)), "
            "or re-save its tensors once with torch.save(torch.load(path, weights_only=False), 'weights.pth')."
        )
    if container == "keras" and "safe_mode" in text:
        return unsafe_keras_message(path)
    if container == "npz" and "allow_pickle" in text:
        return (
            f"{path} holds object arrays (pickled Python objects), which keras-vit does not load: only numeric arrays."
        )
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"{path} could not be read as a {container} checkpoint: {type(error).__name__}: {first[:300]}"
