"""The wrapped (inner) optimizer, one adapter per kind.

`adapt(inner_optimizer)` returns `Keras3Inner` or `OptimizerV2Inner` (a
tf_keras `optimizers.legacy` optimizer); every difference between the kinds
lives here, so the wrapper has no per-kind branch.

Example:

>>> adapt(tf.keras.optimizers.SGD(0.1)).hyperparameter_names() == {
...     "learning_rate", "momentum"}
True
"""

import contextlib
import inspect
import weakref

import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.optimizers import _keras2_config

# Keras 3 optimizers a checkpoint restore waits to build (their slots are
# made then) -> what builds them. `get_slot` before the first step builds
# one, so it returns the restored slot, as TF 2.x made a restored slot when
# asked for it. Set by legacy/_checkpoint_restore.py.
_BUILD_BEFORE_GET_SLOT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def build_before_get_slot(optimizer, build):
  """Has `get_slot` on unbuilt `optimizer` call `build()` first (once)."""
  _BUILD_BEFORE_GET_SLOT[optimizer] = build

# Legacy Keras 2 optimizers, only when the user has tf_keras installed.
_tf_keras = keras_target.import_package(keras_target.TF_KERAS)


class AlreadyWrappedError(ValueError, AttributeError):
  """A LossScaleOptimizer was given another one to wrap.

  Both TF 2.4's `AttributeError` and this package's earlier `ValueError`, so
  code catching either still catches it.
  """


class VariableList(list):
  """A list of variables, also callable as TF 2.4's `variables()` method."""

  def __call__(self):
    return list(self)


def _as_iterations(value):
  """`value` as an int64 step count; ValueError unless a known int >= 0."""
  if isinstance(value, (tf.Variable, keras.Variable)):
    value = tf.convert_to_tensor(value)
  try:
    static = None if isinstance(value, bool) else tf.get_static_value(value)
  except (TypeError, ValueError):  # Not convertible to a tensor.
    static = None
  array = None if static is None else np.asarray(static)
  if (array is None or array.ndim != 0 or
      not np.issubdtype(array.dtype, np.integer) or array < 0):
    raise ValueError('"iterations" must be set to a non-negative integer '
                     f"scalar, but got: {value!r}")
  return np.int64(array)


class InnerOptimizer:
  """What the wrapper needs of its inner optimizer, `optimizer`."""

  # Names the wrapper's dir() leaves out (see `Keras3Inner`).
  dir_hidden: frozenset = frozenset()

  def __init__(self, optimizer):
    self.optimizer = optimizer

  @classmethod
  def holds(cls, optimizer):
    """Whether `optimizer` is of this adapter's kind."""
    raise NotImplementedError

  @classmethod
  def is_loss_scale_optimizer(cls, optimizer):
    """Whether `optimizer` (of this kind) already scales losses."""
    raise NotImplementedError

  def hyperparameter_names(self):
    """Attributes the wrapper reads and sets on the inner optimizer."""
    raise NotImplementedError

  def build(self, var_list):
    if not getattr(self.optimizer, "built", True):
      self.optimizer.build(var_list)

  def check_variables_are_known(self, variables):
    """Raises, as the inner optimizer would, for variables it lacks."""
    _private_api.keras_optimizer_check_variables_are_known(self.optimizer,
                                                           variables)

  def built_variables(self):
    """The variables the inner optimizer was built with."""
    return _private_api.keras_optimizer_built_variables(self.optimizer)

  def iterations_variable(self):
    """The step counter, which a skipped step increments."""
    variable = _private_api.keras_optimizer_iterations_variable(self.optimizer)
    return variable if variable is not None else self.optimizer.iterations

  def in_order(self, build):
    """Builds the apply: `build()`, whose ops the caller groups."""
    return build()

  def count_skipped_step(self):
    """Counts a skipped step, as the apply would have; its op in a graph."""
    variable = self.iterations_variable()
    if isinstance(variable, keras.Variable):
      variable = variable.value
    return variable.assign_add(1, read_value=False)

  def slot_restorer(self):
    """What restores checkpointed slots; None where slots are children."""
    return None


class Keras3Inner(InnerOptimizer):
  """A Keras 3 optimizer, given TF 2.4's optimizer API."""

  # tf.train.Checkpoint saves the slots of objects whose dir() has
  # `get_slot_names` a second time, as `.OPTIMIZER_SLOT` entries; Keras 3
  # optimizers already checkpoint them as their own children.
  dir_hidden = frozenset({"get_slot_names"})

  @classmethod
  def holds(cls, optimizer):
    return isinstance(optimizer, keras.optimizers.Optimizer)

  @classmethod
  def is_loss_scale_optimizer(cls, optimizer):
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

  def hyperparameter_names(self):
    return _keras2_config.hyperparameter_names(self.optimizer)

  def check_aggregation(self, experimental_aggregate_gradients):
    """Refuses unaggregated gradients where this Keras cannot skip the sum."""
    if (not experimental_aggregate_gradients and
        tf.distribute.get_strategy().num_replicas_in_sync > 1 and
        None in _private_api.keras_clip_and_all_reduce_methods(
            type(self.optimizer))):
      raise ValueError(
          "experimental_aggregate_gradients=False is not supported with "
          "this Keras version's optimizers under several replicas: they "
          "always sum gradients across replicas. Pass unaggregated "
          "gradients instead.")

  def apply_in_replica(self, pairs, name, experimental_aggregate_gradients):
    # TF 2.4 handed `name` on positionally, to a subclass's second argument
    # (a clip norm, say); Keras 3's own `apply_gradients` takes none.
    args, kwargs = _forwarded_apply_arguments(
        self.optimizer.apply_gradients, name, experimental_aggregate_gradients)
    self.optimizer.apply_gradients(pairs, *args, **kwargs)

  def in_order(self, build):
    # Keras 3's reads and writes rely on a `tf.function`'s automatic control
    # dependencies, which a `tf.compat.v1` graph lacks: build the apply as one
    # (around the replicas' apply, as Keras 3 sums them in a `merge_call`).
    if not _in_session_graph():
      return build()

    @tf.function(autograph=False)
    def ordered():
      build()
      return tf.constant(True)

    return [ordered().op]

  def clip_after_sum(self, distribution, aggregate=True):
    if not aggregate:
      return _not_summed(self.optimizer, distribution)
    return _clip_after_sum(self.optimizer, distribution)

  def set_iterations(self, value):
    # Keras 3 optimizers create their counter with themselves and cannot
    # replace it; TF 2.4 code setting it means its value.
    self.iterations_variable().assign(_as_iterations(value))

  def variables(self):
    return VariableList(self.optimizer.variables)

  def add_weight(self, name, shape, dtype, initializer, aggregation):
    if isinstance(aggregation, (tf.VariableAggregation,
                                tf.compat.v1.VariableAggregation)):
      aggregation = aggregation.name.lower()  # Keras 3's spelling.
    return self.optimizer.add_variable(
        shape, initializer=initializer, dtype=dtype, aggregation=aggregation,
        name=name)

  def add_slot(self, var, slot_name, initializer):
    existing = self.find_slot(var, slot_name)
    if existing is not None:
      return existing
    return self.optimizer.add_variable_from_reference(
        var, name=slot_name, initializer=initializer)

  @staticmethod
  def _slot_prefix(var):
    if hasattr(var, "path"):
      return var.path.replace("/", "_") + "_"
    return str(var.name).replace("/", "_").replace(":", "_") + "_"

  def _slots(self):
    """(variable, Keras 3 slot name, slot) of every slot, in creation order."""
    built = list(_private_api.keras_optimizer_built_variables(
        self.optimizer) or [])
    prefixes = sorted(((self._slot_prefix(v), v) for v in built),
                      key=lambda p: len(p[0]), reverse=True)
    known = set(_keras2_config.TF2_SLOT_NAMES.get(
        _keras2_config.keras_class_name(self.optimizer), {}).values())
    slots, bare = [], {}
    for slot in self.optimizer.variables:
      prefix = next((p for p in prefixes if slot.name.startswith(p[0])), None)
      if prefix is not None:
        slots.append((prefix[1], slot.name[len(prefix[0]):], slot))
      elif slot.name in known:
        bare.setdefault(slot.name, []).append(slot)
    # Keras < 3.8's Adagrad and Ftrl name their accumulators without the
    # variable's prefix; they are made one per variable, in build order.
    for name, found in bare.items():
      if len(found) == len(built):
        slots += [(var, name, slot) for var, slot in zip(built, found)]
    return slots

  def find_slot(self, var, slot_name):
    return next((slot for v, name, slot in self._slots()
                 if v is var and name == slot_name), None)

  def get_slot(self, var, slot_name):
    """The slot, under its Keras 3 name or its TF 2.x one."""
    slot = self.find_slot(var, slot_name)
    if slot is None:
      keras3_name = _keras2_config.TF2_SLOT_NAMES.get(
          _keras2_config.keras_class_name(self.optimizer), {}).get(slot_name)
      if keras3_name is not None:
        slot = self.find_slot(var, keras3_name)
    build = _BUILD_BEFORE_GET_SLOT.pop(self.optimizer, None)
    if slot is None and build is not None:
      build()  # A restore's slots land as the optimizer builds.
      return self.get_slot(var, slot_name)
    if slot is None:
      raise KeyError(f"No slot {slot_name!r} for variable {var.name!r}; "
                     f"slots: {self.get_slot_names()}")
    return slot

  def get_slot_names(self):
    """Keras 3's slot names, in the order the slots were created."""
    return list(dict.fromkeys(name for _, name, _ in self._slots()))

  def serialize(self):
    return keras.optimizers.serialize(self.optimizer)


class OptimizerV2Inner(InnerOptimizer):
  """A tf_keras OptimizerV2: TF 2.4's own optimizer, which has its API."""

  @classmethod
  def holds(cls, optimizer):
    return _tf_keras is not None and isinstance(
        optimizer, _tf_keras.optimizers.legacy.Optimizer)

  @classmethod
  def is_loss_scale_optimizer(cls, optimizer):
    return "LossScaleOptimizer" in type(optimizer).__name__

  def hyperparameter_names(self):
    return _private_api.tf_keras_hyperparameter_names(self.optimizer)

  def check_aggregation(self, experimental_aggregate_gradients):
    del experimental_aggregate_gradients  # OptimizerV2 takes either.

  def apply_in_replica(self, pairs, name, experimental_aggregate_gradients):
    # The op counting the step: in a `tf.compat.v1` graph it is the train op.
    return self.optimizer.apply_gradients(
        pairs, name,
        experimental_aggregate_gradients=experimental_aggregate_gradients)

  def slot_restorer(self):
    # OptimizerV2 keeps slot values restored before its first step (slots
    # are created then) and assigns them on creation, as TF 2.4 did.
    return _private_api.optimizer_slot_restorer(self.optimizer)

  def clip_after_sum(self, distribution, aggregate=True):
    # OptimizerV2 sums the replicas' gradients (if `aggregate`), then clips.
    del distribution, aggregate
    return contextlib.nullcontext()

  def set_iterations(self, value):
    self.optimizer.iterations = value  # TF 2.4's rules, which tf_keras keeps.

  def variables(self):
    return VariableList(self.optimizer.variables())

  def add_weight(self, name, shape, dtype, initializer, aggregation):
    del aggregation  # As TF 2.4's wrapper, which passed on the first four.
    return self.optimizer.add_weight(name, shape, dtype, initializer)

  def add_slot(self, var, slot_name, initializer):
    return self.optimizer.add_slot(var, slot_name, initializer)

  def get_slot(self, var, slot_name):
    return self.optimizer.get_slot(var, slot_name)

  def get_slot_names(self):
    return self.optimizer.get_slot_names()

  def serialize(self):
    return _tf_keras.optimizers.serialize(self.optimizer)


_KINDS = (Keras3Inner, OptimizerV2Inner)


def kind_of(optimizer):
  """The adapter class for `optimizer`; None for what the wrapper refuses."""
  return next((kind for kind in _KINDS if kind.holds(optimizer)), None)


def adapt(optimizer):
  """The `InnerOptimizer` for `optimizer`; raises if it cannot be wrapped."""
  kind = kind_of(optimizer)
  if kind is not None and kind.is_loss_scale_optimizer(optimizer):
    name = type(optimizer).__name__
    raise AlreadyWrappedError(
        f'"inner_optimizer" is already a LossScaleOptimizer ({name}); '
        "wrapping it again would scale the loss twice. Pass its "
        "inner_optimizer instead. (TF 2.4 failed here with AttributeError: "
        f"'{name}' object has no attribute '_hyper'.)")
  if kind is None:
    raise TypeError(
        '"inner_optimizer" must be an instance of '
        "`tf.keras.optimizers.Optimizer` (a Keras 3 optimizer) or of a "
        f"legacy tf_keras OptimizerV2, but got: {optimizer}")
  return kind(optimizer)


def deserialize(config, custom_objects=None):
  """An inner optimizer from what a config holds: itself or its config."""
  if kind_of(config) is not None:
    return config
  if (_tf_keras is not None and isinstance(config, dict) and
      config.get("module") == "keras.optimizers.legacy"):
    # What `get_config` wrote for a wrapped tf_keras OptimizerV2 (TF 2.3/2.4's
    # configs name no module): it comes back as one, as TF 2.4's round trip.
    return _tf_keras.optimizers.deserialize(
        config, custom_objects=custom_objects, use_legacy_optimizer=True)
  return _keras2_config.deserialize_serialized_optimizer(config,
                                                         custom_objects)


def _in_session_graph():
  """Whether ops built now go to a `tf.compat.v1` graph run by a session.

  A conditional's or loop's branch there is itself a function graph, but,
  unlike a `tf.function`'s, one without automatic control dependencies.
  """
  if tf.executing_eagerly():
    return False
  graph = tf.compat.v1.get_default_graph()
  while any(base.__name__ == "ControlFlowFuncGraph"
            for base in type(graph).__mro__):
    graph = graph.outer_graph
  return not hasattr(graph, "outer_graph")


_warned_clip_order: list[bool] = []


@contextlib.contextmanager
def _not_summed(inner, distribution):
  """Makes a Keras 3 `inner` apply each replica's gradients as given.

  TF 2.4's `experimental_aggregate_gradients=False`: the job summed them
  itself; each replica clips and applies its own. `check_aggregation` has
  made sure this Keras has the step to shadow.
  """
  if distribution.num_replicas_in_sync == 1:
    yield  # Keras 3's sum of one replica is its gradients.
    return
  clip, _ = _private_api.keras_clip_and_all_reduce_methods(type(inner))
  with _private_api.keras_clip_and_all_reduce_shadowed(
      inner, lambda grads: clip(inner, grads), list):
    yield


@contextlib.contextmanager
def _clip_after_sum(inner, distribution):
  """Makes a Keras 3 `inner` clip the replicas' sum, as TF 2.4 did.

  Keras 3 clips each replica's gradients, then sums them. During the apply
  the two methods are shadowed on the instance so the sum comes first; a
  Keras lacking them gets a warning, once.
  """
  clips = any(getattr(inner, attr, None)
              for attr in ("clipnorm", "clipvalue", "global_clipnorm"))
  if distribution.num_replicas_in_sync == 1 or not clips:
    yield
    return
  clip, all_reduce = _private_api.keras_clip_and_all_reduce_methods(
      type(inner))
  if clip is None or all_reduce is None:
    if not _warned_clip_order:
      _warned_clip_order.append(True)
      tf.get_logger().warning(
          "LossScaleOptimizer: this Keras version clips each replica's "
          "gradients before summing them, where TF 2.4 clipped their sum; "
          "with clipnorm, clipvalue or global_clipnorm the steps differ "
          "from TF 2.4's under several replicas.")
    yield
    return

  def sum_then_clip(grads_and_vars):
    summed = list(all_reduce(inner, grads_and_vars))
    clipped = clip(inner, [g for g, _ in summed])
    return list(zip(clipped, [v for _, v in summed]))

  with _private_api.keras_clip_and_all_reduce_shadowed(
      inner, lambda grads: grads, sum_then_clip):
    yield


def _forwarded_apply_arguments(apply_gradients, name,
                               experimental_aggregate_gradients):
  """`(args, kwargs)` of TF 2.4's arguments that `apply_gradients` takes.

  `name` as a second positional argument, the other where named; never
  through a bare `**kwargs`, which overrides pass on to Keras 3's.
  """
  try:
    parameters = list(inspect.signature(apply_gradients).parameters.values())
  except (TypeError, ValueError):
    return (), {}
  positional = [p for p in parameters if p.kind in (
      p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  takes_varargs = any(p.kind == p.VAR_POSITIONAL for p in parameters)
  args = (name,) if len(positional) >= 2 or takes_varargs else ()
  kwargs = {}
  names = {p.name for p in positional[len(args) + 1:]} | {
      p.name for p in parameters if p.kind == p.KEYWORD_ONLY}
  if "experimental_aggregate_gradients" in names:
    kwargs["experimental_aggregate_gradients"] = (
        experimental_aggregate_gradients)
  return args, kwargs
