"""``python -m runtimekit.kube.dra serve`` (same as ``runtimekit dra serve``)."""

import sys

from .cli import main

sys.exit(main())
