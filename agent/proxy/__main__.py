"""`python -m agent.proxy`: the live-user proxy as a process (its routes and headers: `--help`),
in front of a policy server or of an embedded engine; it serves until SIGINT or SIGTERM, then
closes every pending turn into the records."""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading

import agent.proxy
from agent.policy.engine import Engine
from agent.policy.models import load_tokenizer
from agent.policy.server import serve
from agent.proxy.server import MAX_BODY_BYTES, Proxy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m agent.proxy", description=agent.proxy.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--policy-url", help="SGLang-compatible policy server (SGLang or agent.policy.server)")
    where.add_argument("--engine-port", type=int, help="run the embedded engine in this process instead (no second "
                       "HTTP hop) and also serve its SGLang routes on this port (0: any free port)")
    ap.add_argument("--model", required=True, help="the served model: tiny, smollm2 or a local HF folder (its tokenizer renders prompts)")
    ap.add_argument("--served-name", default=None, help="name shown by /v1/models (default: --model)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--api-key", default=os.environ.get("OPENCLAW_PROXY_API_KEY"),
                    help="Bearer key clients must send (default: $OPENCLAW_PROXY_API_KEY)")
    ap.add_argument("--record-dir", default="runs/proxy", help="where turns-v<version>.jsonl are appended")
    ap.add_argument("--ttl", type=float, default=600.0, help="seconds a session's last turn waits for a next state")
    ap.add_argument("--max-tokens", type=int, default=1024, help="reply length when a request gives none")
    ap.add_argument("--max-tokens-limit", type=int, default=32768, help="the largest max_tokens a request may ask for")
    ap.add_argument("--max-body-mb", type=float, default=MAX_BODY_BYTES / 2**20,
                    help="request bodies over this many MiB are refused (413)")
    ap.add_argument("--docs", action="store_true", help="serve FastAPI's /docs and /openapi.json")
    ap.add_argument("--policy-api-key", default=os.environ.get("OPENCLAW_POLICY_API_KEY"),
                    help="--policy-url only: the Bearer key of the policy server (default: $OPENCLAW_POLICY_API_KEY)")
    ap.add_argument("--max-batch", type=int, default=64, help="embedded engine only: sequences decoded together")
    ap.add_argument("--weights-dir", action="append", default=[],
                    help="embedded engine only: a folder its /update_weights_from_disk may load from (repeat for "
                         "more; none: no updates). The engine's routes take the proxy's --api-key")
    args = ap.parse_args(argv)
    if not args.api_key:
        ap.error("--api-key (or $OPENCLAW_PROXY_API_KEY) is required")
    logging.basicConfig(level=logging.INFO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with contextlib.ExitStack() as cleanup:
        if args.engine_port is not None:
            engine = Engine(args.model, max_batch=args.max_batch)
            cleanup.callback(engine.close)
            handle = serve(engine, args.host, args.engine_port, api_key=args.api_key, weights_dirs=args.weights_dir,
                           docs=args.docs)
            cleanup.callback(handle.stop)
            policy, tokenizer, target = engine, engine.tokenizer, f"embedded engine (SGLang routes on {handle.url})"
        else:
            policy, tokenizer, target = args.policy_url, load_tokenizer(args.model), args.policy_url
        proxy = Proxy(policy, tokenizer, args.served_name or args.model, args.api_key, host=args.host, port=args.port,
                      record_dir=args.record_dir, ttl_s=args.ttl, max_tokens=args.max_tokens,
                      max_tokens_limit=args.max_tokens_limit, max_body_bytes=int(args.max_body_mb * 2**20),
                      policy_api_key=args.policy_api_key, docs=args.docs,
                      on_turn=lambda _turn: None)  # the records are the output here
        proxy.start()
        cleanup.callback(proxy.stop)
        print(f"proxy serving on {proxy.url} -> {target}", flush=True)
        while not stop.wait(1.0) and proxy.serving():
            pass
    print("proxy stopped" + (" (interrupted)" if stop.is_set() else ""), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
