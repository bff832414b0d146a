"""``python -m runtimekit.kube.deviceplugin serve`` (same as ``runtimekit device-plugin``)."""

import sys

from .cli import main

sys.exit(main())
