"""reasoning-gym task families with their own verifiers (see env.py)."""
