"""``python -m memory_service_tools.embedded_db up|down|status`` (see `memory_service_tools.embedded_db.command_line`)."""

import sys

from memory_service_tools.embedded_db.command_line import main

sys.exit(main())
