"""``python -m grainpack``: the ``grainpack`` command."""

import sys

from grainpack.cli.main import main

sys.exit(main())
