"""The controller's tests against the API stand-in again, on uvloop's loop (what `gpuqueue
extender` runs on where uvloop is installed): FLAME end to end, restarts and releases, and the
injected faults (errors, kills, cut and stalled watches, the regressions they found)."""

from tests.test_controller_flame import *  # noqa: F401,F403
from tests.test_controller_restart import *  # noqa: F401,F403
from tests.test_controller_releases import *  # noqa: F401,F403
from tests.test_faults_errors import *  # noqa: F401,F403
from tests.test_faults_kills import *  # noqa: F401,F403
from tests.test_faults_streams import *  # noqa: F401,F403
from tests.test_faults_regressions import *  # noqa: F401,F403
