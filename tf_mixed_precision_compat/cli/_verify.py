"""Reads a converted checkpoint back as a Keras 3 job would, package-free.

`convert` runs `python _verify.py SPEC.json` in a fresh interpreter that
cannot import the package, so the restore is TF's and Keras 3's own. Exit
code 0 when every value matches SPEC's `.npz`, else 1 (the differences on
stdout). `tree` and `values` are shared with `convert`, which writes what
it reads.
"""

import importlib
import importlib.abc
import importlib.util
import json
import os
import sys


class _NoPackage(importlib.abc.MetaPathFinder):
  """Makes `import tf_mixed_precision_compat` fail in this process."""

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname.split(".")[0] == "tf_mixed_precision_compat":
      raise ImportError(
          f"{fullname} imported during verification: the converted "
          "checkpoint must restore without the package, so --model must "
          "name a module that does not import it")
    return None


def _function(spec):
  module_name, _, function = spec.rpartition(":")
  if module_name.endswith(".py") or os.sep in module_name:
    name = os.path.splitext(os.path.basename(module_name))[0]
    loader = importlib.util.spec_from_file_location(name, module_name)
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    loader.loader.exec_module(module)
  else:
    sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
  return getattr(module, function)


def tree(entries, make_node):
  """`{root name: object, or a node holding those below it}` of
  `(path, object)` entries: `tf.train.Checkpoint`'s keyword arguments."""
  nested = {}
  for path, variable in entries:
    node = nested
    for name in path[:-1]:
      node = node.setdefault(name, {})
    node[path[-1]] = variable

  def build(value):
    if not isinstance(value, dict):
      return value
    node = make_node()
    for name, child in value.items():
      setattr(node, name, build(child))
    return node

  return {name: build(value) for name, value in nested.items()}


def _restore(spec):
  """The model, a native optimizer and the extras, restored from SPEC."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if spec["policy"]:
    keras.mixed_precision.set_global_policy(spec["policy"])
  # The `--model` function's model, else the `.keras` file's, uncompiled as
  # convert wrote the checkpoint: its optimizer is the root's.
  if spec.get("builder_optimizer"):  # `(model, the job's optimizer)`.
    model, given = _function(spec["model"])()
    inner = getattr(given, "inner_optimizer", given)
  else:
    model = (_function(spec["model"])() if spec["model"] else
             keras.models.load_model(spec["keras_file"], compile=False))
    inner = getattr(keras.optimizers, spec["optimizer"])(**spec["kwargs"])
  opt = inner if spec.get("plain") else keras.optimizers.LossScaleOptimizer(
      inner, initial_scale=spec["initial_scale"],
      dynamic_growth_steps=spec["growth_steps"])
  extra = {tuple(path): tf.Variable(tf.zeros([], dtype))
           for path, dtype in spec["extra"]}
  # Where convert wrote them: as the job's own Checkpoint restores them.
  entries = [(tuple(spec["model_path"]), model),
             (tuple(spec["optimizer_path"]), opt)]
  ckpt = tf.train.Checkpoint(**tree(entries + list(extra.items()),
                                    tf.__internal__.tracking.AutoTrackable))
  # The restore docs/migration.md prescribes: the optimizer built first, so
  # every slot exists when the checkpoint's values arrive.
  opt.build(model.trainable_variables)
  status = ckpt.restore(tf.train.latest_checkpoint(spec["directory"]))
  status.assert_consumed()
  return model, opt, extra


def values(model, optimizer, extras, prefix=""):
  """`{key: variable}` of a converted job, keyed as SPEC's `.npz` is."""
  out = {f"{prefix}weight/{i}": v for i, v in enumerate(model.weights)}
  out.update({f"{prefix}optimizer/{i}": v
              for i, v in enumerate(optimizer.variables)})
  out.update({f"extra/{'.'.join(path)}": v for path, v in extras.items()})
  return out


def _keras_file(spec):
  """`{key: value}` of what the `.keras` file holds, as in `expected`."""
  import keras  # pylint: disable=g-import-not-at-top
  if not spec.get("keras_file"):
    return {}
  model = keras.models.load_model(spec["keras_file"])
  return values(model, model.optimizer, {}, "keras:")


def differences(got, expected, limit=3):
  """Lines naming the first `limit` values of `got` (variables) that are
  not `expected`'s (arrays by the same key), and the first element off."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  lines = []
  for key in sorted(set(got) | set(expected), key=str):
    name = getattr(got.get(key), "path", None) or key
    if key not in expected or key not in got:
      side = "read back" if key in expected else "written"
      lines.append(f"{name} ({key}): not {side}")
    else:
      value = np.asarray(got[key].numpy())
      want = np.asarray(expected[key])
      if value.shape != want.shape:
        lines.append(f"{name} ({key}): shape {value.shape}, written "
                     f"{want.shape}")
      elif not np.array_equal(value, want):
        at = int(np.flatnonzero(value.ravel() != want.ravel())[0])
        lines.append(f"{name} ({key}): element {at} is "
                     f"{value.ravel()[at]!r}, written {want.ravel()[at]!r}")
    if len(lines) == limit:
      break
  return lines


def main(spec_path):
  """Restores and compares; returns the exit code."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  with open(spec_path) as f:
    spec = json.load(f)
  keras_file = _keras_file(spec)
  model, opt, extra = _restore(spec)
  saved = np.load(spec["expected"])
  # The `.keras` file's values are checked against the same numbers.
  expected = {key: saved[key] for key in saved.files}
  expected.update({f"keras:{key}": expected[key] for key in list(expected)
                   if f"keras:{key}" in keras_file})
  got = {**keras_file, **values(model, opt, extra)}
  wrong = differences(got, expected, limit=len(got) + len(expected))
  inner = getattr(opt, "inner_optimizer", opt)
  scaled = inner is not opt
  print(json.dumps({
      "wrong": wrong, "iterations": int(inner.iterations.numpy()),
      "loss_scale": float(opt.dynamic_scale.numpy()) if scaled else None,
      "counter": int(opt.step_counter.numpy()) if scaled else None}))
  return 1 if wrong else 0


if __name__ == "__main__":
  # Not this script's directory (the package's cli/) on the path; the
  # package itself cannot be imported at all.
  sys.path = [p for p in sys.path if os.path.abspath(p or ".") !=
              os.path.dirname(os.path.abspath(__file__))]
  sys.meta_path.insert(0, _NoPackage())
  sys.exit(main(sys.argv[1]))
