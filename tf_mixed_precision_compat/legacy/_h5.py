"""Loading TF 2.3/2.4 `model.save("x.h5")` files into compiled Keras 3 models.

Layout of such a file: attributes `model_config` and `training_config`
(JSON); `model_weights/<layer>/` with attribute `weight_names` (`d1/kernel:0`)
and one dataset per name; `optimizer_weights/` with attribute `weight_names`
(`cond_1/Adam/iter:0`, `cond_1/Adam/d1/kernel/m:0`, ...: the optimizer's
name scope, then the weight's own name and the slot name). Weights are matched
by these names, never by position: a layer's weights by layer name and weight
name, a slot by the longest model weight name it ends with. The loss scale
was never stored.
"""

import base64
import sys

import h5py
import numpy as np

from tf_mixed_precision_compat.legacy import _checkpoint
from tf_mixed_precision_compat.legacy import _config
from tf_mixed_precision_compat.optimizers import _keras2_config


def _names(group, source, attribute="weight_names", required=True):
  """The strings of `group.attrs[attribute]` (TF 2.x stored them as bytes)."""
  if attribute not in group.attrs and not required:
    return []
  try:
    names = group.attrs[attribute]
    if isinstance(names, (str, bytes)) or np.ndim(names) != 1:
      raise TypeError(f"a {type(names).__name__}, not a list of names")
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n)
            for n in names]
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


def _strip(name):
  return name[:-2] if name.endswith(":0") else name


def _read(group, name, source, target):
  """The dataset `name` of `group`, read only if it has `target`'s shape.

  A dataset of another shape is not read (a compressed dataset can claim any
  size): a zero-strided stand-in of its shape lets `Plan.bind` report the
  mismatch.
  """
  try:
    dataset = group[name]
    if not isinstance(dataset, h5py.Dataset):
      raise TypeError("not a dataset")
    if tuple(dataset.shape) != tuple(target.shape):
      return np.broadcast_to(np.zeros((), dataset.dtype), dataset.shape)
    return np.asarray(dataset[()])
  except (KeyError, OSError, ValueError, TypeError) as e:
    raise ValueError(f"{source!r}: cannot read {group.name}/{name} "
                     f"(truncated or corrupted file?): {e}") from None


def load(path, safe_mode, custom_objects, compile, allow_partial):  # pylint: disable=redefined-builtin
  """See `legacy.load_model`."""
  try:
    f = h5py.File(path, "r")
  except OSError as e:
    raise OSError(f"Cannot open {path!r} as an HDF5 file (truncated or "
                  f"corrupted?): {e}") from None
  with f:
    try:
      return _load(f, path, safe_mode, custom_objects, compile, allow_partial)
    except (KeyError, RuntimeError) as e:
      raise ValueError(f"{path!r} is corrupted or not a TF 2.x Keras H5 "
                       f"model: {type(e).__name__}: {e}") from None


def _plan_model_weights(f, path, model, plan):
  """Binds the model weights, by layer name then weight name.

  Returns:
    The bound variables by their TF 2.x name (without ":0"), for
    the optimizer weights, which H5 files name after them.
  """
  weights_group = f["model_weights"] if "model_weights" in f else f
  if not isinstance(weights_group, h5py.Group):
    raise ValueError(f"{path!r}: model_weights is not a group; the file is "
                     "corrupted.")
  by_tf_name = {}
  layer_names = _names(weights_group, path, "layer_names", required=False)
  for layer_name in layer_names:
    group = weights_group[layer_name]
    if not isinstance(group, h5py.Group):
      raise ValueError(f"{path!r}: {group.name} is not a group of weights; "
                       "the file is corrupted.")
    names = _names(group, path)
    if not names:
      continue
    try:
      layer = model.get_layer(layer_name)
    except ValueError:
      plan.unmatched_checkpoint.extend(f"{layer_name}/{n}" for n in names)
      continue
    for name in names:
      short = _strip(name).split("/")[-1]
      target = _checkpoint.own_variable(layer, short)
      key = f"model_weights/{layer_name}/{name}"
      if target is None:
        plan.unmatched_checkpoint.append(key)
        continue
      plan.bind(key, target, _read(group, name, path, target))
      by_tf_name[_strip(name)] = target
  return by_tf_name


def _load(f, path, safe_mode, custom_objects, compile, allow_partial):  # pylint: disable=redefined-builtin
  if "model_config" not in f.attrs:
    raise ValueError(f"{path!r} has no model_config: it holds weights only "
                     "(use model.load_weights) or is not a Keras H5 file.")
  config = _config.parse_json(f.attrs["model_config"], "model_config",
                              path)
  check_lambda_bytecode(config, keras_version(f), path)
  model = _config.build_model(config, path, safe_mode, custom_objects)
  plan = _checkpoint.Plan(path)

  by_tf_name = _plan_model_weights(f, path, model, plan)

  optimizer = None
  if compile and "training_config" in f.attrs:
    training_config = _config.parse_json(
        f.attrs["training_config"], "training_config", path)
    optimizer = _config.compile_model(model, training_config, path,
                                      custom_objects, safe_mode)
    _checkpoint.ensure_optimizer_built(model, optimizer)
    if "optimizer_weights" in f:
      plan_optimizer(f["optimizer_weights"], path, optimizer, by_tf_name,
                      plan)

  expected = _checkpoint.expected_objects(model, optimizer)
  unmatched_objects = []
  for obj, description in expected:
    if id(obj) in plan.targets:
      continue
    if description.startswith("optimizer/loss_scale"):
      continue  # Never in H5 files: documented and logged.
    if description == "optimizer/learning_rate":
      continue  # Comes from the optimizer config.
    unmatched_objects.append(description)
  if plan.problems or (not allow_partial and (plan.unmatched_checkpoint or
                                              unmatched_objects)):
    raise _checkpoint.RestoreError(
        path, plan.unmatched_checkpoint, unmatched_objects, plan.problems)
  for _, target, value, _ in plan.assignments:
    target.assign(value)
  if optimizer is not None:
    _config.log_no_loss_scale(path, optimizer)
  return model


def plan_optimizer(group, path, optimizer, by_tf_name, plan):
  inner = _checkpoint.inner_optimizer_of(optimizer)
  slots = _keras2_config.TF2_SLOT_NAMES.get(
      _keras2_config.keras_class_name(inner), {})
  # Longest names first, so "a/b/kernel" wins over "b/kernel".
  known = sorted(by_tf_name, key=len, reverse=True)
  for name in _names(group, path):
    key = f"optimizer_weights/{name}"
    stripped = _strip(name)
    if stripped.split("/")[-1] == "iter":
      plan.bind(key, inner.iterations,
                _read(group, name, path, inner.iterations),
                "optimizer/iterations")
      continue
    scope, _, slot = stripped.rpartition("/")
    owner = next((k for k in known
                  if scope == k or scope.endswith("/" + k)), None)
    keras3_slot = slots.get(slot)
    target = None
    if owner is not None and keras3_slot is not None:
      target = _checkpoint.slot_variable(
          inner, by_tf_name[owner], keras3_slot)
    if target is None:
      plan.unmatched_checkpoint.append(key)
      continue
    plan.bind(key, target, _read(group, name, path, target),
              f"optimizer/{target.name}")



# --------------------------------------------------------------------------
# Lambda layers: Python bytecode of the writer's Python.

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
  if not found:
    return None
  return (min(low for low, _ in found), max(high for _, high in found))


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


def _writer_python(code, keras_version):
  """A readable name of the Python(s) that wrote `code`, or None."""
  layout = _layout_pythons(code) if code is not None else None
  tf_pythons = _KERAS_PYTHONS.get(keras_version)
  if layout and tf_pythons:
    low = max(layout[0], tf_pythons[0])
    high = min(layout[1], tf_pythons[1])
    layout = (low, high) if low <= high else layout
  elif tf_pythons:
    layout = tf_pythons
  if not layout:
    return None
  low, high = ("%d.%d" % v for v in layout)
  return f"Python {low}" if low == high else f"Python {low}-{high}"


def _readable_here(code, keras_version):
  """Whether this Python can read `code` (never unmarshals untrusted data)."""
  if keras_version in _KERAS_PYTHONS:
    return False  # TF 2.2-2.4 ran on no Python TF 2.18+ supports.
  layout = _layout_pythons(code) if code is not None else None
  here = sys.version_info[:2]
  return layout is None or layout[0] <= here <= layout[1]


def _lambda_configs(node):
  """Every Lambda layer config in a model config tree."""
  stack = [node]
  while stack:
    node = stack.pop()
    if isinstance(node, dict):
      if node.get("class_name") == "Lambda" and isinstance(
          node.get("config"), dict):
        yield node["config"]
      stack.extend(node.values())
    elif isinstance(node, list):
      stack.extend(node)


def check_lambda_bytecode(config, keras_version, source):
  """Refuses a model whose Lambda layers hold bytecode this Python can't read.

  Python bytecode is specific to the Python version that wrote it: Keras 2
  (TF 2.2-2.4) saved a `Lambda`'s function as the marshalled code of Python
  3.5-3.8, which the Pythons current TensorFlow runs on cannot load ("bad
  marshal data"), or worse, misread. Nothing is unmarshalled here: the
  writer is told from the file's `keras_version` and the code's layout.

  Args:
    config: The model config (parsed JSON).
    keras_version: The file's `keras_version` attribute, or None.
    source: The file, for the message.

  Raises:
    ValueError: Naming the layer, the Python that wrote it and the way out:
      build the model in code, then `load_weights` the same file.
  """
  for layer in _lambda_configs(config):
    for key, kind in (("function", "function_type"),
                      ("output_shape", "output_shape_type")):
      if layer.get(kind) != "lambda":
        continue
      code = _bytecode(layer.get(key))
      if _readable_here(code, keras_version):
        continue
      writer = _writer_python(code, keras_version) or "another Python"
      here = "%d.%d" % sys.version_info[:2]
      raise ValueError(
          f"{source!r}: Lambda layer {layer.get('name')!r} holds its "
          f"{key.replace('_', ' ')} as Python bytecode written by {writer} "
          f"(Keras {keras_version}), which Python {here} cannot read. Build "
          "the model in code (the same layers and layer names, your lambda "
          "included), compile it as the job did, then call "
          f"model.load_weights({source!r}): that restores the weights and "
          "the optimizer state from this file.")
