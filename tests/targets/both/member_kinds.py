"""What each public member of the re-created classes returns, and when it reads.

For every public property and method (and the private members real jobs
use) of the classes this package re-creates, one probe: build the object,
take one finite step, read the member, change the state (a finite step, an
overflowing one, a new learning rate), then read the value kept from before
and the member afresh. The value's kind (a variable, a tensor, a
`LossScale`, an optimizer, a Python value, ...) and whether the kept value
follows the state (`live`), keeps what it was (`snapshot`) or was not
touched by the change (`unchanged`) are its row.

`read_around_overflow` is the loss scale's own record: `ls =
opt.loss_scale`, one overflowing step, then `ls` used as TF 2.4 code uses it
(a tensor) and as TF 2.3 code does (`ls()`), eagerly, in a `tf.function`,
in a `tf.compat.v1` session and on 2 replicas.

Shared by tools/gen_member_kinds.py, which records both under real TF 2.3.4
and 2.4.4 (tests/fixtures/member_kinds/), and by test_member_kinds.py, which
runs them on this package after `install()`; kept Python 3.8 compatible and
free of the package, so both run the same code.
"""

import numpy as np
import tensorflow as tf

INF = float("inf")
FINITE = [0.5, -1.0]
OVERFLOW = [INF, 1.0]


def _tf24():
  return hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")


def _sgd():
  return tf.keras.optimizers.SGD(0.1, momentum=0.9)


def _experimental(inner, loss_scale):
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      inner, loss_scale)


def _v1_optimizer(inner, loss_scale):
  return tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
      inner, loss_scale)


# name -> (releases that have it, builder of (object, inner optimizer)).
OPTIMIZERS = {
    "lso": (("24",), lambda: (lambda inner: (
        tf.keras.mixed_precision.LossScaleOptimizer(inner), inner))(_sgd())),
    "lso_fixed": (("24",), lambda: (lambda inner: (
        tf.keras.mixed_precision.LossScaleOptimizer(
            inner, dynamic=False, initial_scale=128), inner))(_sgd())),
    "lso_v1": (("23", "24"), lambda: (lambda inner: (
        _experimental(inner, "dynamic"), inner))(_sgd())),
    "lso_v1_fixed": (("23", "24"), lambda: (lambda inner: (
        _experimental(inner, 128), inner))(_sgd())),
    "v1_optimizer": (("23", "24"), lambda: (lambda inner: (
        _v1_optimizer(inner, "dynamic"), inner))(
            tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))),
}


def _attribute(name):
  return lambda obj, *unused: getattr(obj, name)


_KERAS_MEMBERS = {name: _attribute(name) for name in (
    "loss_scale", "dynamic", "initial_scale", "dynamic_growth_steps",
    "dynamic_counter", "inner_optimizer", "_optimizer", "iterations",
    "learning_rate", "lr", "momentum", "clipnorm", "clipvalue",
    "global_clipnorm", "weights")}
_KERAS_MEMBERS.update({
    "get_weights()": lambda o, v: o.get_weights(),
    "variables()": lambda o, v: o.variables(),
    "get_slot(var, 'momentum')": lambda o, v: o.get_slot(v, "momentum"),
    "get_slot_names()": lambda o, v: o.get_slot_names(),
    "get_config()": lambda o, v: o.get_config(),
    # TF 2.x OptimizerV2 private methods real jobs call on the wrapper.
    "_create_all_weights(var_list)": (
        lambda o, v: o._create_all_weights([v])),  # pylint: disable=protected-access
    "_create_slots(var_list)": (
        lambda o, v: o._create_slots([v])),  # pylint: disable=protected-access
    "_decayed_lr(tf.float32)": (
        lambda o, v: o._decayed_lr(tf.float32)),  # pylint: disable=protected-access
    "_get_hyper('learning_rate')": (
        lambda o, v: o._get_hyper("learning_rate")),  # pylint: disable=protected-access
    "_set_hyper('learning_rate', 0.5)": (
        lambda o, v: o._set_hyper("learning_rate", 0.5)),  # pylint: disable=protected-access
    "_create_hypers()": lambda o, v: o._create_hypers(),  # pylint: disable=protected-access
})
_V1_OPTIMIZER_MEMBERS = {
    "_loss_scale": _attribute("_loss_scale"),
    "_optimizer": _attribute("_optimizer"),
    "get_slot(var, 'momentum')": lambda o, v: o.get_slot(v, "momentum"),
    "get_slot_names()": lambda o, v: o.get_slot_names(),
    "variables()": lambda o, v: o.variables(),
    "get_name()": lambda o, v: o.get_name(),
}
# name -> (releases that have it, builder).
LOSS_SCALES = {
    "dynamic_loss_scale": (("23", "24"), lambda: (
        tf.mixed_precision.experimental.DynamicLossScale(
            initial_loss_scale=8, increment_period=2))),
    "fixed_loss_scale": (("23", "24"), lambda: (
        tf.mixed_precision.experimental.FixedLossScale(16))),
}
_LOSS_SCALE_MEMBERS = {name: _attribute(name) for name in (
    "initial_loss_scale", "increment_period", "multiplier",
    "_current_loss_scale", "_num_good_steps")}
_LOSS_SCALE_MEMBERS.update({"__call__()": lambda s: s(),
                            "get_config()": lambda s: s.get_config()})
POLICIES = {
    "policy": (("24",), lambda: tf.keras.mixed_precision.Policy(
        "mixed_float16")),
    "policy_v1": (("23", "24"), lambda: (
        tf.keras.mixed_precision.experimental.Policy("mixed_float16"))),
}
_POLICY_MEMBERS = {name: _attribute(name) for name in (
    "name", "compute_dtype", "variable_dtype", "loss_scale",
    "should_cast_variables")}
_POLICY_MEMBERS["get_config()"] = lambda p: p.get_config()


def cases():
  """Every (case, member) this module probes, with the releases having it."""
  out = []
  for name, (releases, _) in OPTIMIZERS.items():
    members = (_V1_OPTIMIZER_MEMBERS if name == "v1_optimizer" else
               _KERAS_MEMBERS)
    out += [(name, m, releases) for m in members]
  for table, members in ((LOSS_SCALES, _LOSS_SCALE_MEMBERS),
                         (POLICIES, _POLICY_MEMBERS)):
    out += [(name, m, table[name][0]) for name in table for m in members]
  return out


def _is_loss_scale(x):
  return isinstance(x, tf.mixed_precision.experimental.LossScale)


def _is_variable(x):
  return hasattr(x, "assign") and hasattr(x, "numpy")


def kind(x):
  """The kind of a member's value, by what code can do with it."""
  if isinstance(x, (list, tuple)):
    kinds = sorted(set(kind(e) for e in x))
    return "list of " + "/".join(kinds) if kinds else "empty list"
  if _is_variable(x):
    return "variable"
  if tf.is_tensor(x):
    return "tensor"
  if _is_loss_scale(x):
    return "LossScale"
  if isinstance(x, np.ndarray) or isinstance(x, np.generic):
    return "array"
  if isinstance(x, dict):
    return "dict"
  if x is None or isinstance(x, (bool, int, float, str)):
    return "Python " + type(x).__name__
  if isinstance(x, tf.dtypes.DType):
    return "Python str"  # TF 2.3's policies answered some dtypes as DTypes.
  if hasattr(x, "apply_gradients"):
    return "optimizer"
  return "object"


def read(x, as_kind):
  """What code of `as_kind`'s release reads from `x`, as JSON data."""
  if as_kind.startswith("list of"):
    return [read(e, kind(e) if not tf.is_tensor(e) else "tensor") for e in x]
  if as_kind in ("variable", "tensor"):
    return np.asarray(tf.convert_to_tensor(x)).tolist()
  if as_kind == "array":
    return np.asarray(x).tolist()
  if as_kind == "LossScale":
    return float(x())
  if as_kind.startswith("Python"):
    return x if not isinstance(x, tf.dtypes.DType) else x.name
  return None  # Objects and dicts: their kind is the row; no value read.


def follows(before, kept, fresh):
  """`live`, `snapshot`, `unchanged` or `other`, from three reads."""
  if before == fresh:
    return "unchanged" if kept == before else "other"
  if kept == fresh:
    return "live"
  return "snapshot" if kept == before else "other"


def _error(e):
  return "raises " + type(e).__name__


def _apply(opt, var, grads):
  opt.apply_gradients([(tf.constant(grads), var)])


def _change_optimizer(opt, inner, var):
  _apply(opt, var, FINITE)
  _apply(opt, var, OVERFLOW)
  if hasattr(inner, "learning_rate") and _is_variable(inner.learning_rate):
    inner.learning_rate.assign(0.05)


def _change_loss_scale(loss_scale):
  loss_scale.update([tf.constant(1.0)])
  loss_scale.update([tf.constant(INF)])


def serves(x, as_kind):
  """Whether `x` serves code written for a value of kind `as_kind`."""
  if as_kind == "LossScale":
    return _is_loss_scale(x)
  if as_kind == "tensor":
    return tf.is_tensor(x) and not _is_variable(x)
  return kind(x) == as_kind


def _probe(get, change, as_kind=None):
  """One row: the member's kind and how a kept value relates to the state.

  With `as_kind` (a recorded release's kind), the value is read as code of
  that release reads it and its kind is `as_kind` where it serves that code
  (one object may serve two releases: TF 2.3's `LossScale` and TF 2.4's
  tensor); by default, as its own kind.
  """
  try:
    value = get()
  except Exception as e:  # pylint: disable=broad-except
    change()
    return {"kind": _error(e)}
  own = as_kind if as_kind and serves(value, as_kind) else kind(value)
  row = {"kind": own}
  try:
    before = read(value, own)
  except Exception as e:  # pylint: disable=broad-except
    change()
    row["read"] = _error(e)
    return row
  change()
  kept, fresh = read(value, own), read(get(), own)
  if before is not None:
    row.update(follows=follows(before, kept, fresh), before=before,
               after=fresh)
  if own in ("optimizer", "LossScale", "object", "dict"):
    row["same_object"] = get() is value
  return row


def probe(case, member, as_kind=None):
  """The row of `member` of a fresh `case` object (see `_probe`)."""
  if case in OPTIMIZERS:
    obj, inner = OPTIMIZERS[case][1]()
    var = tf.Variable([1.0, 2.0])
    _apply(obj, var, FINITE)
    members = (_V1_OPTIMIZER_MEMBERS if case == "v1_optimizer" else
               _KERAS_MEMBERS)
    return _probe(lambda: members[member](obj, var),
                  lambda: _change_optimizer(obj, inner, var), as_kind)
  if case in LOSS_SCALES:
    obj = LOSS_SCALES[case][1]()
    return _probe(lambda: _LOSS_SCALE_MEMBERS[member](obj),
                  lambda: _change_loss_scale(obj), as_kind)
  obj = POLICIES[case][1]()
  return _probe(lambda: _POLICY_MEMBERS[member](obj), lambda: None, as_kind)


def _uses(ls, errors):
  """`ls` used as TF 2.4 code does (a tensor) and as TF 2.3 code does.

  The tensors each use gives; a use that raises is in `errors` instead.
  """
  out = {}
  for use, fn in (("tensor", lambda: tf.convert_to_tensor(ls)),
                  ("call", lambda: ls())):
    try:
      out[use] = tf.identity(fn())
    except Exception as e:  # pylint: disable=broad-except
      errors[use] = _error(e)
  return out


MODES = ("eager", "function", "session", "mirrored")
LOSS_SCALE_OPTIMIZERS = ("lso", "lso_v1")


def read_around_overflow(case, mode):
  """`ls = opt.loss_scale`, an overflowing step, then `ls` used both ways.

  Returns `{"tensor": .., "call": ..}`: the scale each use gives after the
  step (a float, or the error it raised), and `"after"`, the scale then.
  """
  if mode == "session":
    return _around_overflow_in_session(case)
  strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
              if mode == "mirrored" else tf.distribute.get_strategy())
  with strategy.scope():
    opt, _ = OPTIMIZERS[case][1]()
    var = tf.Variable([1.0, 2.0])
  errors = {}

  def step():
    ls = opt.loss_scale
    _apply(opt, var, OVERFLOW)
    return _uses(ls, errors)

  if mode == "eager":
    got = step()
  elif mode == "function":
    got = tf.function(step)()
  else:
    got = {k: strategy.experimental_local_results(v)[0] for k, v in
           tf.function(lambda: strategy.run(step))().items()}
  out = {k: float(np.asarray(v)) for k, v in got.items()}
  out.update(errors)
  scale = opt.loss_scale
  out["after"] = float(scale if tf.is_tensor(scale) else scale())
  return out


def _around_overflow_in_session(case):
  with tf.Graph().as_default():
    var = tf.compat.v1.Variable([1.0, 2.0], use_resource=True)
    opt, _ = OPTIMIZERS[case][1]()
    ls = opt.loss_scale
    train = opt.apply_gradients([(tf.constant(OVERFLOW), var)])
    errors = {}
    uses = _uses(ls, errors)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(train)
      errors.update({k: float(sess.run(v)) for k, v in uses.items()})
      return errors


def private_method_effects(case):
  """What TF 2.x's slot-creating private methods leave on a fresh wrapper.

  Returns, per method, the number of slots among `weights` after calling it
  on a fresh wrapper (no step taken; `iterations` left out, which TF 2.x
  made lazily and Keras 3 makes at once) and what `get_slot(var,
  "momentum")` then finds (or the error either raised).
  """
  out = {}
  for method in ("_create_all_weights", "_create_slots"):
    opt, _ = OPTIMIZERS[case][1]()
    var = tf.Variable([1.0, 2.0])
    try:
      getattr(opt, method)([var])
    except Exception as e:  # pylint: disable=broad-except
      out[method] = _error(e)
      continue
    try:
      slot = read(opt.get_slot(var, "momentum"), "variable")
    except Exception as e:  # pylint: disable=broad-except
      slot = _error(e)
    slots = [w for w in opt.weights
             if not (w.dtype == tf.int64 and w.shape.rank == 0)]
    out[method] = {"slots": len(slots), "slot": slot}
  return out
