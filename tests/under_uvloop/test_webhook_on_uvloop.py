"""The webhook's HTTPS tests again, on uvloop's loop and its own TLS transport (what `gpuqueue
webhook` serves on where uvloop is installed): every admission rule over real TLS, certificate
rotation under load, the body limit, and hostile bodies."""

from tests.test_webhook_fuzz import *  # noqa: F401,F403
from tests.test_webhook_server import *  # noqa: F401,F403
