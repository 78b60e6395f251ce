import sys

from cdc_tooling.cli import main

sys.exit(main())
