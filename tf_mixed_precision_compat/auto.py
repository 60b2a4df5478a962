"""`import tf_mixed_precision_compat.auto`: the one-line migration.

Importing this module calls `tf_mixed_precision_compat.install()`, so a TF
2.3/2.4 mixed-precision script runs on today's TensorFlow with one added line
after `import tensorflow as tf`:

    import tensorflow as tf
    import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

Importing the package itself (`import tf_mixed_precision_compat`) patches
nothing; this module exists so that the opt-in is a single import. Python
imports a module once, so after `uninstall()` call `install()` again rather
than re-importing this module.
"""

import tf_mixed_precision_compat as _package

_package.install()
