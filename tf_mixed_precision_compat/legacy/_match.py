"""Matcher stage: a checkpoint's object graph and values, as a `Plan`."""

import contextlib
import re

import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _problems
from tf_mixed_precision_compat.legacy import _read_checkpoint
from tf_mixed_precision_compat.optimizers import _inner
from tf_mixed_precision_compat.optimizers import _keras2_config
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

# How TF 2.x Sequential and functional models named their layers.
LAYER_INDEX = re.compile(r"^layer(_with_weights)?-(\d+)$")

# Hyperparameter variables TF 2.x kept, restored as Keras 3 attributes.
_HYPER_ATTRIBUTES = ("momentum", "beta_1", "beta_2", "rho", "epsilon")

# Children of a TF 2.x Keras model that only alias its layers' variables or
# hold Keras bookkeeping (SavedModels): never followed to find a weight.
MODEL_ALIASES = frozenset({
    "variables", "trainable_variables", "non_trainable_variables",
    "regularization_losses", "keras_api", "signatures",
    "_default_save_signature", "optimizer", "layer_regularization_losses",
    "layer_metrics", "metrics", "compiled_metrics", "compiled_loss",
    "_self_saveable_object_factories",
})


def is_variable(obj):
  return isinstance(obj, (keras.Variable, tf.Variable))


def target_name(variable):
  return getattr(variable, "path", None) or variable.name


class Plan:
  """Checkpoint values bound to Keras 3 targets, checked before assignment."""

  def __init__(self, source, reader=None, graph=None):
    self.source, self.reader, self.graph = source, reader, graph
    self.assignments = []  # (key, target, value, description)
    self.targets = {}  # id(target) -> key
    self.problems = []  # `_problems.Problem`s
    self.unmatched_checkpoint = []
    self.unmatched_objects = []
    self.ignored = []
    self.hyper = {}
    self.hyper_keys = []
    self.bound_nodes = {}  # model variable node -> its Keras 3 variable
    self.notes = []

  def value(self, key):
    """The checkpoint value of `key`, errors naming the source."""
    return _read_checkpoint.read_value(self.reader, key, self.source)

  def check(self, key, like, value, description):
    """Whether `value` fits a variable like `like` (else a problem)."""
    value = np.asarray(value)
    want_dtype = np.dtype(tf.as_dtype(like.dtype).as_numpy_dtype)
    for kind, found, expected in (
        (_problems.SHAPE, tuple(value.shape), tuple(like.shape)),
        (_problems.DTYPE, value.dtype, want_dtype)):
      if found != expected:
        self.problems.append(
            _problems.Problem(kind, key, description, found, expected))
        return False
    return True

  def bind(self, key, target, value, description=None):
    description = description or target_name(target)
    if id(target) in self.targets:
      self.problems.append(_problems.Problem(
          _problems.TWICE, key, description, other=self.targets[id(target)]))
      return
    value = np.asarray(value)
    if not self.check(key, target, value, description):
      return
    self.targets[id(target)] = key
    self.assignments.append((key, target, value, description))


def inner_optimizer_of(optimizer):
  if isinstance(optimizer, loss_scale_optimizer.LossScaleOptimizer):
    return optimizer.inner_optimizer
  return optimizer


def is_built(optimizer):
  return bool(getattr(inner_optimizer_of(optimizer), "built", True))


def slot_variable(inner, variable, tf2_name):
  """The Keras 3 slot a TF 2.x slot `tf2_name` of `variable` is, or None."""
  keras3_name = _keras2_config.TF2_SLOT_NAMES.get(
      _keras2_config.keras_class_name(inner), {}).get(tf2_name)
  if keras3_name is None:
    return None
  return _inner.Keras3Inner(inner).find_slot(variable, keras3_name)


# Weights TF 2.x's Keras named otherwise than Keras 3 does, from both
# versions' layer code: {Keras 3 class: {TF 2.x attribute: Keras 3 one}}.
# The others keep their names (SeparableConv's depthwise_kernel and
# pointwise_kernel, Embedding's embeddings, BatchNormalization's four, the
# RNN cells' kernel, recurrent_kernel and bias, PReLU's alpha).
RENAMED_WEIGHTS = {
    "DepthwiseConv1D": {"depthwise_kernel": "kernel"},
    "DepthwiseConv2D": {"depthwise_kernel": "kernel"},
}


def own_variable(layer, name):
  """The variable of `layer` a TF 2.x checkpoint names `name`, or None."""
  for cls in type(layer).__mro__:
    name = RENAMED_WEIGHTS.get(cls.__name__, {}).get(name, name)
  found = getattr(layer, name, None) if not name.startswith("_") else None
  if is_variable(found):
    return found
  own = [v for v in layer.weights if v.name == name]
  # Layers with sub-layers: only a variable named like this, once.
  return own[0] if len(own) == 1 else None


def _model_weights(model):
  """`model.weights`, and those of layers set as its attributes (Keras < 3.14
  leaves a functional model's out)."""
  weights = {id(v): v for v in model.weights}
  for child in _private_api.trackable_children(model).values():
    if isinstance(child, keras.layers.Layer):
      weights.update((id(v), v) for v in child.weights)
  return list(weights.values())


def expected_objects(models=(), optimizers=()):
  """Keras 3 state a full restore must assign: (object, description)."""
  expected = [(v, target_name(v)) for model in models if model is not None
              for v in _model_weights(model)]
  for optimizer in [o for o in optimizers if o is not None]:
    expected += [(v, f"optimizer/{v.name}")
                 for v in inner_optimizer_of(optimizer).variables]
    state = loss_scale_optimizer.loss_scale_state(optimizer)
    if state is not None:
      expected.append((state.current_loss_scale, "optimizer/loss_scale"))
      expected.append((state.counter, "optimizer/loss_scale counter"))
  return expected


def check_built(model, source):
  if not model.weights:
    raise ValueError(
        f"Cannot restore {source!r} into model '{model.name}': it has no "
        "weights yet. Build it first (call it on a batch or model.build()).")


def build_optimizer(optimizer, models):
  """Creates the optimizer's slots for the models, in their strategy."""
  if optimizer is None or is_built(optimizer) or not models:
    return
  variables = [v for model in models for v in model.trainable_variables]
  strategy = getattr(models[0], "distribute_strategy", None)
  scope = (strategy.scope() if strategy is not None and
           not tf.distribute.has_strategy() else contextlib.nullcontext())
  with scope:
    optimizer.build(variables)


def _step(obj, name):
  """One child-name step on a Keras 3 object; None when there is none."""
  match = LAYER_INDEX.match(name)
  if match and isinstance(obj, keras.Model):
    # `layer_with_weights-N` counts only the layers that have weights.
    layers = [layer for layer in obj.layers
              if layer.weights or not match.group(1)]
    index = int(match.group(2))
    return layers[index] if index < len(layers) else None
  if isinstance(obj, keras.layers.Layer):
    variable = own_variable(obj, name)
    if variable is not None:
      return variable
  if isinstance(obj, (list, tuple)):
    return obj[int(name)] if name.isdigit() and int(name) < len(obj) else None
  if isinstance(obj, dict):
    return obj.get(name)
  if name.startswith("_"):
    # Only a layer's private sub-layers (MultiHeadAttention's `_query_dense`
    # in both Kerases), never other private state.
    found = getattr(obj, name, None) if isinstance(
        obj, keras.layers.Layer) else None
    return found if isinstance(found, keras.layers.Layer) else None
  try:
    return getattr(obj, name, None)
  except Exception:  # pylint: disable=broad-except
    return None


def _follow(model, path):
  """(variable, last layer) reached by `path` from `model`, or (None, None)."""
  obj, layer = model, None
  for name in path:
    obj = _step(obj, name)
    if obj is None:
      return None, None
    if isinstance(obj, keras.layers.Layer):
      layer = obj
  return (obj, layer) if is_variable(obj) else (None, None)


def plan_restore(reader, graph, source, models, optimizers, ignored_nodes=(),
                 scope=None):
  """The `Plan` binding `reader`'s values to `(node id, object)` pairs;
  `scope`: nodes whose unmatched variables are listed (None: all)."""
  for _, model in models:
    check_built(model, source)
  plan = Plan(source, reader, graph)
  ignored = graph.variable_node_set(ignored_nodes)
  # Variables only reachable through `keras_api` are SavedModel bookkeeping
  # (compiled metrics' totals and counts).
  ignored.update(set(graph.variable_nodes_under(0)) -
                 set(graph.variable_nodes_under(0, skip={"keras_api"})))
  optimizer_vars = graph.variable_node_set(n for n, _ in optimizers)
  for node_id, model in models:
    _plan_model(plan, model, node_id, optimizer_vars)
  for node_id, optimizer in optimizers:
    _plan_optimizer(plan, optimizer, node_id)
  _list_leftovers(plan, ignored, scope)
  return plan


def snake_case(class_name, keras2=False):
  """The stem Keras 3 (or 2) gives an object's automatic names: Keras 2
  also split before capitals followed by digits."""
  lower = "a-z0-9" if keras2 else "a-z"
  words = re.sub(f"(.)([A-Z][{lower}]+)", r"\1_\2", class_name)
  snake = re.sub("([a-z])([A-Z])", r"\1_\2", words).lower()
  return "private" + snake if keras2 and snake.startswith("_") else snake


def is_automatic_name(name, layer):
  """Whether `name` is one Keras 2 or 3 would make up for a layer like
  `layer`: such names shift with what a process built before."""
  return any(
      re.fullmatch(re.escape(snake_case(type(layer).__name__, k2)) +
                   r"(_\d+)?", name) for k2 in (False, True))


def _swapped(recorded, layer, layers_by_name):
  """Whether a weight of the old job's layer `recorded` reaches `layer`
  while the model has its own layer `recorded`: another arrangement, unless
  both names are only Keras's automatic ones."""
  if not recorded or layer is None or recorded == layer.name:
    return False
  other = layers_by_name.get(recorded)
  return other is not None and not (is_automatic_name(recorded, other) and
                                    is_automatic_name(layer.name, layer))


def _through_metric(model, path):
  """Whether `path` reaches a variable through a metric (one set as an
  attribute of the model or a layer, as Keras 3 has it too)."""
  obj = model
  for name in path:
    if isinstance(obj, keras.metrics.Metric):
      return True
    obj = _step(obj, name)
    if obj is None:
      return False
  return False


def _counts_every_layer(path):
  """Whether `path` steps through TF 2.x's `layer-N` (not `_with_weights`)."""
  return any(m and not m.group(1) for m in map(LAYER_INDEX.match, path))


def _by_weighted_layers(paths):
  """`paths`, without their `layer-N` ones when others reach the variable:
  TF 2.x's `layer-N` counted the layers Keras 2 made of TensorFlow ops
  (`tf.nn.relu(x)` in a functional model), which Keras 3 does not make;
  `layer_with_weights-N` counts only layers both have."""
  others = [path for path in paths if not _counts_every_layer(path)]
  return others or paths


def _plan_model(plan, model, model_node, optimizer_vars):
  """Binds the model's weights, following each variable's paths."""
  layers_by_name = {layer.name: layer for layer in
                    _private_api.keras_nested_layers(model)}
  graph = plan.graph
  metric_keys = []
  for node_id, paths in sorted(
      graph.paths(model_node, skip=MODEL_ALIASES).items()):
    var_info = graph.variable(node_id)
    if var_info is None or node_id in optimizer_vars:
      continue
    key, full_name = var_info
    if any(_through_metric(model, path) for path in paths):
      metric_keys.append(key)
      continue
    found = {}
    for path in _by_weighted_layers(paths):
      target, layer = _follow(model, path)
      if target is not None:
        found[id(target)] = (target, layer)
    if not found:
      continue
    if len(found) > 1:
      plan.problems.append(_problems.Problem(
          _problems.AMBIGUOUS, key,
          ", ".join(target_name(t) for t, _ in found.values())))
      continue
    target, layer = next(iter(found.values()))
    recorded_layer = full_name.split("/")[-2] if "/" in full_name else None
    if _swapped(recorded_layer, layer, layers_by_name):
      plan.problems.append(_problems.Problem(
          _problems.STRUCTURE, key, layer.name, found=recorded_layer))
      continue
    plan.bound_nodes[node_id] = target
    plan.bind(key, target, plan.value(key))
  if metric_keys:
    plan.ignored += metric_keys
    shown = ", ".join(k.replace(_read_checkpoint.VALUE_SUFFIX, "")
                      for k in metric_keys[:2])
    shown += ", ..." if len(metric_keys) > 2 else ""
    plan.notes.append(
        f"metric state left out ({len(metric_keys)} values: {shown}): "
        "metrics' accumulators are not training state; they start afresh")


def _list_leftovers(plan, ignored, scope):
  """Fills `plan.unmatched_checkpoint` / `plan.ignored` from what is left."""
  graph = plan.graph
  in_scope = None if scope is None else graph.variable_node_set(scope)
  done = {key for key, _, _, _ in plan.assignments}.union(plan.hyper_keys)
  # A key bound twice stays listed: its value restores nothing.
  refused = {p.key for p in plan.problems if p.kind != _problems.TWICE}
  for node_id in range(len(graph.nodes)):
    info = graph.variable(node_id)
    if info is None or (in_scope is not None and node_id not in in_scope):
      continue
    key = info[0]
    if key in done or key in plan.ignored:
      continue
    if node_id in ignored:
      plan.ignored.append(key)
    elif key not in plan.unmatched_checkpoint and key not in refused:
      plan.unmatched_checkpoint.append(key)


def inner_optimizer_node(graph, optimizer_node):
  """The node of the inner optimizer's state: itself or its TF 2.2 child."""
  if graph.child(optimizer_node, "iter") is None:
    base = graph.child(optimizer_node, "base_optimizer")
    if base is not None and graph.child(base, "iter") is not None:
      return base  # TF 2.2 tracked the inner optimizer under this name.
  return optimizer_node


def _plan_optimizer(plan, optimizer, optimizer_node):
  """Binds the optimizer's entries (iterations, hypers, slots, loss scale)."""
  graph = plan.graph
  inner = inner_optimizer_of(optimizer)
  inner_node = inner_optimizer_node(graph, optimizer_node)
  for name, child in graph.children(inner_node):
    info = graph.variable(child)
    if info is not None:
      _plan_inner_variable(plan, inner, name, info[0], plan.value(info[0]))
  _plan_slots(plan, inner, inner_node)
  loss_scale_node = graph.child(optimizer_node, "loss_scale")
  if loss_scale_node is not None:
    _plan_loss_scale(plan, optimizer, loss_scale_node)


def _plan_inner_variable(plan, inner, name, key, value):
  """Binds (or refuses) the inner optimizer's `iter`, rate or hyperparameter."""
  if name == "iter":
    plan.bind(key, inner.iterations, value, "optimizer/iterations")
    return
  if name == "learning_rate":
    lr = inner.learning_rate
    if is_variable(lr):
      plan.bind(key, lr, value, "optimizer/learning_rate")
    else:
      _refuse(plan, key, f"the checkpoint has a constant learning rate "
              f"({value}); the Keras 3 optimizer uses a schedule "
              f"({type(lr).__name__}).")
    return
  if name not in ("decay",) + _HYPER_ATTRIBUTES:
    return
  number = _number(plan, key, value)
  if number is None:
    return
  if name == "decay" and number == 0.0:
    plan.ignored.append(key)
  elif name == "decay":
    _refuse(plan, key, f"decay={number} has no Keras 3 counterpart; use an "
            "InverseTimeDecay learning-rate schedule and allow_partial=True.")
  elif hasattr(inner, name):
    current = getattr(inner, name)
    if is_variable(current) or callable(current):
      _refuse(plan, key, f"Keras 3's {name} is not a number")
    elif np.float32(current) == np.float32(number):
      plan.ignored.append(key)
    else:
      plan.hyper[name] = (inner, number)
      plan.hyper_keys.append(key)


def _plan_slots(plan, inner, inner_node):
  """Binds the slots of the model variables bound so far, by TF 2.x name."""
  graph = plan.graph
  slot_names = _keras2_config.TF2_SLOT_NAMES.get(
      _keras2_config.keras_class_name(inner), {})
  for slot in graph.nodes[inner_node].slot_variables:
    info = graph.variable(slot.slot_variable_node_id)
    variable = plan.bound_nodes.get(slot.original_variable_node_id)
    if info is None or variable is None or slot.slot_name not in slot_names:
      continue  # Reported as unmatched.
    key = info[0]
    target = slot_variable(inner, variable, slot.slot_name)
    if target is None:
      if not getattr(inner, "built", True):
        # The slot is made when the optimizer builds, like its variable:
        # a value that cannot land there is refused now, not then.
        plan.check(key, variable, plan.value(key),
                   f"the {slot_names[slot.slot_name]} slot of "
                   f"{target_name(variable)}")
      continue
    plan.bind(key, target, plan.value(key), f"optimizer/{target.name}")


def _plan_loss_scale(plan, optimizer, loss_scale_node):
  """Binds a dynamic optimizer's loss scale and counter, once checked."""
  if not (isinstance(optimizer, loss_scale_optimizer.LossScaleOptimizer) and
          optimizer.dynamic):
    return
  state = loss_scale_optimizer.loss_scale_state(optimizer)
  if state is None:
    _plan_user_loss_scale(plan, optimizer, loss_scale_node)
    return
  for name, attr, description in (
      ("current_loss_scale", "current_loss_scale", "optimizer/loss_scale"),
      ("good_steps", "counter", "optimizer/loss_scale counter")):
    key = plan.graph.variable_child(loss_scale_node, name)
    value = None if key is None else plan.value(key)
    number = None if key is None else _number(plan, key, value)
    if number is None:
      continue
    if attr == "current_loss_scale" and not (np.isfinite(number) and
                                             number >= 1):
      _refuse(plan, key, f"loss scale {number} is not finite and at least 1")
    elif attr == "counter" and number < 0:
      _refuse(plan, key, f"negative counter {number}")
    else:
      plan.bind(key, getattr(state, attr), value, description)


def _plan_user_loss_scale(plan, optimizer, loss_scale_node):
  """Binds a user `LossScale`'s variables (TF 2.3 took any) by name."""
  loss_scale = _private_api.lookup_dependency(optimizer, "loss_scale")
  children = _private_api.trackable_children(loss_scale, "checkpoint")
  for name, variable in sorted(children.items()):
    key = plan.graph.variable_child(loss_scale_node, name)
    if key is None or not isinstance(variable, tf.Variable):
      continue
    value = plan.value(key)
    if tuple(np.shape(value)) != tuple(variable.shape):
      _refuse(plan, key, f"shape {np.shape(value)} where the loss scale's "
              f"{name} has {tuple(variable.shape)}")
      continue
    plan.bind(key, variable, value, f"optimizer/loss_scale/{name}")


def _number(plan, key, value):
  """`value` as a float if it is one real number, else None (a problem)."""
  array = np.asarray(value)
  if (array.size == 1 and not np.issubdtype(array.dtype, np.complexfloating)
      and (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_)):
    return float(array.reshape(()))
  _refuse(plan, key, f"a {array.dtype} value of shape {tuple(array.shape)} "
          "where the checkpoint should hold one number")
  return None


def _refuse(plan, key, reason):
  """Records that the value of `key` cannot be restored, for `reason`."""
  plan.problems.append(_problems.Problem(_problems.VALUE, key, reason=reason))
