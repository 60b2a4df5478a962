"""TF 2.3/2.4 Keras dtype policies, usable by Keras 3 layers.

`Policy`, `PolicyV1` (with a loss scale), the global policy (Keras 3's own)
and a layer config's policy `serialize`/`deserialize`, as TF 2.4 had them.

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

  It sets a layer's `compute_dtype` and `variable_dtype`; a `keras.DTypePolicy`,
  so Keras 3 layers take it as `dtype`. Names: any dtype name (both dtypes
  that one); `"mixed_float16"` / `"mixed_bfloat16"` (variables float32); or
  `"_infer"` (both None: Keras 3 layers then use `floatx()`).

  Args:
    name: The policy name.

  Raises:
    TypeError: If `name` is a `tf.DType` or not a string.
    ValueError: If `name` is neither a dtype name nor a mixed policy name.

  Example:

  >>> policy = Policy("mixed_float16")
  >>> layer = keras.layers.Dense(2, dtype=policy)
  >>> layer(tf.ones((1, 3))).dtype
  tf.float16
  >>> layer.kernel.dtype
  'float32'
  """

  def __init__(self, name: str) -> None:
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
    try:
      dtype = tf.as_dtype(name).name
    except TypeError:
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
    """Creates a policy from `get_config()` output; drops a `loss_scale`."""
    del custom_objects
    return cls(**{k: v for k, v in config.items() if k != "loss_scale"})


@export("keras.mixed_precision.experimental.Policy")
@_register
class PolicyV1(Policy):
  """TF 2.3's `tf.keras.mixed_precision.experimental.Policy`, with a loss scale.

  As `Policy`, plus the `loss_scale` `Model.compile` wraps the optimizer with
  (after `install()`); layers ignore it. `deserialize` reloads its configs as
  a `Policy`, as TF 2.4 did.

  Args:
    name: The policy name, as for `Policy`.
    loss_scale: A `LossScale`, an int or float, `"dynamic"`, a serialized
      loss scale, None, or `"auto"`: `"dynamic"` for `"mixed_float16"`, else
      None.

  Raises:
    TypeError: If `name` is not a string.
    ValueError: If `name` or `loss_scale` cannot be interpreted.

  Example:

  >>> policy = PolicyV1("mixed_float16", loss_scale=1024)
  >>> policy.loss_scale
  FixedLossScale(1024.0)
  >>> PolicyV1("float32").loss_scale is None
  True
  """

  def __init__(self, name: str, loss_scale: Any = "auto") -> None:
    super().__init__(name)
    self._using_default_loss_scale, self._loss_scale = v1_loss_scale(
        name, self.compute_dtype, loss_scale)

  @property
  def loss_scale(self) -> Optional[loss_scale_module.LossScale]:
    """The `LossScale` `Model.compile` uses, or None."""
    return self._loss_scale

  @property
  def should_cast_variables(self) -> bool:
    """Whether layers cast variables: variable and compute dtypes differ.

    TF 2.3's experimental class had it (TF 2.4's dropped it).
    """
    return self.variable_dtype != self.compute_dtype

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
    """Creates the policy; `custom_objects` may name loss scale classes."""
    return cls(**v1_config_arguments(config, custom_objects))


def v1_loss_scale(name: str, compute_dtype: Optional[str],
                  loss_scale: Any) -> tuple[bool, Any]:
  """`(whether it was "auto", LossScale or None)` for either PolicyV1."""
  using_default = isinstance(loss_scale, str) and loss_scale == "auto"
  if using_default:
    loss_scale = "dynamic" if name == "mixed_float16" else None
  # Validated before the warning so that a bad loss scale logs nothing.
  resolved = loss_scale_module.get(loss_scale)
  if resolved is not None and compute_dtype not in (None, "float16"):
    tf.get_logger().warning(
        "Creating a Policy with a loss scale is only useful for float16 "
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


_cache = threading.local()


def _as_our_policy(keras_policy):
  """Returns `keras_policy` (any Keras 3 dtype policy) as one of ours."""
  if isinstance(keras_policy, Policy):
    return keras_policy
  name = getattr(keras_policy, "name", None)
  compute = keras_policy.compute_dtype
  variable = keras_policy.variable_dtype
  try:
    candidate = Policy(name) if isinstance(name, str) else None
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


@export("keras.mixed_precision.global_policy",
        "keras.mixed_precision.experimental.global_policy")
def global_policy() -> Policy:
  """Returns the global dtype policy, the default of layers created now.

  It is Keras 3's (`keras.config.dtype_policy()`), converted to a `Policy` if
  set through Keras; `Policy(keras.config.floatx())` if none was set.

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


def _check_graph_rewrite(policy):
  # The graph rewrite functions' flag (TF 2.21's own tf.compat.v1 function
  # sets it too). Not Grappler's option alone: jobs set it with a mixed
  # policy, which TF 2.3/2.4 allowed.
  if _private_api.graph_rewrite_enabled():
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
  if policy is None:
    return None
  policy = (_as_our_policy(policy) if isinstance(policy, keras.DTypePolicy)
            else Policy(policy))
  if policy.compute_dtype != policy.variable_dtype:
    _check_graph_rewrite(policy)
  if (policy.compute_dtype is not None and
      not tf.as_dtype(policy.compute_dtype).is_floating):
    raise ValueError("set_policy can only be used to set the global policy to "
                     'floating-point policies, such as "float32" and '
                     f'"mixed_float16", but got policy: {policy.name}')
  return policy


@export("keras.mixed_precision.set_global_policy",
        "keras.mixed_precision.experimental.set_policy")
def set_policy(policy: Union[Policy, str, None]) -> None:
  """Sets Keras 3's global dtype policy, the default of layers created later.

  Args:
    policy: A `Policy` or `PolicyV1`, a Keras 3 `DTypePolicy` (converted), a
      policy name, or None for `Policy(keras.config.floatx())`.

  Raises:
    TypeError: If `policy` is of another type.
    ValueError: If `policy` is no valid name, not floating-point, or mixed
      while the mixed precision graph rewrite is on (nothing changes then).

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
    policy: As for `set_global_policy` (which raises the same errors).

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


@export("keras.mixed_precision.experimental.get_layer_policy")
def get_layer_policy(layer: Any) -> Policy:
  """Returns a layer's dtype policy, as a `Policy` (TF 2.3; TF 2.4 deprecated).

  Args:
    layer: A Keras layer.

  Returns:
    The layer's policy if it is one of ours, else an equivalent `Policy`.

  Raises:
    ValueError: If `layer` is not a layer (TF's exception type).

  Example:

  >>> get_layer_policy(keras.layers.Dense(2, dtype="mixed_bfloat16"))
  <Policy "mixed_bfloat16">
  """
  if not keras_target.is_layer(layer):
    raise ValueError(
        f"get_policy can only be called on a layer, but got: {layer}")
  return _as_our_policy(layer.dtype_policy)


def serialize(policy: Policy) -> Union[str, dict[str, Any], None]:
  """Serializes a policy as TF 2.4's layers did in their configs.

  Returns:
    A plain `Policy`'s dtype name (None for `"_infer"`), else
    `{"class_name": ..., "config": ...}`; ValueError for other objects.

  Example:

  >>> serialize(Policy("float16"))
  'float16'
  >>> serialize(Policy("mixed_float16"))
  {'class_name': 'Policy', 'config': {'name': 'mixed_float16'}}
  """
  if not isinstance(policy, Policy):
    raise ValueError(f"policy must be a Policy, got: {policy!r}")
  # A plain Policy of a dtype name (or "_infer"): TF 2.4 wrote the name alone.
  if type(policy) is Policy and policy.name not in _MIXED:  # pylint: disable=unidiomatic-typecheck
    return None if policy.name == "_infer" else policy.name
  return {"class_name": type(policy).__name__, "config": policy.get_config()}


# Class names a TF 2.3/2.4 or Keras 3 layer config's policy may have.
_CLASSES = {"Policy": Policy, "PolicyV1": Policy, "DTypePolicy": Policy,
            "FloatDTypePolicy": Policy}


def deserialize(config: dict[str, Any],
                custom_objects: Optional[dict[str, Any]] = None  # pylint: disable=redefined-outer-name
                ) -> Policy:
  """Restores a policy from a TF 2.3/2.4 (or Keras 3) layer config's `dtype`.

  As in TF 2.4, `PolicyV1` configs restore as `Policy` (loss scale dropped).

  Args:
    config: None (`"_infer"`), a dtype or policy name, or a dict
      `{"class_name": "Policy" | "PolicyV1" | "DTypePolicy", "config": {...}}`.
    custom_objects: Optional dict of further policy classes by class name.

  Returns:
    A `Policy` (or of a `custom_objects` class); ValueError for other configs.

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
    classes = {**_CLASSES, **(custom_objects or {})}
    class_name = config.get("class_name")
    if class_name in classes:
      return classes[class_name].from_config(config["config"])
    raise ValueError(f"Unknown dtype policy: {class_name}. Known policies: "
                     f"{sorted(classes)}.")
  raise ValueError(f"Could not interpret dtype policy config: {config!r}")
