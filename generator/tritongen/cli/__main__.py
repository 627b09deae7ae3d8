"""`python -m tritongen.cli` runs the CLI."""

import sys

from tritongen.cli import main

sys.exit(main())
