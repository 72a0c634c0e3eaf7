import os
import sys

from .workflow.resident_client import SERVER_ENV, exit_as, run_through_server, wants_server

# A step the driver's resident server can run costs Python's start instead of ringflow's
# imports (docs/architecture.md#resident-steps); neither the step nor what it starts
# sees the server.
_server = wants_server(sys.argv[1:])
os.environ.pop(SERVER_ENV, None)
if _server is not None and (_code := run_through_server(_server, sys.argv)) is not None:
    exit_as(_code)

from .cli import main  # noqa: E402

raise SystemExit(main())
