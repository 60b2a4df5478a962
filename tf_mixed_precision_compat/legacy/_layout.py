"""Matcher stage: which Keras wrote each part of an object-based checkpoint."""

import re

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _match

SAVE_COUNTER = "save_counter"
# A child name only Keras 3 models have (Keras 2 ones: `_match.LAYER_INDEX`).
_KERAS3_NAME = re.compile(r"_functional\Z")


def is_optimizer(obj):
  """A Keras 3 optimizer, or our wrapper of one (not of a tf_keras one)."""
  # A wrapped tf_keras OptimizerV2 is TF 2.4's own: TF restores it itself.
  inner = _match.inner_optimizer_of(obj)
  return (isinstance(obj, keras.optimizers.Optimizer) and
          isinstance(inner, keras.optimizers.Optimizer))


def model_built(model):
  return bool(model.built and model.weights)


def _has_name(graph, node_id, pattern):
  """Whether a child name below `node_id` matches `pattern`."""
  return any(pattern.match(name) for name in graph.names_under(
      node_id, skip=_match.MODEL_ALIASES))


class Evidence:
  """Which checkpoint nodes only Keras 2, or only Keras 3, writes:
  `optimizers` (a step, a `base_optimizer` or slots, as `inspect` lists
  them) and `variables`, as `{"keras2" | "keras3": node ids}`."""

  def __init__(self, graph):
    self.graph = graph
    optimizers = {"keras2": set(), "keras3": set()}
    variables = {"keras2": set(), "keras3": set()}
    for node_id, node in enumerate(graph.nodes):
      if graph.child(node_id, "_iterations") is not None:
        optimizers["keras3"].add(node_id)
        variables["keras3"].update(graph.variable_nodes_under(node_id))
      elif (graph.child(node_id, "iter") is not None or
            graph.child(node_id, "base_optimizer") is not None or
            node.slot_variables):
        optimizers["keras2"].add(node_id)
        variables["keras2"].update(s.original_variable_node_id
                                   for s in node.slot_variables)
    # Keras 3 optimizers never write slot variables (nor do their owners).
    variables["keras2"] -= variables["keras3"]
    self.optimizers, self.variables = optimizers, variables
    self.any_keras2 = bool(optimizers["keras2"] or variables["keras2"] or
                           _has_name(graph, 0, _match.LAYER_INDEX))
    self.any_keras3 = bool(optimizers["keras3"] or
                           _has_name(graph, 0, _KERAS3_NAME))

  def optimizer_layout(self, node_id):
    """"keras2", "keras3" or None (an entry with nothing in it)."""
    return next((k for k in ("keras3", "keras2")
                 if node_id in self.optimizers[k]), None)

  def model_layout(self, node_id):
    """"keras2", "keras3" or None (nothing tells)."""
    under = set(self.graph.variable_nodes_under(node_id,
                                                skip=_match.MODEL_ALIASES))
    for layout, name in (("keras3", _KERAS3_NAME),
                         ("keras2", _match.LAYER_INDEX)):
      if (under & self.variables[layout] or
          _has_name(self.graph, node_id, name)):
        return layout
    return None

  @property
  def only(self):
    """The one layout the whole checkpoint shows, or None."""
    if self.any_keras2 == self.any_keras3:
      return None
    return "keras2" if self.any_keras2 else "keras3"


def describe(reader, graph):
  """`{root entry but save_counter: "keras2" | "keras3" | None}`: its writer
  (None: a plain variable, or nothing tells), for `inspect`."""
  del reader  # Everything needed is in the object graph.
  evidence = Evidence(graph)
  return {name: (evidence.optimizer_layout(node_id) or
                 evidence.model_layout(node_id) or
                 (None if graph.variable(node_id) else evidence.only))
          for name, node_id in graph.children(0) if name != SAVE_COUNTER}


def maps_completely(reader, graph, source, node_id, model, ignored_nodes=()):
  """Whether a subclassed model's entry is all matched by the legacy rules."""
  if not model_built(model):
    return False
  try:
    plan = _match.plan_restore(reader, graph, source, [(node_id, model)],
                               [], ignored_nodes, scope=[node_id])
  except ValueError:
    return False
  return (not plan.problems and not plan.unmatched_checkpoint and
          all(id(v) in plan.targets for v in model.weights))


def _judge(reader, graph, source):
  """`judge(obj, node_id)`: whether the entry has TF 2.x's layout."""
  evidence = Evidence(graph)
  keras2_only = evidence.only == "keras2"

  def judge(obj, node_id):
    layout = (evidence.optimizer_layout if is_optimizer(obj) else
              evidence.model_layout)(node_id)
    if layout is not None:
      return layout == "keras2"
    if keras2_only or is_optimizer(obj) or evidence.any_keras3:
      return keras2_only
    # No evidence either way (a subclassed model of custom layers only).
    return maps_completely(reader, graph, source, node_id, obj)

  return judge


class Parts:
  """The root's dependencies, split into legacy Keras objects and the rest."""

  def __init__(self):
    self.models = []  # (node id, model)
    self.optimizers = []  # (node id, optimizer)
    self.others = {}  # name -> object (or stand-in), restored by TF
    self.orphans = []  # checkpoint keys under entries nothing stands for
    self.faced = set()  # ids of the objects met with a checkpoint entry

  @property
  def legacy_nodes(self):
    return [n for n, _ in self.models] + [n for n, _ in self.optimizers]


def _stand_in(children):
  """A trackable holding `children` by name, for TF's part of the restore."""
  stand_in = tf.__internal__.tracking.AutoTrackable()
  for name, child in children.items():
    setattr(stand_in, name, child)
  return stand_in


def _walk(obj, node_id, graph, parts, native, seen, judge, known=frozenset()):
  """Sorts `obj`'s dependencies (node `node_id`) into `parts` / `native`
  (name -> what TF restores); `known`: objects with an entry elsewhere."""
  found_before = len(parts.legacy_nodes)
  entries = dict(graph.children(node_id))
  children = _private_api.trackable_children(obj)
  for name, child in children.items():
    child_id = entries.get(name)
    if ((node_id == 0 and name == SAVE_COUNTER) or
        (child_id is not None and child_id in parts.legacy_nodes) or
        (child_id is None and id(child) in known)):
      continue  # Restored apart, or the same object reached twice.
    if child_id is not None:
      parts.faced.add(id(child))
    keras_object = is_optimizer(child) or isinstance(child,
                                                     keras.layers.Layer)
    if child_id is not None and keras_object and judge(child, child_id):
      (parts.optimizers if is_optimizer(child) else parts.models).append(
          (child_id, child))
    elif child_id is not None and not keras_object and id(child) not in seen:
      seen.add(id(child))
      found, sub = len(parts.legacy_nodes), {}
      _walk(child, child_id, graph, parts, sub, seen, judge, known)
      unchanged = len(parts.legacy_nodes) == found
      native[name] = child if unchanged else _stand_in(sub)
    else:
      native[name] = child
  if len(parts.legacy_nodes) > found_before:
    # TF is not given this node whole, so it cannot report the entries no
    # object stands for: they are named here.
    for name, child_id in entries.items():
      if name not in children and not (node_id == 0 and
                                       name == SAVE_COUNTER):
        parts.orphans += graph.keys_under(child_id)


def split(checkpoint, reader, graph, source):
  """The `Parts` of `checkpoint`'s restore, or None if none is TF 2.x's."""
  judge = _judge(reader, graph, source)
  probe = Parts()
  _walk(checkpoint, 0, graph, probe, {}, set(), judge)
  parts = Parts()
  _walk(checkpoint, 0, graph, parts, parts.others, set(), judge,
        frozenset(probe.faced))
  return parts if parts.models or parts.optimizers else None
