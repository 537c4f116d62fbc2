"""The merge for spark-submit from a checkout (`logtide merge` submits capture/merge/__main__.py,
which an installed package has too):

    spark-submit --jars <var/jars/*.jar> spark_apps/merge.py --config F --source S [--table db.t ...]

The merge itself is capture/merge/ (capture must be importable: installed, or on PYTHONPATH)."""

import sys

from capture.merge.app import main

if __name__ == "__main__":
    sys.exit(main())
