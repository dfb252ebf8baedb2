"""GUI env: MiniWoB++ pages in headless Chromium (default) or OSWorld desktops (adapter)."""
from envs.gui.verdict import verdict

__all__ = ["verdict"]
