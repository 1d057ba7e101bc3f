"""``python -m common.tooling.embedded_db up|down|status`` (see `common.tooling.embedded_db.command_line`)."""

import sys

from common.tooling.embedded_db.command_line import main

sys.exit(main())
