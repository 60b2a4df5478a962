"""A model function whose module imports the package (convert must refuse:
its checkpoint is verified where the package cannot be imported)."""

import tf_mixed_precision_compat  # noqa: F401  # pylint: disable=unused-import

from tests.cli.models import seq_model  # noqa: F401
