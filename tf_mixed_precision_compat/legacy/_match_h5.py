"""Matcher stage for TF 2.x H5 files: weights and optimizer as a `Plan`."""

import tensorflow as tf

from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _read_h5


def expected_objects(models=(), optimizers=()):
  """`_match.expected_objects` less the loss scale and rate H5 files lack."""
  return [(obj, description) for obj, description in
          _match.expected_objects(models, optimizers)
          if not description.startswith("optimizer/loss_scale") and
          description != "optimizer/learning_rate"]


def plan_by_layer_name(layers, path, model, plan):
  """Binds weights by layer and weight name; the variables by TF 2.x name."""
  by_tf_name = {}
  for layer_name, group, weight_names in layers:
    if not weight_names:
      continue
    try:
      layer = model.get_layer(layer_name)
    except ValueError:
      plan.unmatched_checkpoint.extend(
          f"{layer_name}/{n}" for n in weight_names)
      continue
    for name in weight_names:
      target = _match.own_variable(layer, _read_h5.strip(name).split("/")[-1])
      key = f"model_weights/{layer_name}/{name}"
      if target is None:
        plan.unmatched_checkpoint.append(key)
        continue
      plan.bind(key, target, _read_h5.read(group, name, path, target))
      by_tf_name[_read_h5.strip(name)] = target
  return by_tf_name


def _pairs(variables, weight_names):
  """Saved names paired with variables: by name when that is unambiguous."""
  own = [v.name.split("/")[-1] for v in variables]
  theirs = [_read_h5.strip(w).split("/")[-1] for w in weight_names]
  if len(set(own)) == len(own) and sorted(own) == sorted(theirs):
    by_name = dict(zip(own, variables))
    return [(by_name[short], w) for short, w in zip(theirs, weight_names)]
  return list(zip(variables, weight_names))


def _bind_layer(plan, by_tf_name, k, entry, layer, path, skip_mismatch=None):
  """Binds saved layer #`k`, `entry`, to `layer` as TF 2.4's `load_weights`:
  topologically (`skip_mismatch` None: a shape is the plan's problem), or by
  name (a mismatch warned of and skipped, or raised, as TF 2.4 did)."""
  name, group, weights = entry
  warn = tf.get_logger().warning
  # In the order TF 2.x saved and loaded them.
  variables = list(layer.trainable_weights) + list(layer.non_trainable_weights)
  if len(variables) != len(weights):
    if skip_mismatch:
      warn("Skipping loading of weights for layer %s due to mismatch in "
           "number of weights (%d vs %d).", layer.name, len(variables),
           len(weights))
      return
    of_layer = "" if skip_mismatch is not None else f" of layer '{name}'"
    raise ValueError(
        f"Layer #{k} (named \"{layer.name}\") expects {len(variables)} "
        f"weight(s), but the saved weights{of_layer} have {len(weights)} "
        "element(s).")
  for variable, weight_name in _pairs(variables, weights):
    value = _read_h5.read(group, weight_name, path, variable)
    shapes = tuple(variable.shape), tuple(value.shape)
    if skip_mismatch is not None and shapes[0] != shapes[1]:
      if skip_mismatch:
        warn("Skipping loading of weights for layer %s due to mismatch in "
             "shape (%s vs %s).", layer.name, *shapes)
        continue
      raise ValueError(
          f"Layer #{k} (named \"{layer.name}\"), weight {variable.name} has "
          f"shape {shapes[0]}, but the saved weight has shape {shapes[1]}.")
    plan.bind(f"{name}/{weight_name}", variable, value,
              f"{layer.name}/{variable.name}")
    by_tf_name[_read_h5.strip(weight_name)] = variable


def plan_topological(layers, path, model, plan):
  """Binds a `load_weights` file's weights in TF 2.x's topological order."""
  targets = [layer for layer in model.layers if layer.weights]
  saved = [entry for entry in layers if entry[2]]
  if len(saved) != len(targets):
    raise ValueError(
        f"{path!r} holds the weights of {len(saved)} layers, while model "
        f"'{model.name}' has {len(targets)} layers with weights.")
  by_tf_name = {}
  for k, (entry, layer) in enumerate(zip(saved, targets)):
    _bind_layer(plan, by_tf_name, k, entry, layer, path)
  return by_tf_name


def plan_by_name(layers, path, model, plan, skip_mismatch):
  """Binds a `load_weights` file's weights by layer name (`by_name=True`)."""
  index, by_tf_name = {}, {}
  for layer in model.layers:
    index.setdefault(layer.name, []).append(layer)
  for k, entry in enumerate(layers):
    for layer in index.get(entry[0], []) if entry[2] else []:
      _bind_layer(plan, by_tf_name, k, entry, layer, path, skip_mismatch)
  return by_tf_name


def saved_slots(group, path, by_tf_name):
  """Each `optimizer_weights` entry (`cond_1/Adam/d1/kernel/m:0`, ...) as
  (its name, its TF 2.x slot name or "iter", the variable in `by_tf_name` it
  belongs to or None): the longest variable name its scope ends with."""
  known = sorted(by_tf_name, key=len, reverse=True)
  for name in _read_h5.names(group, path):
    scope, _, slot = _read_h5.strip(name).rpartition("/")
    owner = next((k for k in known
                  if scope == k or scope.endswith("/" + k)), None)
    yield name, slot, None if owner is None else by_tf_name[owner]


def plan_optimizer(group, path, optimizer, by_tf_name, plan):
  """Binds `optimizer_weights` to the iterations and `by_tf_name`'s slots."""
  inner = _match.inner_optimizer_of(optimizer)
  for name, slot, owner in saved_slots(group, path, by_tf_name):
    key = f"optimizer_weights/{name}"
    if slot == "iter":
      plan.bind(key, inner.iterations,
                _read_h5.read(group, name, path, inner.iterations),
                "optimizer/iterations")
      continue
    target = None if owner is None else _match.slot_variable(inner, owner,
                                                             slot)
    if target is None:
      plan.unmatched_checkpoint.append(key)
      continue
    plan.bind(key, target, _read_h5.read(group, name, path, target),
              f"optimizer/{target.name}")
