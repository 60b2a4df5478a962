"""`import tf_mixed_precision_compat.auto_tf_keras`: tf_keras, then install.

The tf_keras target without `TF_USE_LEGACY_KERAS=1` (`hooks.tf_keras.select`
says what it sets and when it raises), then `install()`. Place it right after
`import tensorflow as tf`, before anything uses `tf.keras`:

    import tensorflow as tf
    import tf_mixed_precision_compat.auto_tf_keras
"""

import tf_mixed_precision_compat as _package
from tf_mixed_precision_compat.hooks.tf_keras import select as _select

_select.select_tf_keras()
_package.install()
