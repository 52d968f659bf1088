"""``python -m agenteval``: the ``agenteval`` command, for when its script is not on ``PATH``."""

from .cli import main

main(prog_name="agenteval")
