"""Session-wide test settings."""
import signal

# Tests interrupt their child processes with SIGINT as a terminal would. A run started in the
# background (nohup, `cmd &` in a script) ignores SIGINT and its children would inherit that:
# restore Python's default so the children behave as under a terminal, however pytest started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
