"""``python -m runtimekit.kube.remediation serve|reset-breaker`` (same as ``runtimekit remediate``)."""

import sys

from .cli import main

sys.exit(main())
