"""TF 2.3 `fit`: compile wraps the optimizer with the policy's loss scale.

    python tf23_fit_policy.py OUT.json

`Policy('mixed_float16', loss_scale='dynamic')`, `model.compile` with a plain
optimizer, `fit`, then the wrapped optimizer's `loss_scale()` read.
"""

import sys

import numpy as np
import tensorflow as tf
import tf_mixed_precision_compat.auto  # pylint: disable=unused-import
from tensorflow.keras.mixed_precision import experimental as mixed_precision

from _data import batch, make_model, save

mixed_precision.set_policy(
    mixed_precision.Policy('mixed_float16', loss_scale='dynamic'))
model = make_model()
model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss='mse')
x = np.concatenate([batch(i)[0] for i in range(6)])
y = np.concatenate([batch(i)[1] for i in range(6)])
fitted = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
save(sys.argv[1], history=[{'loss': loss} for loss in fitted.history['loss']],
     loss_scale=float(model.optimizer.loss_scale()),
     weights=[w.tolist() for w in model.get_weights()])
