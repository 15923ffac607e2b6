import sys

from gpuop.agent.agent import main

sys.exit(main())
