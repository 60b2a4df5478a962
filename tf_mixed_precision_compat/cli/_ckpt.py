"""What a TF 2.2-2.4 or Keras 3 checkpoint holds, read from its keys alone."""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any, Optional

import numpy as np

from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.legacy import _layout
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _read_checkpoint
from tf_mixed_precision_compat.optimizers import _keras2_config

_VALUE = _read_checkpoint.VALUE_SUFFIX
_SLOT = "/.OPTIMIZER_SLOT/"


def _slot_classes() -> dict:
  """`{TF 2.x slot names: the first TF 2.x class that makes just those}`."""
  out: dict = {}
  for name in _keras2_config.KERAS2_OPTIMIZERS.values():  # Adam first.
    slots = _keras2_config.SLOTS[name]
    optional = [s.tf2 for s in slots if s.optional]
    for n in range(len(optional) + 1):
      for extra in itertools.combinations(optional, n):
        names = frozenset(s.tf2 for s in slots if not s.optional).union(extra)
        if names:  # No slots tell no class.
          out.setdefault(names, name)
  return out


_SLOT_CLASSES = _slot_classes()
# Same slots, other class: named so a user can correct the guess.
_LOOKALIKES = {"Adam": "Adamax and Nadam keep the same m and v slots"}
_SGD_HYPERS = {"learning_rate", "decay", "momentum"}
# Keras 3 slot names, longest first (a suffix of a variable's name tells
# it), and the classes whose default names prefix their variables.
_KERAS3_SLOTS = sorted({s.keras3 for slots in _keras2_config.SLOTS.values()
                        for s in slots}, key=len, reverse=True)
_KERAS3_CLASSES = {_match.snake_case(c): c
                   for c in (*_keras2_config.SLOTS, "Lion")}


@dataclasses.dataclass
class OptimizerInfo:
  """One optimizer found in a checkpoint.

  Attributes:
    path: Its object path (`optimizer`, `trainer/optimizer`).
    layout: "keras2" (TF 2.x OptimizerV2) or "keras3".
    inner_path: Where the inner optimizer's own variables are.
    class_name: The class its slots and hyperparameters point to, or None.
    class_note: Why, and what else it could be.
    hyperparameters: `{name: value}` of the stored hyperparameters.
    iterations: The stored step count, or None.
    slots: `{variable path: [slot names]}`.
    loss_scale: `{"type", "value", "counter", "growth_steps"}` or None.
  """
  path: str
  layout: str
  inner_path: str
  class_name: Optional[str] = None
  class_note: str = ""
  hyperparameters: dict = dataclasses.field(default_factory=dict)
  iterations: Optional[int] = None
  slots: dict = dataclasses.field(default_factory=dict)
  loss_scale: Optional[dict] = None


@dataclasses.dataclass
class CheckpointInfo:
  """A checkpoint's contents, grouped for people.

  Attributes:
    prefix: The checkpoint's prefix.
    generation: Which TensorFlow / Keras wrote it, in words.
    weights: `{variable path: (shape, dtype)}` of model-like variables.
    optimizers: The `OptimizerInfo` of each optimizer found.
    other: `{key: value or (shape, dtype)}` of everything else.
  """
  prefix: str
  generation: str
  weights: dict = dataclasses.field(default_factory=dict)
  optimizers: list = dataclasses.field(default_factory=list)
  other: dict = dataclasses.field(default_factory=dict)


# What a name-based checkpoint is, and how its job resumes without us.
NAME_BASED = ("a name-based TF1 checkpoint (tf.compat.v1.train.Saver; no "
              "object graph)")
NAME_BASED_PATH = (
    "its native path is the job's own graph code, which TF 2.21 still runs: "
    "tf.compat.v1.train.Saver().restore(sess, path) restores every variable "
    "by name, the loss scale's current_loss_scale and good_steps included "
    "(tf.compat.v1.mixed_precision's MixedPrecisionLossScaleOptimizer and "
    "enable_mixed_precision_graph_rewrite are still shipped); there are no "
    "Keras objects to convert. To move the job to Keras 3, build its model "
    "and optimizer and assign each variable from "
    "tf.train.load_checkpoint(path).get_tensor(name)")


def _variables(reader: Any, name_based: bool = False) -> dict:
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  if name_based:  # Keys are the variables' own names.
    return {key: (list(shapes[key]), dtypes[key].name) for key in shapes}
  return {key[:-len(_VALUE)]: (list(shapes[key]), dtypes[key].name)
          for key in shapes if key.endswith(_VALUE)}


def _scalar(reader: Any, path: str, suffix: str = _VALUE) -> Any:
  value = reader.get_tensor(path + suffix)
  if getattr(value, "dtype", None) == np.float32:
    # The shortest decimal that reads back as this float32 (0.9, not
    # 0.8999999761581421), which is how the job's author wrote it.
    return float(str(np.float32(value)))
  value = value.item() if hasattr(value, "item") else value
  return value.decode() if isinstance(value, bytes) else value


def _optimizer_roots(graph: Any) -> list[tuple[str, str, str]]:
  """`(path, layout, inner path)` of each optimizer, as `_layout` tells."""
  roots = []
  evidence = _layout.Evidence(graph)
  for layout, step, wrapped in (("keras2", "iter", "base_optimizer"),
                                ("keras3", "_iterations", "inner_optimizer")):
    nodes = evidence.optimizers[layout]
    for node in nodes - {graph.child(n, wrapped) for n in nodes}:
      inner = graph.child(node, wrapped)
      own_step = graph.child(node, step) is not None
      # TF 2.3-2.4's wrappers hold their inner optimizer's `iter` (and its
      # state); TF 2.2's and Keras 3's keep it under the inner one.
      if inner is None or (layout == "keras2" and own_step):
        inner = node
      key, end = graph.variable_child(inner, step) or "", f"/{step}{_VALUE}"
      inner_path = key[:-len(end)]
      path = inner_path if inner == node else inner_path[:-len(wrapped) - 1]
      # A step stored elsewhere first (an alias of the job's `global_step`)
      # names no path to the optimizer: it is listed as other variables.
      if key.endswith(end) and (inner == node or
                                inner_path.endswith("/" + wrapped)):
        roots.append((path, layout, inner_path))
  return sorted(roots)


def _slots(variables: dict, info: OptimizerInfo) -> None:
  for path in variables:
    if _SLOT not in path:
      continue
    var, _, rest = path.partition(_SLOT)
    owner, _, slot = rest.rpartition("/")
    if owner in (info.path, info.inner_path):
      info.slots.setdefault(var, []).append(slot)
      info.slots[var].sort()


def _guess_class(info: OptimizerInfo) -> None:
  names = set().union(*info.slots.values()) if info.slots else set()
  name = _SLOT_CLASSES.get(frozenset(names))
  if name is not None:
    info.class_name = name
    info.class_note = (f"from its slots ({', '.join(sorted(names))})"
                       + (f"; {_LOOKALIKES[name]}" if name in _LOOKALIKES
                          else ""))
    return
  if not names and set(info.hyperparameters) <= _SGD_HYPERS:
    info.class_name = "SGD"
    info.class_note = ("no slots and only SGD's hyperparameters "
                       f"({', '.join(sorted(info.hyperparameters))}): "
                       "SGD without momentum (or no step taken yet)")
    return
  info.class_note = (f"slots {sorted(names)} and hyperparameters "
                     f"{sorted(info.hyperparameters)} name no single class")


def _optimizer(reader: Any, graph: Any, variables: dict, path: str,
               layout: str, inner: str) -> OptimizerInfo:
  info = OptimizerInfo(path=path, layout=layout, inner_path=inner)
  step = "iter" if layout == "keras2" else "_iterations"
  if inner + "/" + step in variables:
    info.iterations = int(_scalar(reader, inner + "/" + step))
  for var, (shape, dtype) in variables.items():
    head, _, leaf = var.rpartition("/")
    if head == inner and not shape and leaf != step and dtype.startswith(
        "float"):
      info.hyperparameters[leaf.lstrip("_")] = _scalar(reader, var)
  _slots(variables, info)
  if layout == "keras3":
    _keras3_slots(graph, variables, info)
  tf24 = (path + "/loss_scale/current_loss_scale",
          path + "/loss_scale/good_steps")
  scale, counter = tf24 if layout == "keras2" else (
      path + "/dynamic_scale", path + "/step_counter")
  if layout == "keras3" and scale not in variables and tf24[0] in variables:
    # This package's LossScaleOptimizer on TF 2.16+: TF 2.4's loss-scale
    # entries beside Keras 3 optimizer state.
    info.layout = "keras3 (this package)"
    scale, counter = tf24
  if scale in variables:
    info.loss_scale = {
        "type": "dynamic", "value": _scalar(reader, scale),
        "counter": int(_scalar(reader, counter)) if counter in variables
        else None,
        "growth_steps": None if layout == "keras2" else "not stored"}
  if layout == "keras2":
    _guess_class(info)
  return info


def _keras3_slots(graph: Any, variables: dict, info: OptimizerInfo) -> None:
  """Slots from `_variables/N`'s names: `<optimizer name>/<variable>_<slot>`."""
  names = {key[:-len(_VALUE)]: name  # The variables' names when saved.
           for key, name in filter(None, map(graph.variable,
                                             range(len(graph.nodes))))}
  owners = set()
  for var in sorted(variables):
    head, _, index = var.rpartition("/")
    if head != info.inner_path + "/_variables":
      continue
    owner, _, rest = names.get(var, "").partition("/")
    slot = next((s for s in _KERAS3_SLOTS if rest.endswith("_" + s)), None)
    if slot is None:
      info.slots.setdefault("(unnamed)", []).append(f"_variables/{index}")
      continue
    owners.add(re.sub(r"_\d+$", "", owner))
    info.slots.setdefault(rest[:-len(slot) - 1], []).append(slot)
  for slots in info.slots.values():
    slots.sort()
  kinds = sorted(set().union(*info.slots.values())) if info.slots else []
  if len(owners) == 1 and owners <= set(_KERAS3_CLASSES):
    info.class_name = _KERAS3_CLASSES[owners.pop()]
    info.class_note = ("from its variables' names (Keras names an optimizer "
                       "after its class unless the job named it); slots "
                       f"{', '.join(kinds) or 'none'}")
  else:
    info.class_note = (f"Keras 3 stores no class name; slots "
                       f"{', '.join(kinds) or 'none'}")


def _generation(optimizers: list, writers: set) -> str:
  """Which TensorFlow / Keras wrote it; `writers`: `_layout.describe`'s."""
  if any(o.layout == "keras3 (this package)" for o in optimizers):
    return ("this package on TF 2.16 or later: Keras 3 optimizer state "
            "(`_iterations`, `_variables`) with TF 2.4's `loss_scale/` "
            "entries")
  if any(o.layout == "keras3" for o in optimizers):
    return ("Keras 3 (TF 2.16 or later): optimizer state as `_iterations` "
            "and `_variables`")
  if not optimizers:
    if "keras2" in writers:
      return ("TF 2.x Keras (tf.keras before Keras 3; `layer_with_weights-N`"
              " names), no optimizer")
    return "a TF 2.x object-based checkpoint without any Keras optimizer"
  opt = optimizers[0]
  if opt.inner_path.endswith("/base_optimizer"):
    return ("TF 2.2 Keras: the experimental LossScaleOptimizer's inner "
            "optimizer under `base_optimizer`" + (
                "" if opt.loss_scale else "; no loss-scale variables (a "
                "fixed loss scale, whose value TF never stored)"))
  if opt.loss_scale is not None:
    return ("TF 2.3 or 2.4 Keras: OptimizerV2 state (`iter`, slots) with a "
            "dynamic loss scale under `loss_scale/` (the experimental or "
            "TF 2.4 LossScaleOptimizer)")
  return ("TF 2.2-2.4 Keras: OptimizerV2 state (`iter`, slots) and no "
          "loss-scale variables (a fixed loss scale, whose value TF never "
          "stored, or no loss-scale optimizer)")


def describe(path: str) -> CheckpointInfo:
  """The `CheckpointInfo` of the checkpoint at `path` (prefix or directory).

  Raises:
    FileNotFoundError: If there is no checkpoint there.
    ValueError: If it cannot be read (every value is read once, so a
      truncated or corrupt data file is found here).

  Example:

  >>> describe("/no/such/ckpt")
  Traceback (most recent call last):
  ...
  FileNotFoundError: No checkpoint at '/no/such/ckpt': ...
  """
  prefix = legacy.checkpoint_prefix(path)
  reader = legacy.open_checkpoint(prefix)
  _read_checkpoint.check_values(reader, prefix)
  # TF1's name-based checkpoints have no object graph (nor optimizers).
  name_based = (_read_checkpoint.OBJECT_GRAPH_KEY not in
                reader.get_variable_to_shape_map())
  variables = _variables(reader, name_based)
  roots, writers, graph = [], set(), None
  if not name_based:
    graph = _read_checkpoint.read_object_graph(reader, "checkpoint")
    roots = _optimizer_roots(graph)
    writers = set(_layout.describe(reader, graph).values())
  optimizers = [_optimizer(reader, graph, variables, *root)
                for root in roots]
  info = CheckpointInfo(
      prefix=prefix, optimizers=optimizers,
      generation=(NAME_BASED if name_based else
                  _generation(optimizers, writers)))
  owned = [o.path + "/" for o in optimizers]
  for var, spec in variables.items():
    if _SLOT in var or any(var.startswith(p) for p in owned):
      continue
    if spec[0]:
      info.weights[var] = spec
    else:  # Scalars: counters and flags beside the model (step, epoch).
      info.other[var] = _scalar(reader, var, "" if name_based else _VALUE)
  if any(o.layout.startswith("keras3") for o in optimizers):
    _keras3_model_paths(graph, info, variables)
  return info


def _keras3_model_paths(graph: Any, info: CheckpointInfo,
                        variables: dict) -> None:
  """Names Keras 3 model weights by their model path, not the optimizer's."""
  paths = {}  # {key prefix: the object paths to it, shortest first}
  for node_id, found in graph.paths(0).items():
    variable = graph.variable(node_id)
    if variable is not None:
      key = variable[0][:-len(_VALUE)]
      paths[key] = sorted(("/".join(p) for p in found), key=len) or [key]
  for opt in info.optimizers:
    for key, spec in variables.items():
      # Keras 3.7 keeps them under the inner optimizer, later under the
      # wrapper: the first path TF's checkpoint found to each variable.
      if key.startswith(opt.path + "/") and "/_trainable_variables/" in key:
        names = [p for p in paths.get(key, [key])
                 if not p.startswith(opt.path + "/")]
        info.weights[names[0] if names else key] = spec
