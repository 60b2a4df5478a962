"""verse_vertebrae_localization.py with its loss-scale line in TF 2.4's form.

`loss_scale = self.optimizer.loss_scale` instead of TF 2.3's
`self.optimizer.loss_scale()` (that job's `--tf24-form`; its docstring says
why); everything else is that job.
"""

import os
import runpy
import sys

sys.argv.append("--tf24-form")
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "verse_vertebrae_localization.py"),
               run_name="__main__")
