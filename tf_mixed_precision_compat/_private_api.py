"""The only place this package reaches into TensorFlow and Keras internals.

Non-public modules are imported, and private members read or set, here only;
each import and accessor says in one line why no public API does the job.
"""

import contextlib
import sys

import tensorflow as tf

# pylint: disable=unused-import
# TF 2.x checkpoints' object graph (TrackableObjectGraph): no public parser.
from tensorflow.core.protobuf import trackable_object_graph_pb2
# A TF 2.3 SavedModel's Keras config: `tf.saved_model.load` hides the metadata.
from tensorflow.core.protobuf import saved_model_pb2
# uninstall() unregisters the revived "optimizer" type: TF has no public way.
from tensorflow.python.saved_model import revived_types
# Only this scope overrides `enable_unsafe_deserialization()` for safe_mode.
from keras.src.saving.serialization_lib import SafeModeScope


def unregister_revived_type(identifier):
  """Removes a type registered with `register_revived_type`."""
  revived_types._REVIVED_TYPE_REGISTRY.pop(identifier, None)  # pylint: disable=protected-access
  if identifier in revived_types._TYPE_IDENTIFIERS:  # pylint: disable=protected-access
    revived_types._TYPE_IDENTIFIERS.remove(identifier)  # pylint: disable=protected-access


# Only TF's control-flow contexts tell whether XLA compiles the graph built.
from tensorflow.python.ops import control_flow_util


def in_xla_context():
  """Whether ops created now are compiled by XLA."""
  return control_flow_util.GraphOrParentsInXlaContext(
      tf.compat.v1.get_default_graph())


# `Checkpoint` keeps the objects passed to it only as trackable children.
def trackable_children(obj, save_type="checkpoint", **kwargs):
  """`{name: object}` of a trackable's dependencies (checkpoint ones)."""
  return dict(obj._trackable_children(save_type=save_type, **kwargs))  # pylint: disable=protected-access


# Restores find dependencies (and queue deferred ones) only through these hooks.
def lookup_dependency(obj, name):
  """The trackable's dependency `name` (or None), as a restore finds it."""
  return obj._lookup_dependency(name)  # pylint: disable=protected-access


def deferred_dependencies(obj):
  """`{name: [restorations]}` a trackable holds for children not created yet."""
  return obj._deferred_dependencies  # pylint: disable=protected-access


# `assert_consumed` asks only the restore's object table what was matched.
from tensorflow.python.checkpoint import checkpoint as checkpoint_lib


def checkpoint_load_status_class():
  """The class of the status `Checkpoint.restore` / `read` return."""
  return checkpoint_lib.CheckpointLoadStatus


@contextlib.contextmanager
def checkpoint_status_matches(status, objects):
  """Counts `objects` as matched by `status`'s restore within the block."""
  table = status._checkpoint.object_by_proto_id  # pylint: disable=protected-access
  # Keys no checkpoint node has (node ids are ints).
  keys = [("derived", i) for i in range(len(objects))]
  table.update(zip(keys, objects))
  try:
    yield
  finally:
    for key in keys:
      table.pop(key, None)


def tf_keras_current_learning_rate(optimizer):
  """A tf_keras current optimizer's schedule value variable, or None."""
  return getattr(optimizer, "_current_learning_rate", None)


# TF restores a slot through this hook; a tf_keras wrapper must pass it on.
def optimizer_slot_restorer(optimizer):
  """The optimizer's `_create_or_restore_slot_variable`, or None."""
  return getattr(optimizer, "_create_or_restore_slot_variable", None)


# Only TF's private restore coordinator knows the nodes its restore resolved.
def resolved_node_ids(status):
  """Checkpoint node ids a TF load status has matched to Python objects."""
  return set(status._checkpoint.object_by_proto_id.keys())  # pylint: disable=protected-access


# TF's Session keeps the graph rewrite's flags in this module only.
from tensorflow.python.training.experimental import mixed_precision_global_state  # pylint: disable=g-import-not-at-top,wrong-import-position


def non_mixed_precision_session_created():
  """Whether a Session was created while the rewrite was not enabled."""
  return mixed_precision_global_state.non_mixed_precision_session_created()


def graph_rewrite_enabled():
  """Whether the graph rewrite functions turned the rewrite on."""
  return mixed_precision_global_state.is_mixed_precision_graph_rewrite_enabled()


def set_graph_rewrite_enabled(enabled):
  """Sets that flag, as TF 2.3/2.4's enable and disable functions did."""
  mixed_precision_global_state.set_mixed_precision_graph_rewrite_enabled(
      enabled)


def set_non_mixed_precision_session_created(created):
  """Sets that flag (TF's own tests reset it the same way)."""
  mixed_precision_global_state.set_non_mixed_precision_session_created(created)


def _tf_keras_lso():
  """tf_keras's loss_scale_optimizer module (only its target imports it)."""
  # pylint: disable-next=g-import-not-at-top
  from tf_keras.src.mixed_precision import loss_scale_optimizer
  return loss_scale_optimizer


# tf_keras exports only the base class; TF 2.3's subclassed the concrete ones.
def tf_keras_loss_scale_optimizer_classes():
  """tf_keras's `(LossScaleOptimizer, LossScaleOptimizerV3, metaclass)`."""
  lso = _tf_keras_lso()
  return (lso.LossScaleOptimizer, lso.LossScaleOptimizerV3,
          lso.LossScaleOptimizerMetaclass)


# TF 2.2 checkpoints' `base_optimizer` edge ends only at this private class.
def tf_keras_tf22_restoration_class():
  """tf_keras's `FakeOptimizerForRestoration` class."""
  return _tf_keras_lso().FakeOptimizerForRestoration


# Only `_learning_rate` holds the variable a TF1 graph cannot `.numpy()` yet.
def tf_keras_optimizer_config_in_graph(optimizer):
  """`get_config()` of a tf_keras optimizer in a TF1 graph, lr as created."""
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


# `tf.compat.v1` optimizers keep their `use_locking` argument only here.
def v1_optimizer_use_locking(optimizer):
  """The `use_locking` a `tf.compat.v1.train.Optimizer` was created with."""
  return optimizer._use_locking  # pylint: disable=protected-access


# Keras 3 keeps private what TF 2.4's OptimizerV2 answered publicly.
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


# TF 2.4 clipped the replicas' sum; only these private steps can be reordered.
def keras_clip_and_all_reduce_methods(optimizer_class):
  """`(_clip_gradients, _all_reduce_sum_gradients)` of a class, or Nones."""
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


# OptimizerV2's public `get_config` mixes its hyperparameters with the rest.
def tf_keras_hyperparameter_names(optimizer):
  """The hyperparameter names of a tf_keras OptimizerV2."""
  return frozenset(optimizer._hyper)  # pylint: disable=protected-access


# No public Keras 3 API walks nested layers, which checkpoints name.
def keras_nested_layers(model):
  """Every layer inside a Keras 3 `model`, nested ones too, not itself."""
  return model._flatten_layers(include_self=False)  # pylint: disable=protected-access


# tf_keras finds optimizer dependencies and compile's optimizer only here.
def tf_keras_optimizer_lookup_dependency(optimizer_class):
  """The `_lookup_dependency` method of a tf_keras optimizer class."""
  return optimizer_class._lookup_dependency  # pylint: disable=protected-access


def tf_keras_model_get_optimizer(model_class):
  """The `_get_optimizer` method of a tf_keras model class."""
  return model_class._get_optimizer  # pylint: disable=protected-access


# A deferred value is checked only inside these layer hooks (tf_keras's
# `add_weight`, tracking a sublayer made in `build`): wrapping them is the one
# way to tell its failure from any other error of the first call.
_LAYER_RESTORE_HOOKS = ("_add_variable_with_custom_getter",
                        "_handle_deferred_dependencies")


def wrap_layer_restore_hooks(layer, wrap):
  """Replaces each of `layer`'s restore hooks by `wrap(original, is_handover)`.

  `is_handover`: True for the hook handing values to a new dependency (`name,
  trackable`), False for variable creation (`name, ...`).
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


# tf_keras records being built, and creates slots, only privately.
def tf_keras_optimizer_is_built(optimizer):
  """Whether a tf_keras current-family optimizer has built its slots."""
  return bool(getattr(optimizer, "_built", False))


def tf_keras_v2_create_slots(optimizer, variables):
  """Creates an OptimizerV2's slots for `variables`; False for other kinds."""
  create = getattr(optimizer, "_create_all_weights", None)
  if create is None:
    return False
  create(variables)
  return True


# tf_keras marks an optimizer its LossScaleOptimizer wrapped only so.
def tf_keras_wrapped_by_loss_scale_optimizer(optimizer):
  """Whether a tf_keras LossScaleOptimizer ever wrapped `optimizer`."""
  return bool(getattr(optimizer, "_is_wrapped_by_loss_scale_optimizer", False))


def tf_keras_unmark_wrapped(optimizer):
  """Clears the flag after a refused wrapper set it (see the caller)."""
  if getattr(optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
    optimizer._is_wrapped_by_loss_scale_optimizer = False


# Keras and AutoGraph re-create errors of a call unless marked so.
def keep_error_as_raised(error):
  """Marks `error` so Keras and AutoGraph re-raise it unchanged."""
  try:
    error._keras_call_info_injected = True  # pylint: disable=protected-access
    error.ag_pass_through = True
  except AttributeError:
    pass
  return error


# A restored slot's dtype is only in the restore coordinator's `dtype_map`.
def checkpoint_position_dtype(position):
  """The dtype of a `CheckpointPosition`'s VARIABLE_VALUE, or None."""
  dtype_map = getattr(position.checkpoint, "dtype_map", None) or {}
  for attr in position.object_proto.attributes:
    if attr.name == "VARIABLE_VALUE":
      return dtype_map.get(attr.checkpoint_key)
  return None


# OptimizerV2's hook checking a restored slot against its variable is private.
def tf_keras_v2_create_or_restore_slot_variable(optimizer_class):
  """tf_keras OptimizerV2's `_create_or_restore_slot_variable`."""
  return optimizer_class._create_or_restore_slot_variable  # pylint: disable=protected-access


# Keras 3 Nadam's `momentum_cache` counterpart has no public accessor.
def keras_nadam_u_product(optimizer):
  """Keras 3 Nadam's momentum-schedule product variable, or None."""
  return getattr(optimizer, "_u_product", None)


# tf_keras's optimizers update the loss scale only of this private class.
def tf_keras_dynamic_loss_scale_state_class():
  """tf_keras's `_DynamicLossScaleState` class (imported on call)."""
  return _tf_keras_lso()._DynamicLossScaleState  # pylint: disable=protected-access


# `Session.run` fetches other types only through this unexported registry.
def register_session_fetch(cls, to_tensor):
  """Makes `Session.run` fetch instances of `cls` as `to_tensor(obj)`."""
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.python.client import session
  session.register_session_run_conversion_functions(
      cls, lambda obj: ([to_tensor(obj)], lambda values: values[0]))


# `tf.keras` resolves to these privately named packages (no public handle).
_TF_KERAS_ROOTS = {"keras3": "keras._tf_keras.keras",
                   "tf_keras": "tf_keras.api._v2.keras"}


def tf_keras_root_name(target):
  """The module name `tf.keras` resolves to on `target` (a target name)."""
  return _TF_KERAS_ROOTS[target]


# Keras API modules bind functions defined in private modules; install()
# replaces them there too, for API modules executed after it.
def defining_module(function):
  """The loaded module whose attribute `function.__name__` is it, or None."""
  module = sys.modules.get(getattr(function, "__module__", None) or "")
  if module is not None and vars(module).get(function.__name__) is function:
    return module
  return None


# Only the loader's private fields tell whether and to which Keras it resolved.
def keras_lazy_loader_version(loader):
  """A resolved lazy loader's Keras (`"keras_3"`, `"tf_keras"`...) or None."""
  if not is_keras_lazy_loader(loader):
    return None
  state = vars(loader)
  if not state.get("_tfll_initialized", False):
    return None
  return state.get("_tfll_keras_version")


def is_keras_lazy_loader(value):
  """Whether `value` is TF's Keras lazy loader (its class is not public)."""
  return type(value).__name__ == "KerasLazyLoader"
