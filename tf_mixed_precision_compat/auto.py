"""`import tf_mixed_precision_compat.auto`: the one-line migration.

Importing this module calls `tf_mixed_precision_compat.install()`:

    import tensorflow as tf
    import tf_mixed_precision_compat.auto  # pylint: disable=unused-import

Python imports a module once: after `uninstall()`, call `install()` again.
"""

import tf_mixed_precision_compat as _package

_package.install()
