import sys

from runner.run.cli import main

sys.exit(main())
