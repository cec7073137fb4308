"""``python -m specconsole.lab.doubles.sglang_sim [serve] ARGS``, as ``python -m sglang.launch_server ARGS``."""

import sys

from specconsole.lab.doubles.sglang_sim.lifecycle import main

if __name__ == "__main__":
    sys.exit(main())
