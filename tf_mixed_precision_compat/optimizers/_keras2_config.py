"""TF 2.3/2.4's optimizer names and configs, as Keras 3 spells them.

Hyperparameter and slot names by Keras 3 class (`SLOTS`: each slot's TF 2.x,
Keras 3 and tf_keras name), and Keras 2 optimizer configs converted to Keras 3
optimizers (shared with the legacy loaders).

Example:

>>> opt = keras2_optimizer_to_keras3(
...     {"class_name": "Adam", "config": {"lr": 0.5, "beta_1": 0.8}}, None)
>>> type(opt).__name__, float(opt.learning_rate), opt.beta_1
('Adam', 0.5, 0.8)
"""

import typing

import keras

# Hyperparameters (besides `learning_rate`) that TF 2.4's optimizers
# registered with `_set_hyper`, by Keras 3 class name. `decay` has no Keras 3
# counterpart.
HYPERPARAMETERS = {
    "SGD": ("momentum",),
    "Adam": ("beta_1", "beta_2"),
    "Adamax": ("beta_1", "beta_2"),
    "Nadam": ("beta_1", "beta_2"),
    "RMSprop": ("rho", "momentum"),
    "Adadelta": ("rho",),
    "Adagrad": (),
    "Ftrl": ("learning_rate_power", "l1_regularization_strength",
             "l2_regularization_strength", "beta"),
}

# Keras 2 optimizer class names (as TF 2.3/2.4 serialized them, lower-cased)
# and the Keras 3 classes they become.
KERAS2_OPTIMIZERS = {name.lower(): name for name in HYPERPARAMETERS}


class Slot(typing.NamedTuple):
  """One slot of a built-in optimizer, as each Keras names it."""
  tf2: str  # TF 2.x's name: in its checkpoints and `get_slot(var, "m")`.
  keras3: str
  tf_keras: str  # tf_keras's current class's, `<name>/<variable name>`.
  optional: bool = False  # Made only with some arguments.


# The slots of each built-in optimizer, by Keras 3 class name.
SLOTS = {
    "SGD": (Slot("momentum", "momentum", "m", optional=True),),
    "Adam": (Slot("m", "momentum", "m"), Slot("v", "velocity", "v"),
             Slot("vhat", "velocity_hat", "vhat", optional=True)),
    "AdamW": (Slot("m", "momentum", "m"), Slot("v", "velocity", "v"),
              Slot("vhat", "velocity_hat", "vhat", optional=True)),
    "Adamax": (Slot("m", "momentum", "m"), Slot("v", "norm", "u")),
    "Nadam": (Slot("m", "momentum", "m"), Slot("v", "velocity", "v")),
    "RMSprop": (Slot("rms", "velocity", "velocity"),
                Slot("momentum", "momentum", "momentum", optional=True),
                Slot("mg", "average_gradient", "average_gradient",
                     optional=True)),
    "Adagrad": (Slot("accumulator", "accumulator", "accumulator"),),
    "Adadelta": (Slot("accum_grad", "accumulated_grad", "accumulated_grad"),
                 Slot("accum_var", "accumulated_delta_var",
                      "accumulated_delta_var")),
    "Ftrl": (Slot("accumulator", "accumulator", "accumulator"),
             Slot("linear", "linear", "linear")),
}
# TF 2.x slot name -> Keras 3's, and -> tf_keras's, by Keras 3 class name.
TF2_SLOT_NAMES = {k: {s.tf2: s.keras3 for s in v} for k, v in SLOTS.items()}
TF_KERAS_SLOT_NAMES = {k: {s.tf2: s.tf_keras for s in v}
                       for k, v in SLOTS.items()}


def keras_class_name(optimizer):
  """Name of the built-in Keras 3 class `optimizer` is or derives from."""
  for klass in type(optimizer).__mro__:
    if getattr(keras.optimizers, klass.__name__, None) is klass:
      return klass.__name__
  return type(optimizer).__name__


def hyperparameter_names(optimizer):
  """`learning_rate` and the hyperparameters TF 2.4's counterpart had."""
  return frozenset({"learning_rate"}) | frozenset(
      HYPERPARAMETERS.get(keras_class_name(optimizer), ()))


# Each Keras 2 optimizer's constructor arguments in TF 2.4, by Keras 3 class
# name, and the keyword arguments every TF 2.4 optimizer also took; a config
# key outside both made TF 2.4 raise a TypeError.
KERAS2_ARGUMENTS = {
    "SGD": ("learning_rate", "momentum", "nesterov", "name"),
    "Adam": ("learning_rate", "beta_1", "beta_2", "epsilon", "amsgrad",
             "name"),
    "Adamax": ("learning_rate", "beta_1", "beta_2", "epsilon", "name"),
    "Nadam": ("learning_rate", "beta_1", "beta_2", "epsilon", "name"),
    "RMSprop": ("learning_rate", "rho", "momentum", "epsilon", "centered",
                "name"),
    "Adadelta": ("learning_rate", "rho", "epsilon", "name"),
    "Adagrad": ("learning_rate", "initial_accumulator_value", "epsilon",
                "name"),
    "Ftrl": ("learning_rate", "learning_rate_power",
             "initial_accumulator_value", "l1_regularization_strength",
             "l2_regularization_strength", "name",
             "l2_shrinkage_regularization_strength", "beta"),
}
KERAS2_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm", "lr", "decay")


def deserialize_schedule(config, custom_objects=None):
  """A learning-rate schedule from its Keras 2 or Keras 3 serialized form.

  Any other class a config names (a registered loss scale) raises a
  ValueError, as TF 2.4 looked schedules up among schedules only.
  """
  name = config.get("class_name") if isinstance(config, dict) else None
  schedules = keras.optimizers.schedules
  if isinstance(config, dict) and "module" in config:
    # Keras 3's own form: its loader resolves (and checks) the module.
    value = keras.saving.deserialize_keras_object(
        config, custom_objects=custom_objects)
  else:
    cls = ((custom_objects or {}).get(name) or
           getattr(schedules, str(name), None) or
           keras.saving.get_custom_objects().get(name))
    value = None
    if isinstance(cls, type) and issubclass(cls,
                                            schedules.LearningRateSchedule):
      options = dict(config.get("config") or {})
      if "name" in options and options["name"] is None:
        # TF 2.x schedules defaulted to `name=None`, which Keras 3's take as
        # their name scope and fail on at the first step: use their default.
        del options["name"]
      value = cls.from_config(options)
  if not isinstance(value, schedules.LearningRateSchedule):
    raise ValueError(
        f"Unknown decay: {name}. A TF 2.x optimizer config's learning_rate "
        "is a number or a LearningRateSchedule config" +
        (" (a loss scale belongs in a LossScaleOptimizer's loss_scale)."
         if name in ("FixedLossScale", "DynamicLossScale") else "."))
  return value


def _check_keys(class_name, keras3_name, options):
  allowed = set(KERAS2_ARGUMENTS.get(keras3_name, ())) | set(KERAS2_KWARGS)
  for key in options:
    if key not in allowed:
      # TF 2.4's message, and its type.
      raise TypeError(f"Unexpected keyword argument passed to optimizer: "
                      f"{key} (in a TF 2.x {class_name} config; allowed: "
                      f"{sorted(allowed)}).")


def _check_decay(decay):
  if not isinstance(decay, (int, float)):
    raise TypeError(f"decay must be a number >= 0, got {decay!r}.")
  if decay < 0:
    raise ValueError(f"Expected decay >= 0, received: {decay}")


def _check_learning_rate(class_name, learning_rate):
  """TF 2.4 failed on the first step for these; here they fail on loading."""
  if not (learning_rate is None or isinstance(learning_rate,
                                              (str, list, tuple))):
    return  # Numbers (negative ones too: TF 2.4 trained with them), or a
    # schedule or callable a Python-built config holds.
  error = TypeError if learning_rate is None else ValueError
  raise error(f"The TF 2.x {class_name} config's learning_rate must be a "
              "number or a LearningRateSchedule config, got "
              f"{learning_rate!r}.")


def _keras2_options(class_name, options, keras3_name=None,
                    custom_objects=None):
  """Keras 2 `options` as Keras 3 constructor arguments, checked as TF 2.4."""
  _check_keys(class_name, keras3_name, options)
  if "lr" in options:
    options.setdefault("learning_rate", options.pop("lr"))
  learning_rate = options.get("learning_rate", 0.001)
  if isinstance(learning_rate, dict):
    learning_rate = deserialize_schedule(learning_rate, custom_objects)
    options["learning_rate"] = learning_rate
  else:
    _check_learning_rate(class_name, learning_rate)
  decay = options.pop("decay", 0.0)
  _check_decay(decay)
  if decay:
    if not isinstance(learning_rate, (int, float)):
      raise ValueError(
          f"Cannot convert the Keras 2 {class_name} config: it combines "
          f"decay={decay} with a learning-rate schedule, which Keras 3 "
          "optimizers cannot honour. Fold the decay into the schedule.")
    # Keras 2 used lr / (1 + decay * iterations): an inverse time decay.
    options["learning_rate"] = keras.optimizers.schedules.InverseTimeDecay(
        float(learning_rate), decay_steps=1, decay_rate=float(decay))
  return options


def keras2_optimizer_to_keras3(config, custom_objects):
  """The Keras 3 optimizer for a TF 2.3/2.4 Keras 2 optimizer config.

  Raises the TypeError or ValueError TF 2.4 raised, or a ValueError for
  options Keras 3 cannot honour.
  """
  class_name = config["class_name"]
  options = dict(config.get("config") or {})
  if custom_objects and class_name in custom_objects:
    return custom_objects[class_name].from_config(options)
  keras3_name = KERAS2_OPTIMIZERS.get(class_name.lower())
  if keras3_name is None:
    raise ValueError(
        f"Unknown optimizer in a TF 2.3/2.4 config: {class_name!r}. Known: "
        f"{sorted(KERAS2_OPTIMIZERS.values())}, or pass the class in "
        "custom_objects.")
  options = _keras2_options(class_name, options, keras3_name, custom_objects)
  cls = getattr(keras.optimizers, keras3_name)
  try:
    return cls.from_config(options)
  except (TypeError, ValueError) as e:
    raise type(e)(
        f"Keras 3's {keras3_name} cannot honour the TF 2.3/2.4 {class_name} "
        f"config {config.get('config')!r}: {e}") from e


def deserialize_serialized_optimizer(config, custom_objects=None):
  """A Keras 3 optimizer from its name, or its Keras 3 or Keras 2 config."""
  if isinstance(config, str):
    return keras.optimizers.get(config)
  if not isinstance(config, dict) or "class_name" not in config:
    raise ValueError("inner_optimizer must be an optimizer or a serialized "
                     f"optimizer dict, got {config!r}.")
  if "module" in config or "registered_name" in config:
    return keras.optimizers.deserialize(
        dict(config), custom_objects=custom_objects)
  return keras2_optimizer_to_keras3(config, custom_objects)
