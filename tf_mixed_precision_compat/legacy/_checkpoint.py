"""Maps the object graph of a TF 2.2-2.4 Keras checkpoint onto Keras 3 objects.

An object-based checkpoint stores, besides its tensors, the graph of the
objects that owned them (`_CHECKPOINTABLE_OBJECT_GRAPH`): every node has named
children (`model` -> `layer_with_weights-0` -> `kernel`), variable nodes name
their tensor, and optimizer nodes list their slot variables as (variable node,
slot name, slot node). This module walks that graph and finds, for every
variable node, the Keras 3 variable that plays its role:

* model variables: the path of child names from the model node, followed on
  the Keras 3 model. `layer_with_weights-N` / `layer-N` (how TF 2.x
  Sequential and functional models named their layers) index the Keras 3
  model's `layers` the same way; other names are attributes (subclassed
  models: `encoder`, `heads/0`), a layer's own variables by name. Every path
  leading to a node must agree, and the layer the path reaches must be the
  one whose name the checkpoint recorded for the variable whenever the Keras
  3 model has a layer of that name;
* the inner optimizer: the optimizer node itself (TF 2.3/2.4, which forwarded
  the inner optimizer's dependencies) or its `base_optimizer` child (TF 2.2):
  `iter` -> `iterations`, `learning_rate` -> the learning-rate variable,
  `momentum` / `beta_1` / ... -> the hyperparameter attributes, slots by the
  TF -> Keras 3 slot names (Adam's `m` / `v` -> `momentum` / `velocity`);
* `loss_scale/current_loss_scale` and `loss_scale/good_steps` -> our
  `LossScaleOptimizer`'s loss scale and counter.

Everything is read and checked (shape, dtype, one target per entry) before a
single variable is assigned.
"""

import collections
import dataclasses
import re

import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.optimizers import _keras2_config
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_LAYER_INDEX = re.compile(r"^layer(_with_weights)?-(\d+)$")

# Hyperparameter variables TF 2.x kept, restored as Keras 3 attributes.
_HYPER_ATTRIBUTES = ("momentum", "beta_1", "beta_2", "rho", "epsilon")

# Children of a TF 2.x Keras model that only alias its layers' variables or
# hold Keras bookkeeping (SavedModels): never followed to find a weight.
_MODEL_ALIASES = frozenset({
    "variables", "trainable_variables", "non_trainable_variables",
    "regularization_losses", "keras_api", "signatures",
    "_default_save_signature", "optimizer", "layer_regularization_losses",
    "layer_metrics", "metrics", "compiled_metrics", "compiled_loss",
    "_self_saveable_object_factories",
})
MODEL_ALIASES = _MODEL_ALIASES


class RestoreError(ValueError):
  """A legacy checkpoint does not match the objects it should restore.

  Attributes:
    unmatched_checkpoint: Checkpoint keys with no Keras 3 counterpart.
    unmatched_objects: Keras 3 variables (or state) nothing restored.
    problems: Other mismatches (shape, dtype, ambiguity).
  """

  def __init__(self, source, unmatched_checkpoint=(), unmatched_objects=(),
               problems=()):
    self.source = source
    self.unmatched_checkpoint = list(unmatched_checkpoint)
    self.unmatched_objects = list(unmatched_objects)
    self.problems = list(problems)
    lines = [f"Cannot restore {source!r} exactly; nothing was assigned."]
    if self.problems:
      lines.append("Problems:")
      lines += [f"  {p}" for p in self.problems]
    if self.unmatched_checkpoint:
      lines.append("Values in the checkpoint with no Keras 3 counterpart:")
      lines += [f"  {k}" for k in self.unmatched_checkpoint]
    if self.unmatched_objects:
      lines.append("Keras 3 state the checkpoint does not provide:")
      lines += [f"  {k}" for k in self.unmatched_objects]
    if self.unmatched_checkpoint or self.unmatched_objects:
      lines.append("Pass allow_partial=True to restore the matched part.")
    super().__init__("\n".join(lines))


@dataclasses.dataclass
class RestoreReport:
  """What a legacy restore assigned.

  Attributes:
    source: The checkpoint prefix (or file) restored from.
    matched: `(checkpoint key, Keras 3 target)` pairs, in checkpoint order.
    unmatched_checkpoint: Checkpoint keys left unrestored (only non-empty
      with `allow_partial=True`).
    unmatched_objects: Keras 3 state left as it was (idem).
    ignored: Checkpoint keys that are bookkeeping (`save_counter`, metric
      states, hyperparameters equal to the optimizer's).
    hyperparameters: Optimizer attributes set from the checkpoint,
      `{name: value}`.
    iterations: The restored optimizer step, or None.
    loss_scale: The restored loss scale (dynamic), or None.
    counter: The restored good-steps counter (dynamic), or None.
    notes: Human-readable remarks (e.g. the loss scale was not stored).
  """
  source: str
  matched: list = dataclasses.field(default_factory=list)
  unmatched_checkpoint: list = dataclasses.field(default_factory=list)
  unmatched_objects: list = dataclasses.field(default_factory=list)
  ignored: list = dataclasses.field(default_factory=list)
  hyperparameters: dict = dataclasses.field(default_factory=dict)
  iterations: object = None
  loss_scale: object = None
  counter: object = None
  notes: list = dataclasses.field(default_factory=list)

  def __str__(self):
    lines = [f"Restored {len(self.matched)} values from {self.source}"]
    if self.iterations is not None:
      lines.append(f"  iterations: {self.iterations}")
    if self.loss_scale is not None:
      lines.append(f"  loss scale: {self.loss_scale}, counter: {self.counter}")
    for key in self.unmatched_checkpoint:
      lines.append(f"  not restored (checkpoint): {key}")
    for key in self.unmatched_objects:
      lines.append(f"  not restored (Keras 3): {key}")
    lines += [f"  note: {n}" for n in self.notes]
    return "\n".join(lines)


class ObjectGraph:
  """A parsed `_CHECKPOINTABLE_OBJECT_GRAPH` with its variables' keys."""

  def __init__(self, serialized, source):
    proto = _private_api.trackable_object_graph_pb2.TrackableObjectGraph()
    try:
      proto.ParseFromString(serialized)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"{source!r}: the checkpoint's object graph is "
                       f"corrupted ({e}).") from None
    self.nodes = proto.nodes
    _check_node_ids(self.nodes, source)

  def child(self, node_id, name):
    for ref in self.nodes[node_id].children:
      if ref.local_name == name:
        return ref.node_id
    return None

  def children(self, node_id):
    return [(ref.local_name, ref.node_id)
            for ref in self.nodes[node_id].children]

  def variable(self, node_id):
    """(checkpoint key, full name) of a variable node, or None."""
    for attr in self.nodes[node_id].attributes:
      if attr.name == "VARIABLE_VALUE":
        return attr.checkpoint_key, attr.full_name
    return None

  def variable_nodes_under(self, node_id, skip=frozenset()):
    """Variable node ids reachable from `node_id` (slots included)."""
    seen, stack, found = set(), [node_id], []
    while stack:
      current = stack.pop()
      if current in seen:
        continue
      seen.add(current)
      if self.variable(current) is not None:
        found.append(current)
      stack.extend(ref.node_id for ref in self.nodes[current].children
                   if ref.local_name not in skip)
      stack.extend(s.slot_variable_node_id
                   for s in self.nodes[current].slot_variables)
    return found

  def paths(self, start, skip=frozenset(), limit=16):
    """node id -> child-name paths from `start` (acyclic), not via `skip`.

    At most `limit` paths per node and `_MAX_PATH_LENGTH` names per path:
    a hostile graph (a chain of thousands of nodes, a dense lattice) costs
    bounded work, and what only such paths reach stays unmatched.
    """
    result = collections.defaultdict(list)
    stack = [(start, (), frozenset({start}))]
    while stack:  # Depth-first, children in order, as a recursion would.
      node_id, path, on_path = stack.pop()
      if len(result[node_id]) >= limit:
        continue
      result[node_id].append(path)
      if len(path) >= _MAX_PATH_LENGTH:
        continue
      for name, child in reversed(self.children(node_id)):
        if child not in on_path and name not in skip:
          stack.append((child, path + (name,), on_path | {child}))
    return result


# Keras object graphs are a few levels deep (`model/layer_with_weights-0/
# kernel`, nested models add a few each); far longer paths are hostile.
_MAX_PATH_LENGTH = 64


def _check_node_ids(nodes, source):
  """Every node id a node refers to names a node of the graph."""
  count = len(nodes)
  if not count:
    raise ValueError(f"{source!r}: the checkpoint's object graph is "
                     "corrupted (it has no root object).")
  for node in nodes:
    ids = [ref.node_id for ref in node.children]
    for slot in node.slot_variables:
      ids += [slot.original_variable_node_id, slot.slot_variable_node_id]
    if any(not 0 <= i < count for i in ids):
      raise ValueError(
          f"{source!r}: the checkpoint's object graph is corrupted (a "
          f"reference to node {next(i for i in ids if not 0 <= i < count)}"
          f" of {count}).")


def read_object_graph(reader, source):
  try:
    keys = reader.get_variable_to_shape_map()
  except tf.errors.OpError as e:
    raise ValueError(f"{source!r} is not a readable checkpoint: {e}") from None
  if _OBJECT_GRAPH_KEY not in keys:
    raise ValueError(
        f"{source!r} is not an object-based checkpoint (no "
        f"{_OBJECT_GRAPH_KEY}); name-based TF1 checkpoints are restored "
        "with tf.compat.v1.train.Saver.")
  return ObjectGraph(_get_tensor(reader, _OBJECT_GRAPH_KEY, source), source)


def _get_tensor(reader, key, source):
  try:
    return reader.get_tensor(key)
  except (tf.errors.OpError, ValueError, RuntimeError, IndexError,
          OSError) as e:
    raise ValueError(
        f"{source!r}: cannot read {key!r} (truncated or corrupted "
        f"checkpoint data?): {e}") from None


# ---------------------------------------------------------------------------
# Finding Keras 3 counterparts.


def _is_variable(obj):
  return isinstance(obj, (keras.Variable, tf.Variable))


def own_variable(layer, name):
  """The variable of `layer` a TF 2.x checkpoint names `name`, or None."""
  found = getattr(layer, name, None) if not name.startswith("_") else None
  if _is_variable(found):
    return found
  own = [v for v in layer.weights if v.name == name]
  # Layers with sub-layers: only a variable named like this, once.
  return own[0] if len(own) == 1 else None


def _step(obj, name):
  """One child-name step on a Keras 3 object; None when there is none."""
  if isinstance(obj, keras.Model):
    match = _LAYER_INDEX.match(name)
    if match:
      layers = list(obj.layers)
      if match.group(1):
        layers = [layer for layer in layers if layer.weights]
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
    return None
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
  return (obj, layer) if _is_variable(obj) else (None, None)


def _all_layers(model):
  layers = {}
  for layer in _private_api.keras_nested_layers(model):
    layers.setdefault(layer.name, []).append(layer)
  return layers


def _target_name(variable):
  return getattr(variable, "path", None) or variable.name


class Plan:
  """Checkpoint values bound to Keras 3 targets, checked before assignment."""

  def __init__(self, source):
    self.source = source
    self.assignments = []  # (key, target, value, description)
    self.targets = {}  # id(target) -> key
    self.problems = []
    self.unmatched_checkpoint = []
    self.ignored = []
    self.hyper = {}
    self.hyper_keys = []

  def check(self, key, like, value, description):
    """Whether `value` fits a variable shaped and typed like `like`.

    A mismatch is added to `problems`.
    """
    value = np.asarray(value)
    want_dtype = tf.as_dtype(like.dtype).as_numpy_dtype
    if tuple(value.shape) != tuple(like.shape):
      self.problems.append(
          f"{key}: shape {tuple(value.shape)} in the checkpoint, "
          f"{tuple(like.shape)} for {description}")
      return False
    if value.dtype != np.dtype(want_dtype):
      self.problems.append(
          f"{key}: dtype {value.dtype} in the checkpoint, "
          f"{np.dtype(want_dtype)} for {description}")
      return False
    return True

  def bind(self, key, target, value, description=None):
    description = description or _target_name(target)
    if id(target) in self.targets:
      self.problems.append(
          f"{key} and {self.targets[id(target)]} both restore {description}")
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


def slot_variable(inner, variable, keras3_name):
  """The Keras 3 slot `keras3_name` of `variable` in `inner`, or None."""
  wanted = _target_name(variable).replace("/", "_") + "_" + keras3_name
  found = [v for v in inner.variables if v.name == wanted]
  return found[0] if len(found) == 1 else None


def expected_objects(model, optimizer):
  """Keras 3 state a full restore must assign: (object, description)."""
  expected = expected_model_objects(model)
  if optimizer is not None:
    expected += expected_optimizer_objects(optimizer)
  return expected


def ensure_optimizer_built(model, optimizer):
  """Creates the optimizer's slots for the model, in the model's strategy."""
  if optimizer is None or getattr(inner_optimizer_of(optimizer), "built",
                                  True):
    return
  strategy = getattr(model, "distribute_strategy", None)
  if strategy is not None and not tf.distribute.has_strategy():
    with strategy.scope():
      optimizer.build(model.trainable_variables)
  else:
    optimizer.build(model.trainable_variables)


def restore(reader, graph, source, model, optimizer, model_node,
            optimizer_node, allow_partial, ignored_nodes=()):
  """Restores `model` / `optimizer` from the object graph; see module doc.

  Every variable of the checkpoint counts: one that neither part restores is
  unmatched (unless it is bookkeeping).

  Args:
    reader: A `tf.train.load_checkpoint` reader.
    graph: The reader's `ObjectGraph`.
    source: Name used in messages and the report.
    model: A built Keras 3 model, or None when the checkpoint has no model.
    optimizer: Our `LossScaleOptimizer`, a Keras 3 optimizer, or None.
    model_node: The node id of the model, or None.
    optimizer_node: The node id of the optimizer, or None.
    allow_partial: Whether unmatched entries are tolerated.
    ignored_nodes: Node ids whose variables are bookkeeping.

  Returns:
    A `RestoreReport`.

  Raises:
    RestoreError: On mismatches (nothing is assigned then).
    ValueError: If the model is not built or the data cannot be read.
  """
  models = [] if model_node is None or model is None else [(model_node,
                                                             model)]
  optimizers = ([] if optimizer_node is None or optimizer is None else
                [(optimizer_node, optimizer)])
  plan = plan_restore(reader, graph, source, models, optimizers,
                      ignored_nodes)
  expected = []
  if model is not None:
    expected += expected_model_objects(model)
  if optimizer is not None:
    expected += expected_optimizer_objects(optimizer)
  plan.unmatched_objects = [description for obj, description in expected
                            if id(obj) not in plan.targets]
  if plan.problems or (not allow_partial and (plan.unmatched_checkpoint or
                                              plan.unmatched_objects)):
    raise RestoreError(source, plan.unmatched_checkpoint,
                       plan.unmatched_objects, plan.problems)
  return assign(plan, [optimizer] if optimizer is not None else [])


def check_built(model, source):
  if not model.weights:
    raise ValueError(
        f"Cannot restore {source!r} into model '{model.name}': it has no "
        "weights yet. Build it first (call it on a batch or model.build()).")


def plan_restore(reader, graph, source, models, optimizers, ignored_nodes=(),
                 scope=None):
  """Binds checkpoint values to Keras 3 targets without assigning any.

  Args:
    reader: A `tf.train.load_checkpoint` reader.
    graph: The reader's `ObjectGraph`.
    source: Name used in messages and the report.
    models: `(node id, built Keras 3 model)` pairs.
    optimizers: `(node id, optimizer)` pairs (ours or Keras 3's).
    ignored_nodes: Node ids whose variables are bookkeeping.
    scope: Node ids whose variables count as the checkpoint's content when
      listing unmatched values; None for every variable of the checkpoint.

  Returns:
    A `Plan`; its `unmatched_objects` is left for the caller to fill.

  Raises:
    ValueError: If a model is not built or the data cannot be read.
  """
  for _, model in models:
    check_built(model, source)
  plan = Plan(source)
  ignored = set()
  for node_id in ignored_nodes:
    ignored.update(graph.variable_nodes_under(node_id))
  # Variables only reachable through `keras_api` are SavedModel bookkeeping
  # (compiled metrics' totals and counts).
  ignored.update(set(graph.variable_nodes_under(0)) -
                 set(graph.variable_nodes_under(0, skip={"keras_api"})))
  optimizer_vars = set()
  for node_id, _ in optimizers:
    optimizer_vars.update(graph.variable_nodes_under(node_id))
  bound_model_nodes = {}
  for node_id, model in models:
    _plan_model(reader, graph, source, model, node_id, optimizer_vars,
                bound_model_nodes, plan)
  for node_id, optimizer in optimizers:
    _plan_optimizer(reader, graph, source, optimizer, node_id,
                    bound_model_nodes, plan)
  _list_leftovers(graph, plan, ignored, scope)
  return plan


def _plan_model(reader, graph, source, model, model_node, optimizer_vars,
                bound_model_nodes, plan):
  """Binds the model's weights, following each variable's paths."""
  layers_by_name = _all_layers(model)
  for node_id, paths in sorted(
      graph.paths(model_node, skip=_MODEL_ALIASES).items()):
    var_info = graph.variable(node_id)
    if var_info is None or node_id in optimizer_vars:
      continue
    key, full_name = var_info
    found = {}
    for path in paths:
      target, layer = _follow(model, path)
      if target is not None:
        found[id(target)] = (target, layer, path)
    if not found:
      continue
    if len(found) > 1:
      plan.problems.append(
          f"{key}: its paths lead to different Keras 3 variables: "
          + ", ".join(_target_name(t) for t, _, _ in found.values()))
      continue
    target, layer, _ = next(iter(found.values()))
    recorded_layer = full_name.split("/")[-2] if "/" in full_name else None
    if (recorded_layer and layer is not None and
        recorded_layer != layer.name and recorded_layer in layers_by_name):
      plan.problems.append(
          f"{key}: the checkpoint's layer '{recorded_layer}' would restore "
          f"into Keras 3 layer '{layer.name}', while the model also has a "
          f"layer named '{recorded_layer}'; the models differ in structure.")
      continue
    bound_model_nodes[node_id] = target
    plan.bind(key, target, _get_tensor(reader, key, source))


def _list_leftovers(graph, plan, ignored, scope):
  """Fills `plan.unmatched_checkpoint` / `plan.ignored` from what is left."""
  in_scope = None
  if scope is not None:
    in_scope = set()
    for node_id in scope:
      in_scope.update(graph.variable_nodes_under(node_id))
  assigned_keys = {key for key, _, _, _ in plan.assignments}
  hyper_keys = set(plan.hyper_keys)
  for node_id in range(len(graph.nodes)):
    info = graph.variable(node_id)
    if info is None or (in_scope is not None and node_id not in in_scope):
      continue
    key = info[0]
    if key in assigned_keys or key in hyper_keys or key in plan.ignored:
      continue
    if node_id in ignored:
      plan.ignored.append(key)
    elif key not in plan.unmatched_checkpoint and not any(
        p.startswith(key + ":") for p in plan.problems):
      plan.unmatched_checkpoint.append(key)


def assign(plan, optimizers):
  """Assigns a checked plan; returns the `RestoreReport`.

  Args:
    plan: A `Plan` without problems.
    optimizers: The optimizers it restores (for the report's numbers).

  Returns:
    A `RestoreReport`.
  """
  report = RestoreReport(source=plan.source)
  # Lifted out of any function being traced: a restore fired while a model
  # is first called inside `tf.function` must assign now, not in the graph.
  with tf.init_scope():
    for key, target, value, description in plan.assignments:
      assign_exact(target, value)
      report.matched.append((key, description))
  for attribute, (owner, value) in plan.hyper.items():
    setattr(owner, attribute, value)
    report.hyperparameters[attribute] = value
  report.unmatched_checkpoint = list(plan.unmatched_checkpoint)
  report.unmatched_objects = list(plan.unmatched_objects)
  report.ignored = list(plan.ignored)
  for optimizer in optimizers:
    inner = inner_optimizer_of(optimizer)
    with tf.init_scope():
      report.iterations = int(inner.iterations.numpy())
      if (isinstance(optimizer, loss_scale_optimizer.LossScaleOptimizer) and
          optimizer.dynamic_counter is not None):
        report.loss_scale = float(optimizer.loss_scale.numpy())
        report.counter = int(optimizer.dynamic_counter.numpy())
  return report


def assign_exact(target, value):
  """Assigns `value` to every copy of `target`, in any distribution context.

  Outside a replica context `assign` writes every replica's copy. Inside one
  (a model first built in `strategy.run`), a mirrored variable refuses a plain
  assign, so each component is written directly: the same value everywhere.
  """
  context = tf.distribute.get_replica_context()
  in_replica = (context is not None and tf.distribute.has_strategy() and
                not tf.distribute.in_cross_replica_context())
  if not in_replica:
    target.assign(value)
    return
  variable = target
  if not isinstance(variable, tf.Variable):  # A Keras 3 variable wraps one.
    variable = getattr(target, "value", target)
  components = getattr(variable, "values", None)
  if not isinstance(components, (tuple, list)):
    components = (variable,)
  for component in components:
    component.assign(value)


def expected_model_objects(model):
  """A model's state a full restore must assign: (object, description)."""
  return [(v, _target_name(v)) for v in model.weights]


def expected_optimizer_objects(optimizer):
  """An optimizer's state a full restore must assign: (object, description)."""
  expected = []
  inner = inner_optimizer_of(optimizer)
  for v in inner.variables:
    expected.append((v, f"optimizer/{v.name}"))
  state = loss_scale_optimizer.loss_scale_state(optimizer)
  if state is not None:
    expected.append((state.current_loss_scale, "optimizer/loss_scale"))
    expected.append((state.counter, "optimizer/loss_scale counter"))
  return expected


def model_and_optimizer_nodes(graph, source):
  """The root's `model` and `optimizer` nodes (either may be None).

  Raises:
    ValueError: If the root has neither, naming `source` and its children.
  """
  model_node = graph.child(0, "model")
  optimizer_node = graph.child(0, "optimizer")
  if model_node is None and optimizer_node is None:
    raise ValueError(
        f"{source!r} has neither a 'model' nor an 'optimizer' entry: it was "
        "not written by tf.train.Checkpoint(model=..., optimizer=...). "
        f"Children of its root: {[name for name, _ in graph.children(0)]}")
  return model_node, optimizer_node


def _plan_optimizer(reader, graph, source, optimizer, optimizer_node,
                    bound_model_nodes, plan):
  """Binds the optimizer's entries (iterations, hypers, slots, loss scale)."""
  inner = inner_optimizer_of(optimizer)
  inner_node = optimizer_node
  if graph.child(optimizer_node, "iter") is None:
    base = graph.child(optimizer_node, "base_optimizer")
    if base is not None and graph.child(base, "iter") is not None:
      inner_node = base  # TF 2.2 tracked the inner optimizer under this name.
  for name, child in graph.children(inner_node):
    info = graph.variable(child)
    if info is not None:
      _plan_inner_variable(inner, name, info[0],
                           _get_tensor(reader, info[0], source), plan)
  _plan_slots(reader, graph, source, inner, inner_node, bound_model_nodes,
              plan)
  loss_scale_node = graph.child(optimizer_node, "loss_scale")
  if loss_scale_node is not None:
    _plan_loss_scale(reader, graph, source, optimizer, loss_scale_node, plan)


def _plan_inner_variable(inner, name, key, value, plan):
  """Binds (or refuses) the inner optimizer's `iter`, rate or hyperparameter."""
  if name == "iter":
    plan.bind(key, inner.iterations, value, "optimizer/iterations")
  elif name == "learning_rate":
    lr = inner.learning_rate
    if _is_variable(lr):
      plan.bind(key, lr, value, "optimizer/learning_rate")
    else:
      plan.problems.append(
          f"{key}: the checkpoint has a constant learning rate ({value}); "
          f"the Keras 3 optimizer uses a schedule ({type(lr).__name__}).")
  elif name in ("decay",) + _HYPER_ATTRIBUTES and _number(value) is None:
    plan.problems.append(f"{key}: {_describe(value)} where the checkpoint "
                         "should hold one number")
  elif name == "decay":
    if _number(value) == 0.0:
      plan.ignored.append(key)
    else:
      plan.problems.append(
          f"{key}: decay={_number(value)} has no Keras 3 counterpart; use "
          "an InverseTimeDecay learning-rate schedule and "
          "allow_partial=True.")
  elif name in _HYPER_ATTRIBUTES and hasattr(inner, name):
    current = getattr(inner, name)
    if _is_variable(current) or callable(current):
      plan.problems.append(f"{key}: Keras 3's {name} is not a number")
    elif np.float32(current) == np.float32(_number(value)):
      plan.ignored.append(key)
    else:
      plan.hyper[name] = (inner, _number(value))
      plan.hyper_keys.append(key)


def _plan_slots(reader, graph, source, inner, inner_node, bound_model_nodes,
                plan):
  """Binds the slots of the model variables bound so far, by TF 2.x name."""
  slot_names = _keras2_config.TF2_SLOT_NAMES.get(
      _keras2_config.keras_class_name(inner), {})
  for slot in graph.nodes[inner_node].slot_variables:
    info = graph.variable(slot.slot_variable_node_id)
    if info is None:
      continue
    key = info[0]
    variable = bound_model_nodes.get(slot.original_variable_node_id)
    keras3_name = slot_names.get(slot.slot_name)
    if variable is None or keras3_name is None:
      continue  # Reported as unmatched.
    target = slot_variable(inner, variable, keras3_name)
    if target is None:
      if not getattr(inner, "built", True):
        # The slot is made when the optimizer builds, like its variable:
        # a value that cannot land there is refused now, not then.
        plan.check(key, variable, _get_tensor(reader, key, source),
                   f"the {keras3_name} slot of {_target_name(variable)}")
      continue
    plan.bind(key, target, _get_tensor(reader, key, source),
              f"optimizer/{target.name}")


def _plan_loss_scale(reader, graph, source, optimizer, loss_scale_node, plan):
  """Binds a dynamic optimizer's loss scale and counter, once checked."""
  dynamic = (isinstance(optimizer, loss_scale_optimizer.LossScaleOptimizer) and
             optimizer.dynamic)
  for name, attr in (("current_loss_scale", "current_loss_scale"),
                     ("good_steps", "counter")):
    child = graph.child(loss_scale_node, name)
    info = None if child is None else graph.variable(child)
    if info is None or not dynamic:
      continue
    state = loss_scale_optimizer.loss_scale_state(optimizer)
    value = _get_tensor(reader, info[0], source)
    number = _number(value)
    if number is None:
      plan.problems.append(f"{info[0]}: {_describe(value)} where the "
                           "checkpoint should hold one number")
      continue
    if attr == "current_loss_scale" and not (np.isfinite(number) and
                                             number >= 1):
      plan.problems.append(f"{info[0]}: loss scale {number} is not finite and "
                           "at least 1")
      continue
    if attr == "counter" and number < 0:
      plan.problems.append(f"{info[0]}: negative counter {number}")
      continue
    description = ("optimizer/loss_scale" if attr == "current_loss_scale" else
                   "optimizer/loss_scale counter")
    plan.bind(info[0], getattr(state, attr), value, description)
  if dynamic and loss_scale_optimizer.loss_scale_state(optimizer) is None:
    _plan_user_loss_scale(reader, graph, source, optimizer, loss_scale_node,
                          plan)


def _plan_user_loss_scale(reader, graph, source, optimizer, loss_scale_node,
                          plan):
  """Binds the variables of a user `LossScale` (TF 2.3's experimental class
  took any), by their checkpoint names, shapes checked."""
  loss_scale = _private_api.lookup_dependency(optimizer, "loss_scale")
  children = _private_api.trackable_children(loss_scale, "checkpoint")
  for name, variable in sorted(children.items()):
    child = graph.child(loss_scale_node, name)
    info = None if child is None else graph.variable(child)
    if info is None or not isinstance(variable, tf.Variable):
      continue
    value = _get_tensor(reader, info[0], source)
    if tuple(np.shape(value)) != tuple(variable.shape):
      plan.problems.append(f"{info[0]}: shape {np.shape(value)} where the "
                           f"loss scale's {name} has {tuple(variable.shape)}")
      continue
    plan.bind(info[0], variable, value, f"optimizer/loss_scale/{name}")


def _number(value):
  """`value` as a Python float if it is one real number, else None."""
  array = np.asarray(value)
  if array.size != 1 or not (np.issubdtype(array.dtype, np.number) or
                             array.dtype == np.bool_):
    return None
  if np.issubdtype(array.dtype, np.complexfloating):
    return None
  return float(array.reshape(()))


def _describe(value):
  array = np.asarray(value)
  return f"a {array.dtype} value of shape {tuple(array.shape)}"
