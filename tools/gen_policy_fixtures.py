"""Records dtype-policy fixtures with the real TF 2.3.4 / 2.4.4.

Run once under each reference interpreter; each writes its own files under
tests/fixtures/policy/:

    .ref/tf23/bin/python tools/gen_policy_fixtures.py
    .ref/tf24/bin/python tools/gen_policy_fixtures.py

For TF 2.X (X = 3 or 4) it writes
  * models_tf2X.json: for a handful of tiny models (Sequential and functional,
    built under the global mixed_float16 policy, with an explicit experimental
    Policy carrying a loss scale, with a plain string dtype, in float32), the
    `model.to_json()` string and the compute / variable dtype the original
    recorded for every layer;
  * layers_tf2X.json: single layer configs (`layer.get_config()`) with the
    dtypes the original layer had, covering every policy form TF wrote
    (strings, `Policy`, `PolicyV1`, with and without a loss scale);
  * policies_tf2X.json: `repr`, `get_config()` and `loss_scale` of experimental
    and non-experimental policies, for the format tests;
  * model_tf2X.h5: a tiny mixed_float16 functional model saved with
    `model.save(..., save_format="h5")` (uncompiled, a few KB).
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "policy")
VERSION = "tf" + "".join(tf.__version__.split(".")[:2])
MP = tf.keras.mixed_precision
EXP = tf.keras.mixed_precision.experimental


def _set_global(name):
  if VERSION == "tf23":
    EXP.set_policy(name)
  else:
    MP.set_global_policy(name)


def _plain_policy(name):
  """The non-experimental Policy where it exists (TF 2.4), else TF 2.3's."""
  return MP.Policy(name) if VERSION != "tf23" else EXP.Policy(name)


def _policy_of(layer):
  # TF 2.3 had no public `Layer.dtype_policy`; its exported helper did this.
  if VERSION == "tf23":
    return EXP.get_layer_policy(layer)
  return layer.dtype_policy


def _layer_dtypes(layer):
  policy = _policy_of(layer)
  return {
      "name": layer.name,
      "class_name": type(layer).__name__,
      "compute_dtype": policy.compute_dtype,
      "variable_dtype": policy.variable_dtype,
      "policy_name": policy.name,
      "weights": {w.name: w.dtype.name for w in layer.weights},
  }


def _model_record(model, x):
  model(x)
  outputs = {}
  for layer in model.layers:
    if isinstance(layer, tf.keras.layers.InputLayer):
      continue
    submodel = tf.keras.Model(model.inputs, layer.output)
    outputs[layer.name] = submodel(x).dtype.name
  return {
      "json": model.to_json(),
      "layers": [_layer_dtypes(layer) for layer in model.layers],
      "output_dtypes": outputs,
  }


def _models():
  tf.keras.backend.clear_session()
  x = tf.ones((2, 4))
  models = {}

  _set_global("mixed_float16")
  seq = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(3, name="dense_a"),
      tf.keras.layers.BatchNormalization(name="bn"),
      tf.keras.layers.Activation("softmax", dtype="float32", name="probs"),
  ], name="sequential_mixed")
  models["sequential_mixed"] = _model_record(seq, x)

  inp = tf.keras.Input((4,), name="inp")
  h = tf.keras.layers.Dense(5, activation="relu", name="hidden")(inp)
  h = tf.keras.layers.Dense(2, name="logits")(h)
  out = tf.keras.layers.Activation("linear", dtype="float32", name="out")(h)
  func = tf.keras.Model(inp, out, name="functional_mixed")
  models["functional_mixed"] = _model_record(func, x)
  _set_global(None)

  inp = tf.keras.Input((4,), name="inp")
  h = tf.keras.layers.Dense(
      3, name="fixed_ls",
      dtype=EXP.Policy("mixed_float16", loss_scale=128))(inp)
  h = tf.keras.layers.Dense(
      3, name="dynamic_ls",
      dtype=EXP.Policy(
          "mixed_float16",
          loss_scale=tf.mixed_precision.experimental.DynamicLossScale(
              initial_loss_scale=64, increment_period=10, multiplier=4.)))(h)
  h = tf.keras.layers.Dense(
      3, name="no_ls", dtype=EXP.Policy("mixed_float16", loss_scale=None))(h)
  h = tf.keras.layers.Dense(
      3, name="default_ls", dtype=EXP.Policy("mixed_float16"))(h)
  h = tf.keras.layers.Dense(
      3, name="bf16_exp", dtype=EXP.Policy("mixed_bfloat16"))(h)
  out = tf.keras.layers.Dense(
      2, name="f32_ls", dtype=EXP.Policy("float32", loss_scale="dynamic"))(h)
  models["explicit_loss_scale"] = _model_record(
      tf.keras.Model(inp, out, name="explicit_loss_scale"), x)

  inp = tf.keras.Input((4,), name="inp", dtype="float64")
  h = tf.keras.layers.Dense(3, dtype="float64", name="f64")(inp)
  h = tf.keras.layers.Dense(3, dtype="float16", name="f16")(h)
  out = tf.keras.layers.Dense(2, dtype=_plain_policy("float32"), name="f32")(h)
  models["string_dtype"] = _model_record(
      tf.keras.Model(inp, out, name="string_dtype"), tf.ones((2, 4), "float64"))

  seq = tf.keras.Sequential([
      tf.keras.layers.Dense(3, input_shape=(4,), name="d1"),
      tf.keras.layers.Dense(1, name="d2"),
  ], name="float32_model")
  models["float32"] = _model_record(seq, x)
  return models


def _layers():
  forms = {
      "string_float32": "float32",
      "string_float64": "float64",
      "string_float16": "float16",
      "plain_mixed_float16": _plain_policy("mixed_float16"),
      "plain_mixed_bfloat16": _plain_policy("mixed_bfloat16"),
      "plain_float16": _plain_policy("float16"),
      "exp_mixed_float16": EXP.Policy("mixed_float16"),
      "exp_fixed_ls": EXP.Policy("mixed_float16", loss_scale=256),
      "exp_dynamic_ls": EXP.Policy("mixed_float16", loss_scale="dynamic"),
      "exp_none_ls": EXP.Policy("mixed_float16", loss_scale=None),
      "exp_float32_ls": EXP.Policy("float32", loss_scale=8),
  }
  records = {}
  for key, dtype in forms.items():
    layer = tf.keras.layers.Dense(2, dtype=dtype, name=key)
    layer.build((None, 3))
    records[key] = {
        "class_name": "Dense",
        "config": layer.get_config(),
        "compute_dtype": _policy_of(layer).compute_dtype,
        "variable_dtype": _policy_of(layer).variable_dtype,
    }
  return records


def _policies():
  records = {}
  cases = {
      "mixed_float16": ("mixed_float16", "auto"),
      "mixed_bfloat16": ("mixed_bfloat16", "auto"),
      "float32": ("float32", "auto"),
      "fixed": ("mixed_float16", 16),
      "dynamic": ("mixed_float16", "dynamic"),
      "none": ("mixed_float16", None),
  }
  for key, (name, loss_scale) in cases.items():
    p = (EXP.Policy(name) if loss_scale == "auto" else
         EXP.Policy(name, loss_scale=loss_scale))
    records["experimental_" + key] = {
        "repr": repr(p),
        "config": p.get_config(),
        "serialized": tf.keras.utils.serialize_keras_object(p),
        "loss_scale": None if p.loss_scale is None else {
            "class_name": type(p.loss_scale).__name__,
            "config": p.loss_scale.get_config()},
        "compute_dtype": p.compute_dtype,
        "variable_dtype": p.variable_dtype,
    }
  if VERSION != "tf23":
    for name in ("mixed_float16", "float64", "_infer", "int32"):
      p = MP.Policy(name)
      records["plain_" + name] = {
          "repr": repr(p),
          "config": p.get_config(),
          "compute_dtype": p.compute_dtype,
          "variable_dtype": p.variable_dtype,
      }
  return records


def _h5():
  tf.keras.backend.clear_session()
  _set_global("mixed_float16")
  inp = tf.keras.Input((3,), name="inp")
  h = tf.keras.layers.Dense(2, name="dense")(inp)
  out = tf.keras.layers.Activation("linear", dtype="float32", name="out")(h)
  model = tf.keras.Model(inp, out, name="h5_mixed")
  _set_global(None)
  path = os.path.join(OUT, f"model_{VERSION}.h5")
  model.save(path, save_format="h5", include_optimizer=False)
  return {layer.name: _layer_dtypes(layer) for layer in model.layers}


def main():
  os.makedirs(OUT, exist_ok=True)
  data = {
      "tf_version": tf.__version__,
      "models": _models(),
  }
  h5_layers = _h5()
  data["h5_layers"] = h5_layers
  with open(os.path.join(OUT, f"models_{VERSION}.json"), "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
  with open(os.path.join(OUT, f"layers_{VERSION}.json"), "w") as f:
    json.dump({"tf_version": tf.__version__, "layers": _layers()}, f,
              indent=1, sort_keys=True)
  with open(os.path.join(OUT, f"policies_{VERSION}.json"), "w") as f:
    json.dump({"tf_version": tf.__version__, "policies": _policies()}, f,
              indent=1, sort_keys=True)


if __name__ == "__main__":
  main()
