"""`python -m tf_mixed_precision_compat <inspect|convert|migrate> ...`."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tf_mixed_precision_compat.cli import main  # noqa: E402

sys.exit(main())
