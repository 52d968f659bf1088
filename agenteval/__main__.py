"""``python -m agenteval``: the ``agenteval`` command, for when its script is not on ``PATH``."""

from .cli import main

if __name__ == "__main__":  # imported (pydoc, a tool listing modules), it runs nothing
    main(prog_name="agenteval")
