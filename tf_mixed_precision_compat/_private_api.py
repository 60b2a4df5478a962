"""The only place this package reaches into TensorFlow and Keras internals.

Non-public modules are imported, and private members read or set, here only;
each import and accessor says why no public API does the job.
"""

import contextlib
import sys

# pylint: disable=unused-import
# The object graph stored in every object-based checkpoint (the
# `_CHECKPOINTABLE_OBJECT_GRAPH` tensor) is a serialized
# TrackableObjectGraph; restoring TF 2.x Keras checkpoints into differently
# structured Keras 3 objects needs to read it, and TF exposes no public parser.
from tensorflow.core.protobuf import trackable_object_graph_pb2
# A TF 2.3 SavedModel keeps its Keras config in the `user_object.metadata` of
# the nodes of `saved_model.pb` (a SavedModel proto); `tf.saved_model.load`
# does not expose that metadata.
from tensorflow.core.protobuf import saved_model_pb2
# TF 2.x Keras SavedModels contain an object of type "optimizer" with slot
# variables; without Keras 2 installed nothing revives that type and
# `tf.saved_model.load` fails ("'_UserObject' object has no attribute
# 'add_slot'"). `tf.__internal__.saved_model.load.register_revived_type`
# registers one; TF has no public way to remove it again, which `uninstall()`
# must do to leave TF exactly as it found it.
from tensorflow.python.saved_model import revived_types
# `legacy.load_model(..., safe_mode=True)` must not run code from a file even
# when the process called `keras.config.enable_unsafe_deserialization()`:
# Keras 3 lets that global switch override the `safe_mode` argument of its
# deserializers, and only its scope (no public equivalent) overrides it back.
from keras.src.saving.serialization_lib import SafeModeScope


def unregister_revived_type(identifier):
  """Removes a type registered with `register_revived_type`."""
  revived_types._REVIVED_TYPE_REGISTRY.pop(identifier, None)  # pylint: disable=protected-access
  if identifier in revived_types._TYPE_IDENTIFIERS:  # pylint: disable=protected-access
    revived_types._TYPE_IDENTIFIERS.remove(identifier)  # pylint: disable=protected-access


# Whether the graph being built will be compiled by XLA
# (`tf.function(jit_compile=True)`, also around nested control flow). XLA
# schedules ops its own way and compiles some graph shapes very slowly (a
# functional `If` over many tensors, hundreds of small reductions), so there
# the gated apply masks its writes instead of restoring them, and the finite
# check concatenates small gradients; TF only tells through its control-flow
# contexts, which have no public accessor.
from tensorflow.python.ops import control_flow_util


def in_xla_context():
  """Whether ops created now are compiled by XLA."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return control_flow_util.GraphOrParentsInXlaContext(
      tf.compat.v1.get_default_graph())


# Restoring a TF 2.x Keras checkpoint through `tf.train.Checkpoint.restore`
# needs the objects the user passed to `tf.train.Checkpoint(...)` by the names
# the checkpoint stores; `Checkpoint` keeps them only as trackable children.
# (`tf.__internal__.tracking.Trackable` declares the method; it is what
# TF's own savers call.)
def trackable_children(obj, save_type="checkpoint", **kwargs):
  """`{name: object}` of a trackable's dependencies (checkpoint ones)."""
  return dict(obj._trackable_children(save_type=save_type, **kwargs))  # pylint: disable=protected-access


# A wrapper that checkpoints like the object it wraps (the loss-scale
# optimizers, tf_keras's TF 2.2 stand-in) answers TF's checkpoint lookups with
# the wrapped object's: TF finds dependencies and queues restores for
# variables not yet created only through these Trackable hooks, which
# `tf.__internal__.tracking.Trackable` declares but exposes no caller for.
def lookup_dependency(obj, name):
  """The trackable's dependency `name` (or None), as a restore finds it."""
  return obj._lookup_dependency(name)  # pylint: disable=protected-access


def deferred_dependencies(obj):
  """`{name: [restorations]}` a trackable holds for children not created yet."""
  return obj._deferred_dependencies  # pylint: disable=protected-access


# `assert_consumed()` of a restore split between TF and the legacy matcher
# must know which checkpoint nodes TF's part resolved; TF's load status
# keeps that only in its private restore-coordinator.
# TF's checkpoint restore hands a slot variable's value to the optimizer
# object it was saved under through this private hook (looked up with
# `hasattr`); a wrapper of a tf_keras OptimizerV2 must pass it on so that a
# restore made before the first step lands when the slot is created.
def optimizer_slot_restorer(optimizer):
  """The optimizer's `_create_or_restore_slot_variable`, or None."""
  return getattr(optimizer, "_create_or_restore_slot_variable", None)


def resolved_node_ids(status):
  """Checkpoint node ids a TF load status has matched to Python objects."""
  return set(status._checkpoint.object_by_proto_id.keys())  # pylint: disable=protected-access


# `enable_mixed_precision_graph_rewrite` warns, as TF 2.4 did, when a Session
# without the rewrite already exists; TF 2.21's Session still records that in
# a module-level flag, which has no public accessor.
from tensorflow.python.training.experimental import mixed_precision_global_state  # pylint: disable=g-import-not-at-top,wrong-import-position


def non_mixed_precision_session_created():
  """Whether a Session was created while the rewrite was not enabled."""
  return mixed_precision_global_state.non_mixed_precision_session_created()


def graph_rewrite_enabled():
  """Whether the graph rewrite functions turned the rewrite on.

  TF 2.3/2.4 kept it in the same module, which TF 2.21's Session still reads
  (a Session made while it is set is not one "without mixed precision").
  """
  return mixed_precision_global_state.is_mixed_precision_graph_rewrite_enabled()


def set_graph_rewrite_enabled(enabled):
  """Sets that flag, as TF 2.3/2.4's enable and disable functions did."""
  mixed_precision_global_state.set_mixed_precision_graph_rewrite_enabled(
      enabled)


def set_non_mixed_precision_session_created(created):
  """Sets that flag (TF's own tests reset it the same way)."""
  mixed_precision_global_state.set_non_mixed_precision_session_created(created)


def tf_keras_loss_scale_optimizer_classes():
  """tf_keras's two concrete loss-scale optimizer classes and their metaclass.

  tf_keras exports only `BaseLossScaleOptimizer` (whose metaclass picks the
  concrete class from the wrapped optimizer); TF 2.3/2.4's experimental class
  subclassed the concrete one, and the tf_keras target's experimental class
  must too, for both of tf_keras's optimizer families. Imported on call: only
  the tf_keras target (TF_USE_LEGACY_KERAS=1) needs them.

  Returns:
    `(LossScaleOptimizer, LossScaleOptimizerV3, LossScaleOptimizerMetaclass)`.
  """
  # pylint: disable-next=g-import-not-at-top
  from tf_keras.src.mixed_precision import loss_scale_optimizer as lso
  return (lso.LossScaleOptimizer, lso.LossScaleOptimizerV3,
          lso.LossScaleOptimizerMetaclass)


def tf_keras_tf22_restoration_class():
  """tf_keras's stand-in for the TF 2.2 `base_optimizer` checkpoint edge.

  TF 2.2 checkpoints hold the wrapped optimizer's iterations and
  hyperparameters under `optimizer/base_optimizer/`; tf_keras's stand-in
  restores only its slots. The tf_keras target makes it hand the rest to the
  wrapped optimizer too (`tf_keras_classes`), and
  only this class is where that edge ends.

  Returns:
    tf_keras's `FakeOptimizerForRestoration` class.
  """
  # pylint: disable-next=g-import-not-at-top
  from tf_keras.src.mixed_precision import loss_scale_optimizer as lso
  return lso.FakeOptimizerForRestoration


def tf_keras_optimizer_config_in_graph(optimizer):
  """`get_config()` of a tf_keras current-family optimizer built in a TF1 graph.

  Its `get_config` reads the learning-rate variable with `.numpy()`, which a
  TF1 graph cannot do before a session runs; the value it was created with is
  the constant initial value in the graph. Only the private attribute holds
  the variable, so it is read (and put back) here.

  Args:
    optimizer: A `tf_keras.optimizers.Optimizer` built in a TF1 graph.

  Returns:
    The optimizer's config, learning rate as created.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # pylint: disable=protected-access
  variable = optimizer._learning_rate
  value = None
  if hasattr(variable, "initial_value") and not callable(variable):
    # Keras stores a learning-rate schedule unwrapped; only a variable needs
    # its creation value.
    value = tf.get_static_value(variable.initial_value)
  if value is None:
    return optimizer.get_config()
  object.__setattr__(optimizer, "_learning_rate", float(value))
  try:
    return optimizer.get_config()
  finally:
    object.__setattr__(optimizer, "_learning_rate", variable)


# The `tf.compat.v1` loss-scale optimizer passes the wrapped optimizer's
# `use_locking` on to its own base class, as TF 2.3's did; `tf.compat.v1`
# optimizers take it as an argument but keep it only in this attribute.
def v1_optimizer_use_locking(optimizer):
  """The `use_locking` a `tf.compat.v1.train.Optimizer` was created with."""
  return optimizer._use_locking  # pylint: disable=protected-access


# The Keras 3 optimizer a loss-scale optimizer wraps, asked what TF 2.4's
# OptimizerV2 answered publicly. Keras 3 keeps these private: the variables
# it was built with (its `variables` also hold slots and counters), its
# check that applied variables are among them, and the step counter itself
# (`iterations` may hand out a distributed wrapper of it).
def keras_optimizer_built_variables(optimizer):
  """The variables a Keras 3 optimizer was built with, or None before that."""
  return getattr(optimizer, "_trainable_variables", None)


def keras_optimizer_check_variables_are_known(optimizer, variables):
  """Raises, as a built Keras 3 optimizer does, for variables it lacks."""
  check = getattr(optimizer, "_check_variables_are_known", None)
  if check is not None:
    check(variables)


def keras_optimizer_iterations_variable(optimizer):
  """The step-counter variable of a Keras optimizer (None if not kept)."""
  return getattr(optimizer, "_iterations", None)


# TF 2.4's optimizers summed gradients over replicas, then clipped the sum;
# Keras 3's clip per replica first. Only these two private steps of its
# `apply` can be reordered (by shadowing them on the instance for one apply).
def keras_clip_and_all_reduce_methods(optimizer_class):
  """`(_clip_gradients, _all_reduce_sum_gradients)` of a Keras 3 class.

  Either is None when this Keras version lacks it.
  """
  return (getattr(optimizer_class, "_clip_gradients", None),
          getattr(optimizer_class, "_all_reduce_sum_gradients", None))


@contextlib.contextmanager
def keras_clip_and_all_reduce_shadowed(optimizer, clip, all_reduce):
  """Replaces, on `optimizer` only and while entered, those two steps."""
  # Set in `__dict__` so that Keras's attribute tracking never sees them.
  optimizer.__dict__["_clip_gradients"] = clip
  optimizer.__dict__["_all_reduce_sum_gradients"] = all_reduce
  try:
    yield
  finally:
    del optimizer.__dict__["_clip_gradients"]
    del optimizer.__dict__["_all_reduce_sum_gradients"]


# tf_keras's OptimizerV2 (TF 2.4's optimizer) keeps its hyperparameters by
# name in `_hyper`; its public `get_config` mixes them with other settings.
def tf_keras_hyperparameter_names(optimizer):
  """The hyperparameter names of a tf_keras OptimizerV2."""
  return frozenset(optimizer._hyper)  # pylint: disable=protected-access


# TF 2.x checkpoints and H5 files name a model's variables by the layer that
# owns them, at any depth; Keras 3's `layers` lists only direct children and
# no public API walks nested layers (sub-models, layers held as attributes).
def keras_nested_layers(model):
  """Every layer inside a Keras 3 `model`, nested ones too, not itself."""
  return model._flatten_layers(include_self=False)  # pylint: disable=protected-access


# TF 2.x optimizer checkpoints restore into tf_keras's current optimizers
# through hooks `install()` wraps: tf_keras finds a checkpoint's optimizer
# dependencies only through `Optimizer._lookup_dependency`, and TF 2.3's
# `compile` wrapping by a `PolicyV1` needs `Model._get_optimizer`, where
# tf_keras's `compile` turns its argument into an optimizer.
def tf_keras_optimizer_lookup_dependency(optimizer_class):
  """The `_lookup_dependency` method of a tf_keras optimizer class."""
  return optimizer_class._lookup_dependency  # pylint: disable=protected-access


def tf_keras_model_get_optimizer(model_class):
  """The `_get_optimizer` method of a tf_keras model class."""
  return model_class._get_optimizer  # pylint: disable=protected-access


# A restore into a tf_keras model not built yet hands each weight its value
# when the layer creates it, and a sublayer made in `build` its values when
# the layer tracks it; the values are checked only then, inside TF's
# `_add_variable_with_custom_getter` (which tf_keras's `add_weight` calls) and
# `_handle_deferred_dependencies` (which tracking a new attribute calls), so a
# value that does not fit fails there. Wrapping those hooks on the layer
# instance is the one place that tells such a failure from any other error
# of the model's first call.
_LAYER_RESTORE_HOOKS = ("_add_variable_with_custom_getter",
                        "_handle_deferred_dependencies")


def wrap_layer_restore_hooks(layer, wrap):
  """Replaces each of `layer`'s restore hooks by `wrap(original, is_handover)`.

  `is_handover` is True for the hook that hands values to a new dependency
  (its arguments: `name, trackable`), False for variable creation (`name,
  ...`).
  """
  for hook in _LAYER_RESTORE_HOOKS:
    original = getattr(layer, hook)
    object.__setattr__(layer, hook,
                       wrap(original, hook == "_handle_deferred_dependencies"))


def unwrap_layer_restore_hooks(layer):
  """Undoes `wrap_layer_restore_hooks` (the class's hooks serve again)."""
  for hook in _LAYER_RESTORE_HOOKS:
    if hook in vars(layer):
      object.__delattr__(layer, hook)


# A TF 2.x checkpoint restoring slots into an unbuilt tf_keras optimizer must
# wait for its build; tf_keras's current optimizers record being built only in
# `_built`, and its OptimizerV2 creates slots for given variables only
# through `_create_all_weights`.
def tf_keras_optimizer_is_built(optimizer):
  """Whether a tf_keras current-family optimizer has built its slots."""
  return bool(getattr(optimizer, "_built", False))


# tf_keras marks an optimizer its LossScaleOptimizer wrapped only with this
# flag (set before its argument checks); the package refuses a second wrapper
# with TF 2.4's message before tf_keras does with its own, also when tf_keras
# built the first one itself, and clears it after a refused first wrapper.
def tf_keras_wrapped_by_loss_scale_optimizer(optimizer):
  """Whether a tf_keras LossScaleOptimizer ever wrapped `optimizer`."""
  return bool(getattr(optimizer, "_is_wrapped_by_loss_scale_optimizer", False))


def tf_keras_unmark_wrapped(optimizer):
  """Clears the flag after a refused wrapper set it (see the caller)."""
  if getattr(optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
    optimizer._is_wrapped_by_loss_scale_optimizer = False


def tf_keras_v2_create_slots(optimizer, variables):
  """Creates an OptimizerV2's slots for `variables`; False for other kinds."""
  create = getattr(optimizer, "_create_all_weights", None)
  if create is None:
    return False
  create(variables)
  return True


# Keras re-creates an exception raised in a layer's `call` as
# `type(e)(message + call arguments)`, and AutoGraph (tf.function) replaces
# one raised while tracing by a `StagingError` when its type takes other
# constructor arguments than a message, unless the exception is marked to
# pass through. A failed restore's `RestoreError` (a `ValueError` taking its
# own arguments), raised from a model's first call or again from later ones,
# must reach the job as it is, eagerly and in tf.function.
def keep_error_as_raised(error):
  """Marks `error` so Keras and AutoGraph re-raise it unchanged."""
  try:
    error._keras_call_info_injected = True  # pylint: disable=protected-access
    error.ag_pass_through = True
  except AttributeError:
    pass
  return error


# A TF 2.x slot restored into a tf_keras optimizer is checked against its
# variable when TF hands it over (TF 2.4 refused a slot of another shape
# then, tf_keras 2.21 creates it or fails at the first step). TF's
# `CheckpointPosition` exposes the value's shape, not its dtype, which is in
# its restore coordinator's `dtype_map`; and OptimizerV2's hook for it is
# private.
def checkpoint_position_dtype(position):
  """The dtype of a `CheckpointPosition`'s VARIABLE_VALUE, or None."""
  dtype_map = getattr(position.checkpoint, "dtype_map", None) or {}
  for attr in position.object_proto.attributes:
    if attr.name == "VARIABLE_VALUE":
      return dtype_map.get(attr.checkpoint_key)
  return None


def tf_keras_v2_create_or_restore_slot_variable(optimizer_class):
  """tf_keras OptimizerV2's `_create_or_restore_slot_variable`."""
  return optimizer_class._create_or_restore_slot_variable  # pylint: disable=protected-access


# Keras 3's Nadam keeps the running product of its momentum schedule (TF 2.4's
# `momentum_cache` weight) in an unnamed variable with no public accessor;
# TF 2.4's `optimizer.weights` listed it after `iterations`.
def keras_nadam_u_product(optimizer):
  """Keras 3 Nadam's momentum-schedule product variable, or None."""
  return getattr(optimizer, "_u_product", None)


# tf_keras's loss-scale optimizers update the loss scale only when their
# state is an instance of this class (their `apply_gradients` tests it); the
# tf_keras target's experimental class holds TF 2.3's `LossScale` in a
# subclass of it, as TF 2.3 updated any `LossScale`.
def tf_keras_dynamic_loss_scale_state_class():
  """tf_keras's `_DynamicLossScaleState` class (imported on call)."""
  # pylint: disable-next=g-import-not-at-top
  from tf_keras.src.mixed_precision import loss_scale_optimizer as lso
  return lso._DynamicLossScaleState  # pylint: disable=protected-access


# TF 2.4 code in a `tf.compat.v1` session fetches `opt.loss_scale`, a tensor
# there; the experimental class's loss scale is a tensor-like object
# (`optimizers/_loss_scale_value`), which `Session.run` fetches only through
# this registry (its only entry point, with no public alias). It concerns
# that class alone and changes nothing for any other fetch.
def register_session_fetch(cls, to_tensor):
  """Makes `Session.run` fetch instances of `cls` as `to_tensor(obj)`."""
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.python.client import session
  session.register_session_run_conversion_functions(
      cls, lambda obj: ([to_tensor(obj)], lambda values: values[0]))


# `tf.keras` resolves (through TF's lazy loader) to a package that Keras or
# tf_keras keep under a private name, with no public handle on it: Keras 3's
# `keras._tf_keras.keras`, tf_keras's `tf_keras.api._v2.keras`. An import
# statement naming `tensorflow.keras...` must yield that package's modules
# (`_import_hooks.AliasFinder`), not new copies.
_TF_KERAS_ROOTS = {"keras3": "keras._tf_keras.keras",
                   "tf_keras": "tf_keras.api._v2.keras"}


def tf_keras_root_name(target):
  """The module name `tf.keras` resolves to on `target` (a target name)."""
  return _TF_KERAS_ROOTS[target]


def defining_module(function):
  """The module that defines `function` under its name, or None.

  Keras' public API modules bind functions defined in private modules
  (`keras.src.saving.saving_api.load_model`); `install()` replaces them there
  too, so that an API module executed after it binds the replacement.

  Args:
    function: A function.

  Returns:
    The loaded module whose attribute `function.__name__` is `function`.
  """
  module = sys.modules.get(getattr(function, "__module__", None) or "")
  if module is not None and vars(module).get(function.__name__) is function:
    return module
  return None


def keras_lazy_loader_version(loader):
  """Which Keras a TF Keras lazy loader (`tf.keras` etc.) resolved to.

  Only the loader's private fields tell whether it resolved yet (TF reads
  `TF_USE_LEGACY_KERAS` then) and to which Keras.

  Args:
    loader: A value of `vars(tf)`, `vars(tf.compat.v1)`, ...

  Returns:
    None if `loader` is no such loader or not resolved yet; else TF's name
    for the Keras it chose (`"keras_3"`, `"tf_keras"`, `"keras_2"`).
  """
  if not is_keras_lazy_loader(loader):
    return None
  state = vars(loader)
  if not state.get("_tfll_initialized", False):
    return None
  return state.get("_tfll_keras_version")


def is_keras_lazy_loader(value):
  """Whether `value` is TF's Keras lazy loader (its class is not public)."""
  return type(value).__name__ == "KerasLazyLoader"
