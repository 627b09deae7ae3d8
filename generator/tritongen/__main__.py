"""`python -m tritongen` runs the CLI."""

import sys

from tritongen.cli import main

sys.exit(main())
