"""`python -m experiments.view RUN_DIR [RUN_DIR ...] --out DIR [--serve PORT]`: a static site of
the runs' trajectories (experiments/view/__init__.py says what it shows)."""
from __future__ import annotations

import argparse
import functools
import http.server
import sys

from envs.sandbox.sweeper import sigterm_as_sigint
from experiments.view.site import ViewError, build


def serve(directory: str, port: int) -> None:
    """Serve the site on 127.0.0.1 until Ctrl-C or SIGTERM."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as e:
        sys.exit(f"error: cannot serve on 127.0.0.1:{port}: {e.strerror or e}")
    print(f"serving http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.view", description=__doc__)
    ap.add_argument("run_dirs", nargs="+", help="run dirs (each with config.yaml, metrics.jsonl, turns.jsonl)")
    ap.add_argument("--out", required=True, help="folder for the site (new, empty, or a previous site: rewritten)")
    ap.add_argument("--serve", type=int, metavar="PORT", help="then serve it on 127.0.0.1:PORT (0: any free port)")
    args = ap.parse_args(argv)
    try:
        index = build(args.run_dirs, args.out)
    except ViewError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("stopped")
    print(f"written: {index}")
    if args.serve is not None:
        serve(args.out, args.serve)


if __name__ == "__main__":
    sigterm_as_sigint()  # SIGTERM stops the build or the server as Ctrl-C does
    main()
