import sys

from ais_bench.cli import main

sys.exit(main())
