"""The file spark-submit runs (capture/merge_submit.py names it; it is installed with the package):
the merge's command line, capture/merge/app.py `main`. `python -m capture.merge` runs it too."""

import sys

from capture.merge.app import main

sys.exit(main())
