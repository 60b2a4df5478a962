"""`import tf_mixed_precision_compat.auto_tf_keras`: tf_keras, then install.

The tf_keras target (`tf.keras` is tf_keras 2.x, TF 2.4's Keras design)
without the `TF_USE_LEGACY_KERAS=1` environment variable: place the import
right after `import tensorflow as tf`, before anything uses `tf.keras`:

    import tensorflow as tf
    import tf_mixed_precision_compat.auto_tf_keras

It selects tf_keras as the variable would have (`targets.select_tf_keras`:
the variable is set for the rest of the process and the processes it
starts), then calls `tf_mixed_precision_compat.install()`. It raises
`ImportError` naming the `pip` command if tf_keras is missing, and
`RuntimeError` if `tf.keras` already resolved to Keras 3 (then move the
import up, or set the variable before Python starts). `uninstall()` undoes
`install()`; the target stays tf_keras.
"""

import tf_mixed_precision_compat as _package
from tf_mixed_precision_compat import targets as _targets

_targets.select_tf_keras()
_package.install()
