"""TF 2.x's checkpoint names of built-in layers' weights reach Keras 3's.

Keras 2's own layer code (tf_keras) writes each layer's checkpoint in a
fresh process, as TF 2.x Keras did; the restore matcher must follow every
key to the Keras 3 layer's variable of the same shape (renamed ones through
`_match.RENAMED_WEIGHTS`, MultiHeadAttention through its private
sub-layers).
"""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat.legacy import _match

# Class, constructor arguments, build input shape (None: called on a query).
CASES = [
    ("Dense", (3,), (None, 4)), ("Conv1D", (2, 3), (None, 8, 2)),
    ("Conv2D", (2, 3), (None, 8, 8, 2)),
    ("Conv3D", (2, 3), (None, 6, 6, 6, 2)),
    ("Conv1DTranspose", (2, 3), (None, 8, 2)),
    ("Conv2DTranspose", (2, 3), (None, 8, 8, 2)),
    ("Conv3DTranspose", (2, 3), (None, 6, 6, 6, 2)),
    ("DepthwiseConv1D", (3,), (None, 8, 2)),
    ("DepthwiseConv2D", (3,), (None, 8, 8, 2)),
    ("SeparableConv1D", (2, 3), (None, 8, 2)),
    ("SeparableConv2D", (2, 3), (None, 8, 8, 2)),
    ("BatchNormalization", (), (None, 4)),
    ("LayerNormalization", (), (None, 4)), ("Embedding", (10, 3), (None, 5)),
    ("PReLU", (), (None, 4)), ("LSTM", (3,), (None, 5, 4)),
    ("GRU", (3,), (None, 5, 4)), ("SimpleRNN", (3,), (None, 5, 4)),
    ("ConvLSTM2D", (2, 3), (None, 3, 6, 6, 2)),
    ("MultiHeadAttention", (2, 4), None),
]
_KERAS2 = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    import tf_keras
    out, cases = sys.argv[1], json.loads(sys.argv[2])
    written = {}
    for name, args, shape in cases:
      layer = getattr(tf_keras.layers, name)(*args)
      if shape is None:
        query = np.zeros((1, 3, 4), "float32")
        layer(query, query)
      else:
        layer.build(tuple(shape))  # (JSON made it a list.)
      written[name] = tf.train.Checkpoint(layer=layer).save(
          os.path.join(out, name, "ckpt"))
    print(json.dumps(written))
    """)


@pytest.fixture(scope="module")
def keras2_checkpoints(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("keras2"))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_USE_LEGACY_KERAS", None)
  result = subprocess.run(
      [sys.executable, "-c", _KERAS2, out, json.dumps(CASES)],
      capture_output=True, text=True, env=env, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def _keras3_layer(name, args, shape):
  layer = getattr(keras.layers, name)(*args)
  if shape is None:
    query = np.zeros((1, 3, 4), "float32")
    layer(query, query)
  else:
    layer.build(shape)
  return layer


@pytest.mark.parametrize("name, args, shape", CASES,
                         ids=[c[0] for c in CASES])
def test_every_keras2_weight_key_reaches_keras3s_variable(
    keras2_checkpoints, name, args, shape):
  layer = _keras3_layer(name, args, shape)
  shapes = tf.train.load_checkpoint(
      keras2_checkpoints[name]).get_variable_to_shape_map()
  keys = [k for k in shapes if k.startswith("layer/")]
  assert keys
  reached = []
  for key in keys:
    path = key[len("layer/"):-len("/.ATTRIBUTES/VARIABLE_VALUE")].split("/")
    obj = layer
    for step in path:
      obj = _match._step(obj, step)  # pylint: disable=protected-access
      assert obj is not None, (key, step)
    assert _match.is_variable(obj), key
    assert tuple(obj.shape) == tuple(shapes[key]), key
    reached.append(id(obj))
  # Each key its own variable, and every Keras 3 weight reached.
  assert len(set(reached)) == len(keys) == len(layer.weights)


def test_private_state_that_is_no_layer_is_not_followed():
  layer = keras.layers.Dense(2)
  layer.build((None, 3))
  assert _match._step(layer, "_kernel") is None  # pylint: disable=protected-access
  assert _match._step(layer, "_tracker") is None  # pylint: disable=protected-access
