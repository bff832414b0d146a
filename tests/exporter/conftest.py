import sys
from pathlib import Path

# The factories live next to the tests; make them importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).parent))
