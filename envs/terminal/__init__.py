"""Terminal env: shell episodes in a sandbox on Harbor-layout task folders (see env.py)."""
