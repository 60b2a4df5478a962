"""TF 2.3/2.4 Keras dtype policies, usable by Keras 3 layers.

`Policy`, `PolicyV1` (TF 2.3's, with a loss scale), the global policy
(Keras 3's own) and a layer config's policy `serialize`/`deserialize`, as TF
2.4 had them; docs/architecture.md has the design (the Keras targets).

Example:

>>> policy = Policy("mixed_float16")
>>> policy.compute_dtype, policy.variable_dtype
('float16', 'float32')
>>> with policy_scope("mixed_bfloat16"):
...   global_policy()
<Policy "mixed_bfloat16">
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional, Union

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _device_check
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat.endpoints import export

__all__ = [
    "Policy",
    "PolicyV1",
    "deserialize",
    "get_layer_policy",
    "global_policy",
    "policy_scope",
    "serialize",
    "set_global_policy",
    "set_policy",
]

_MIXED = {"mixed_float16": ("float16", "float32"),
          "mixed_bfloat16": ("bfloat16", "float32")}


def _tf_dtype_name(name):
  """The canonical dtype name TF gives `name`, or None if it is no dtype."""
  try:
    return tf.as_dtype(name).name
  except TypeError:
    return None


def _removed_policy_error(name):
  message = ("Policies ending in '_float32_vars' have been removed from "
             "TensorFlow.")
  if name in ("infer_float32_vars", "infer_with_float32_vars"):
    message += (" Please use the 'mixed_float16' or 'mixed_bfloat16' policy "
                "instead.")
  elif name == "float16_with_float32_vars":
    message += " Please use the 'mixed_float16' policy instead."
  elif name == "bfloat16_with_float32_vars":
    message += " Please use the 'mixed_bfloat16' policy instead."
  return ValueError(f"{message} Got policy name: '{name}'")


# Registered so that a Keras 3 `.keras` file of a model whose layers hold one
# of our policies loads again (Keras 3 looks a policy class up by this name).
_register = keras.saving.register_keras_serializable(
    package="tf_mixed_precision_compat")


@export("keras.mixed_precision.Policy")
@_register
class Policy(keras.DTypePolicy):
  """A Keras layer's dtype policy (TF 2.4's `tf.keras.mixed_precision.Policy`).

  A policy decides which dtype a layer computes in (`compute_dtype`) and which
  dtype it creates its variables in (`variable_dtype`). Pass one to a layer's
  `dtype` argument, or make it the default of every new layer with
  `set_global_policy`. It is a `keras.DTypePolicy`, so Keras 3 layers use it
  directly.

  Names:

  * any dtype name, such as `"float32"`, `"float64"` or `"float16"`: both dtypes
    are that dtype;
  * `"mixed_float16"` / `"mixed_bfloat16"`: computations in float16 / bfloat16,
    variables in float32 (mixed precision);
  * `"_infer"`: TF 1's behaviour, both dtypes None. Keras 3 has no dtype
    inference, so a Keras 3 layer given this policy uses `floatx()`.

  `Model.compile` wraps the optimizer in a `LossScaleOptimizer` when the model's
  policy is `"mixed_float16"`, once `install()` (or
  `install.enable_compile_integration()`) was called.

  Example:

  >>> policy = Policy("mixed_float16")
  >>> layer = keras.layers.Dense(2, dtype=policy)
  >>> layer(tf.ones((1, 3))).dtype
  tf.float16
  >>> layer.kernel.dtype
  'float32'
  """

  def __init__(self, name: str) -> None:
    """Creates the policy.

    Args:
      name: The policy name (a string), see the class docstring.

    Raises:
      TypeError: If `name` is a `tf.DType` or not a string.
      ValueError: If `name` is neither a dtype name nor a mixed policy name.
    """
    if isinstance(name, tf.DType):
      raise TypeError("'name' must be a string, not a DType. "
                      f"Instead, pass DType.name. Got: {name.name}")
    if not isinstance(name, str):
      raise TypeError(f"'name' must be a string, but got: {name}")
    super().__init__(name)
    if name == "mixed_float16":
      # As TF 2.4: once per process, whether the GPUs run float16 fast.
      _device_check.log_once()

  def _parse_name(self, name):
    """Returns the (compute_dtype, variable_dtype) pair named by `name`."""
    if name.endswith("_float32_vars"):
      raise _removed_policy_error(name)
    if name in _MIXED:
      return _MIXED[name]
    if name == "_infer":
      return None, None
    dtype = _tf_dtype_name(name)
    if dtype is None:
      # `from None`: TF hid the dtype conversion error behind this one.
      raise ValueError(
          f"Cannot convert value {name} to a mixed precision Policy. Valid "
          "policies include include 'mixed_float16', 'mixed_bfloat16', and "
          "the name of any dtype such as 'float32'.") from None
    return dtype, dtype

  def __repr__(self):
    return f'<Policy "{self.name}">'

  def __eq__(self, other):
    # TF compared policies by identity; Keras 3 compares by class and name.
    # Keras' rule is kept so that two `Policy("float32")` are interchangeable.
    return (type(other) is type(self) and other.name == self.name and
            other.get_config() == self.get_config())

  def __hash__(self):
    return hash((type(self), self.name))

  def get_config(self) -> dict[str, Any]:
    """Returns `{"name": name}`."""
    return {"name": self.name}

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    """Creates a policy from `get_config()` output.

    TF 2.3's `Policy` config may also hold a `loss_scale`; as in TF 2.4 it is
    silently dropped.

    Args:
      config: A dict with key "name" (and possibly "loss_scale").
      custom_objects: Unused, for TF's signature.

    Returns:
      A policy of class `cls`.
    """
    del custom_objects
    if "loss_scale" in config:
      config = {k: v for k, v in config.items() if k != "loss_scale"}
    return cls(**config)


def _warning(message):
  tf.get_logger().warning(message)


@export("keras.mixed_precision.experimental.Policy")
@_register
class PolicyV1(Policy):
  """The experimental dtype policy of TF 2.3, which also holds a loss scale.

  `tf.keras.mixed_precision.experimental.Policy`. Same names and dtypes as
  `Policy`, plus a `loss_scale` that `Model.compile` uses (after `install()`
  or `install.enable_compile_integration()`) to wrap the optimizer in a
  `LossScaleOptimizer`. Layers ignore the loss scale.

  Configs of this class reload, as in TF 2.4, as the non-experimental `Policy`
  with the loss scale dropped (see `deserialize`).

  Example:

  >>> policy = PolicyV1("mixed_float16", loss_scale=1024)
  >>> policy.loss_scale
  FixedLossScale(1024.0)
  >>> PolicyV1("float32").loss_scale is None
  True
  """

  def __init__(self, name: str, loss_scale: Any = "auto") -> None:
    """Creates the policy.

    Args:
      name: The policy name, as for `Policy`.
      loss_scale: A `LossScale` (ours or `tf.compat.v1.mixed_precision`'s), an
        int or float (a `FixedLossScale`), `"dynamic"` (a `DynamicLossScale`),
        a serialized loss scale dict, None (no loss scaling), or `"auto"`
        (the default): `"dynamic"` for `"mixed_float16"`, else None.

    Raises:
      TypeError: If `name` is not a string.
      ValueError: If `name` is not a policy name or `loss_scale` cannot be
        interpreted.
    """
    super().__init__(name)
    self._using_default_loss_scale, self._loss_scale = v1_loss_scale(
        name, self.compute_dtype, loss_scale)

  @property
  def loss_scale(self) -> Optional[loss_scale_module.LossScale]:
    """The `LossScale` `Model.compile` uses, or None."""
    return self._loss_scale

  def __repr__(self):
    return v1_repr(self)

  def __eq__(self, other):
    return (type(other) is type(self) and other.name == self.name and
            other.loss_scale is self.loss_scale)

  def __hash__(self):
    return hash((type(self), self.name, id(self.loss_scale)))

  def get_config(self) -> dict[str, Any]:
    """Returns the name, and the serialized loss scale unless it was "auto"."""
    return v1_config(self.name, self._using_default_loss_scale,
                     self.loss_scale)

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    """Creates the policy, deserializing a loss scale dict.

    Args:
      config: A `get_config()` dict.
      custom_objects: Optional dict of extra loss scale classes by name.

    Returns:
      A `PolicyV1`.
    """
    return cls(**v1_config_arguments(config, custom_objects))


def v1_loss_scale(name: str, compute_dtype: Optional[str],
                  loss_scale: Any) -> tuple[bool, Any]:
  """A TF 2.3 `PolicyV1`'s loss scale (either target's class).

  Args:
    name: The policy name.
    compute_dtype: The policy's compute dtype.
    loss_scale: The `loss_scale` argument (see `PolicyV1`).

  Returns:
    `(whether it was "auto", the LossScale or None)`.

  Raises:
    ValueError: If `loss_scale` cannot be interpreted.
  """
  using_default = isinstance(loss_scale, str) and loss_scale == "auto"
  if using_default:
    loss_scale = "dynamic" if name == "mixed_float16" else None
  # Validated before the warning so that a bad loss scale logs nothing.
  resolved = loss_scale_module.get(loss_scale)
  if resolved is not None and compute_dtype not in (None, "float16"):
    _warning("Creating a Policy with a loss scale is only useful for float16 "
             f"policies. You passed loss_scale={loss_scale!r} for policy "
             f"{name}. Consider not passing any loss_scale instead.")
  return using_default, resolved


def v1_repr(policy: Any) -> str:
  """TF 2.3's `repr` of a `PolicyV1` (either target's class)."""
  return f'<PolicyV1 "{policy.name}", loss_scale={policy.loss_scale}>'


def v1_config(name: str, using_default: bool,
              loss_scale: Any) -> dict[str, Any]:
  """A `PolicyV1`'s config: the name, and the loss scale unless "auto"."""
  config: dict[str, Any] = {"name": name}
  if not using_default:
    config["loss_scale"] = (None if loss_scale is None else
                            loss_scale_module.serialize(loss_scale))
  return config


def v1_config_arguments(config: dict[str, Any],
                        custom_objects: Optional[dict[str, Any]]
                        ) -> dict[str, Any]:
  """A `PolicyV1` config as constructor arguments (loss scale deserialized)."""
  if isinstance(config.get("loss_scale"), dict):
    config = dict(config)
    config["loss_scale"] = loss_scale_module.deserialize(
        config["loss_scale"], custom_objects=custom_objects)
  return config


# --------------------------------------------------------------------------
# Conversion of Keras 3 policies.

_cache = threading.local()


def _as_our_policy(keras_policy):
  """Returns `keras_policy` (any Keras 3 dtype policy) as one of ours."""
  if isinstance(keras_policy, Policy):
    return keras_policy
  name = getattr(keras_policy, "name", None)
  compute = keras_policy.compute_dtype
  variable = keras_policy.variable_dtype
  if isinstance(name, str):
    try:
      candidate = Policy(name)
    except ValueError:
      candidate = None
    if (candidate is not None and candidate.compute_dtype == compute and
        candidate.variable_dtype == variable):
      return candidate
  # Quantized and other Keras-only policies: keep their dtypes.
  if compute == variable:
    return Policy(compute)
  for mixed_name, dtypes in _MIXED.items():
    if dtypes == (compute, variable):
      return Policy(mixed_name)
  raise ValueError(f"The Keras dtype policy {keras_policy!r} (compute dtype "
                   f"{compute}, variable dtype {variable}) has no TF 2.4 "
                   "Policy equivalent.")


# --------------------------------------------------------------------------
# The global policy.


@export("keras.mixed_precision.global_policy",
        "keras.mixed_precision.experimental.global_policy")
def global_policy() -> Policy:
  """Returns the global dtype policy, the default of layers created now.

  The global policy is Keras 3's (`keras.config.dtype_policy()`); one set
  through Keras directly is returned converted into a `Policy`. When none was
  set it is `Policy(keras.config.floatx())`.

  Returns:
    A `Policy` (a `PolicyV1` if one was set).

  Example:

  >>> global_policy()
  <Policy "float32">
  """
  current = keras.config.dtype_policy()
  cached = getattr(_cache, "pair", None)
  if cached is not None and cached[0] is current:
    return cached[1]
  ours = _as_our_policy(current)
  _cache.pair = (current, ours)
  return ours


def _graph_rewrite_enabled():
  if _private_api.graph_rewrite_enabled():  # The graph rewrite functions'.
    return True
  # TF 2.21's own tf.compat.v1 rewrite switches this grappler option on.
  options = tf.config.optimizer.get_experimental_options()
  return bool(options.get("auto_mixed_precision", False))


def _check_graph_rewrite(policy):
  if _graph_rewrite_enabled():
    raise ValueError(
        f'The global dtype policy cannot be set to "{policy.name}", because '
        "the mixed precision graph rewrite has already been enabled.\n"
        "At most, one of the following can be called:\n\n"
        "  1. tf.train.experimental.enable_mixed_precision_graph_rewrite() "
        "(You called this first)\n"
        "  2. tf.keras.mixed_precision.experimental.set_policy() with a mixed "
        "precision policy (You called this second)\n\n"
        "You called both functions, which is an error, because both functions "
        "enable you to use mixed precision. If in doubt which function to use, "
        "use the second, as it supports Eager execution and is more "
        "customizable.")


def _checked_global(policy):
  """Converts and validates a `set_policy` argument; None means floatx."""
  if policy is not None and not isinstance(policy, Policy):
    if isinstance(policy, keras.DTypePolicy):
      policy = _as_our_policy(policy)
    else:
      policy = Policy(policy)
  if policy is not None and policy.compute_dtype != policy.variable_dtype:
    _check_graph_rewrite(policy)
  if (policy is not None and policy.compute_dtype is not None and
      not tf.as_dtype(policy.compute_dtype).is_floating):
    raise ValueError("set_policy can only be used to set the global policy to "
                     'floating-point policies, such as "float32" and '
                     f'"mixed_float16", but got policy: {policy.name}')
  return policy


@export("keras.mixed_precision.set_global_policy",
        "keras.mixed_precision.experimental.set_policy")
def set_policy(policy: Union[Policy, str, None]) -> None:
  """Sets the global dtype policy, the default of layers created afterwards.

  This sets Keras 3's global policy (`keras.config.set_dtype_policy`), so Keras
  3 layers and models created later use it. Only floating-point policies can be
  global.

  Args:
    policy: A `Policy` or `PolicyV1`, a Keras 3 `DTypePolicy` (converted), a
      policy name, or None to go back to `Policy(keras.config.floatx())`.

  Raises:
    TypeError: If `policy` is of another type.
    ValueError: If `policy` is not a valid name, is not a floating-point
      policy, or is a mixed policy while the mixed precision graph rewrite is
      enabled. The global policy is then left unchanged.

  Example:

  >>> set_global_policy("mixed_float16")
  >>> keras.layers.Dense(2).compute_dtype
  'float16'
  >>> set_global_policy(None)
  """
  policy = _checked_global(policy)
  keras.config.set_dtype_policy(
      policy if policy is not None else Policy(keras.config.floatx()))


set_global_policy = set_policy


@contextlib.contextmanager
def policy_scope(policy: Union[Policy, str]) -> Iterator[None]:
  """Context manager setting the global policy inside it.

  Args:
    policy: As for `set_global_policy`.

  Yields:
    Nothing.

  Raises:
    TypeError, ValueError: As `set_global_policy`, on entry.

  Example:

  >>> with policy_scope("mixed_float16"):
  ...   keras.layers.Dense(2).dtype_policy.name
  'mixed_float16'
  """
  previous = keras.config.dtype_policy()
  set_policy(policy)
  try:
    yield
  finally:
    keras.config.set_dtype_policy(previous)


# --------------------------------------------------------------------------
# get_layer_policy.


def _is_layer(obj):
  return keras_target.is_layer(obj)


@export("keras.mixed_precision.experimental.get_layer_policy")
def get_layer_policy(layer: Any) -> Policy:
  """Returns the dtype policy of a layer, as a `Policy`.

  Deprecated in TF 2.4 in favour of `layer.dtype_policy`; kept for TF 2.3 code.
  A Keras 3 layer built with a Keras 3 dtype policy gets that policy converted.

  Args:
    layer: A Keras layer.

  Returns:
    The layer's policy: the very object if it is one of ours, else an
    equivalent `Policy`.

  Raises:
    ValueError: If `layer` is not a layer (TF's exception type).

  Example:

  >>> get_layer_policy(keras.layers.Dense(2, dtype="mixed_bfloat16"))
  <Policy "mixed_bfloat16">
  """
  if not _is_layer(layer):
    raise ValueError(
        f"get_policy can only be called on a layer, but got: {layer}")
  return _as_our_policy(layer.dtype_policy)


# --------------------------------------------------------------------------
# (De)serialization.


_LEGACY_CLASSES = {"Policy": Policy, "PolicyV1": Policy}


def _equivalent_to_dtype(policy):
  return (type(policy) is Policy and  # pylint: disable=unidiomatic-typecheck
          (policy.name == "_infer" or _tf_dtype_name(policy.name) is not None))


def serialize(policy: Policy) -> Union[str, dict[str, Any], None]:
  """Serializes a policy as TF 2.4's layers did in their configs.

  Args:
    policy: A `Policy` or `PolicyV1`.

  Returns:
    The dtype name for a plain `Policy` named after a dtype (None for
    `"_infer"`), else `{"class_name": ..., "config": ...}`.

  Raises:
    ValueError: If `policy` is not one of our policies.

  Example:

  >>> serialize(Policy("float16"))
  'float16'
  >>> serialize(Policy("mixed_float16"))
  {'class_name': 'Policy', 'config': {'name': 'mixed_float16'}}
  """
  if not isinstance(policy, Policy):
    raise ValueError(f"policy must be a Policy, got: {policy!r}")
  if _equivalent_to_dtype(policy):
    return None if policy.name == "_infer" else policy.name
  return {"class_name": type(policy).__name__, "config": policy.get_config()}


_KERAS_POLICY_CLASSES = ("DTypePolicy", "FloatDTypePolicy")


def deserialize(config: dict[str, Any],
                custom_objects: Optional[dict[str, Any]] = None  # pylint: disable=redefined-outer-name
                ) -> Policy:
  """Restores a policy from a TF 2.3/2.4 (or Keras 3) layer config's `dtype`.

  As in TF 2.4, `Policy` and `PolicyV1` configs restore as `Policy`, and a
  loss scale in them is silently dropped.

  Args:
    config: None (`"_infer"`), a dtype or policy name, or a dict
      `{"class_name": "Policy" | "PolicyV1" | "DTypePolicy", "config": {...}}`.
    custom_objects: Optional dict of further policy classes by class name.

  Returns:
    A `Policy` (or an instance of a class from `custom_objects`).

  Raises:
    ValueError: If `config` cannot be interpreted.

  Example:

  >>> deserialize({"class_name": "PolicyV1", "config": {
  ...     "name": "mixed_float16", "loss_scale": None}})
  <Policy "mixed_float16">
  """
  if config is None:
    return Policy("_infer")
  if isinstance(config, str):
    return Policy(config)
  if isinstance(config, dict) and isinstance(config.get("config"), dict):
    classes = {name: Policy for name in _KERAS_POLICY_CLASSES}
    classes.update(_LEGACY_CLASSES)
    classes.update(custom_objects or {})
    class_name = config.get("class_name")
    if class_name in classes:
      return classes[class_name].from_config(config["config"])
    raise ValueError(f"Unknown dtype policy: {class_name}. Known policies: "
                     f"{sorted(classes)}.")
  raise ValueError(f"Could not interpret dtype policy config: {config!r}")
