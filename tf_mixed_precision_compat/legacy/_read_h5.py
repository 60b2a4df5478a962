"""Reader stage: TF 2.x Keras H5 files (`model.save("x.h5")`, weights)."""

import base64
import os
import sys

import h5py
import numpy as np

from tf_mixed_precision_compat.legacy import _config


def names(group, source, attribute="weight_names", required=True):
  """The strings of `group.attrs[attribute]` (TF 2.x stored them as bytes)."""
  if attribute not in group.attrs and not required:
    return []
  try:
    found = group.attrs[attribute]
    if isinstance(found, (str, bytes)) or np.ndim(found) != 1:
      raise TypeError(f"a {type(found).__name__}, not a list of names")
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n)
            for n in found]
  except KeyError:
    raise ValueError(f"{source!r}: {group.name} has no {attribute}; the "
                     "file is corrupted.") from None
  except (TypeError, ValueError, OSError) as e:
    raise ValueError(f"{source!r}: {group.name}'s {attribute} is unreadable "
                     f"({e}); the file is corrupted.") from None


def keras_version(f):
  """The `keras_version` attribute of an open H5 file, as a str, or None."""
  version = f.attrs.get("keras_version")
  if version is None and isinstance(f.get("model_weights"), h5py.Group):
    version = f["model_weights"].attrs.get("keras_version")
  if isinstance(version, bytes):
    version = version.decode("utf-8", "replace")
  return None if version is None else str(version)


def is_tf2x_h5(path):
  """Whether `path` is an H5 file written by TF 2.x's Keras 2."""
  try:
    if not os.path.isfile(path) or not h5py.is_hdf5(path):
      return False
    with h5py.File(path, "r") as f:
      version = keras_version(f)
  except (OSError, ValueError):
    return False
  return version is not None and version.startswith("2.")


def strip(name):
  """A TF 2.x weight name without its ":0"."""
  return name[:-2] if name.endswith(":0") else name


def read(group, name, source, like):
  """The dataset `name` of `group`, read only if it has `like`'s shape."""
  # A compressed dataset can claim any size: one of another shape is not
  # read, a zero-strided stand-in lets `Plan.bind` report the mismatch.
  try:
    dataset = group[name]
    if not isinstance(dataset, h5py.Dataset):
      raise TypeError("not a dataset")
    if tuple(dataset.shape) != tuple(like.shape):
      return np.broadcast_to(np.zeros((), dataset.dtype), dataset.shape)
    return np.asarray(dataset[()])
  except (KeyError, OSError, ValueError, TypeError) as e:
    raise ValueError(f"{source!r}: cannot read {group.name}/{name} "
                     f"(truncated or corrupted file?): {e}") from None


def layer_groups(f, source, required=False):
  """[(layer name, group, weight names)] of an open file's saved layers."""
  top = (f["model_weights"] if "layer_names" not in f.attrs and
         "model_weights" in f else f)
  if not isinstance(top, h5py.Group):
    raise ValueError(f"{source!r}: model_weights is not a group; the file is "
                     "corrupted.")
  if required and "layer_names" not in top.attrs:
    raise ValueError(f"{source!r} holds no Keras weights (no layer_names).")
  layers = []
  for layer_name in names(top, source, "layer_names", required=False):
    group = top[layer_name]
    if not isinstance(group, h5py.Group):
      raise ValueError(f"{source!r}: {group.name} is not a group of weights; "
                       "the file is corrupted.")
    layers.append((layer_name, group, names(group, source)))
  return layers


def optimizer_weights(f):
  """The `optimizer_weights` group of a whole-model file, or None."""
  group = f.get("optimizer_weights")
  has_names = isinstance(group, h5py.Group) and "weight_names" in group.attrs
  return group if has_names else None


# The Pythons each Keras 2 `keras_version` (as TF 2.2-2.4 wrote it) ran on.
_KERAS_PYTHONS = {
    "2.3.0-tf": ((3, 5), (3, 8)),  # TF 2.2
    "2.4.0": ((3, 5), (3, 8)),  # TF 2.3 (3.5-3.8) and TF 2.4 (3.6-3.8)
}
# A marshalled code object starts with its type byte and, before its
# bytecode (a bytes object), 5 int32 fields up to Python 3.7 and from 3.11
# on, 6 in Python 3.8-3.10 (posonlyargcount was added, nlocals later left).
_LAYOUTS = ((6, ((3, 8), (3, 10))), (5, ((3, 0), (3, 7))),
            (5, ((3, 11), (3, 99))))
_CODE, _BYTES, _FLAG_REF = ord("c"), ord("s"), 0x80


def _layout_pythons(code):
  """The (lowest, highest) Pythons whose marshal layout `code` has, or None."""
  if not code or code[0] & ~_FLAG_REF != _CODE:
    return None
  found = [pythons for ints, pythons in _LAYOUTS
           if len(code) > 1 + 4 * ints and
           code[1 + 4 * ints] & ~_FLAG_REF == _BYTES]
  return (min(low for low, _ in found),
          max(high for _, high in found)) if found else None


def _bytecode(function_config):
  """The marshalled code a Lambda config holds (TF 2.x: [code, defaults,
  closure] or the code alone, base64), or None."""
  if isinstance(function_config, (list, tuple)) and function_config:
    function_config = function_config[0]
  if not isinstance(function_config, str):
    return None
  try:
    return base64.b64decode(function_config.encode("ascii"))
  except (ValueError, UnicodeEncodeError):
    return None


def _writer_pythons(code, keras_version):
  """The (lowest, highest) Pythons that can have written `code`, or None."""
  layout = _layout_pythons(code)
  tf_pythons = _KERAS_PYTHONS.get(keras_version)
  if layout and tf_pythons:
    both = max(layout[0], tf_pythons[0]), min(layout[1], tf_pythons[1])
    layout = both if both[0] <= both[1] else layout
  return layout or tf_pythons


def class_configs(tree, class_name):
  """The dict `config` of every `class_name` entry in a JSON config tree."""
  for node, _ in _config.json_nodes(tree):
    if (isinstance(node, dict) and node.get("class_name") == class_name and
        isinstance(node.get("config"), dict)):
      yield node["config"]


def check_lambda_bytecode(config, keras_version, source):
  """Refuses Lambda bytecode this Python cannot read (docs/architecture.md)."""
  here = sys.version_info[:2]
  for layer in class_configs(config, "Lambda"):
    for key, kind in (("function", "function_type"),
                      ("output_shape", "output_shape_type")):
      if layer.get(kind) != "lambda":
        continue
      pythons = _writer_pythons(_bytecode(layer.get(key)), keras_version)
      # TF 2.2-2.4 ran on no Python TF 2.18+ supports (nothing is
      # unmarshalled to tell).
      if keras_version not in _KERAS_PYTHONS and (
          pythons is None or pythons[0] <= here <= pythons[1]):
        continue
      low, high = ("%d.%d" % v for v in pythons)
      writer = f"Python {low}" if low == high else f"Python {low}-{high}"
      raise ValueError(
          f"{source!r}: Lambda layer {layer.get('name')!r} holds its "
          f"{key.replace('_', ' ')} as Python bytecode written by {writer} "
          f"(Keras {keras_version}), which Python {here[0]}.{here[1]} cannot "
          "read. Build the model in code (the same layers and layer names, "
          "your lambda included), compile it as the job did, then call "
          f"model.load_weights({source!r}): that restores the weights and "
          "the optimizer state from this file.")
