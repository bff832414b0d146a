import sys
from pathlib import Path

# The hand-built snapshots of the exporter tests (exporter_factories) serve the status page's tests too.
sys.path.insert(0, str(Path(__file__).parents[1] / "exporter"))
