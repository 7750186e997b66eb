import sys

from gpuqueue.cli import main

sys.exit(main())
