import sys

from atc.cli import main

sys.exit(main())
