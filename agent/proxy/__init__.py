"""The live-user proxy: an OpenAI-compatible chat server in front of any PolicyClient that turns
real conversations into training turns.

Routes: POST /v1/chat/completions (streamed over SSE or not; `tools` passed to the chat
template; a reply holding <tool_call> blocks comes back as OpenAI `tool_calls`), GET /v1/models,
GET /health. Every /v1 route needs `Authorization: Bearer <key>` (401 otherwise). The server
binds to 127.0.0.1 unless told otherwise.

Headers:
  X-Session-Id    the conversation. Missing: the request is a session of its own, done at once
                  (one anonymous bucket would splice strangers' replies onto each other's turns).
  X-Turn-Type     `main` (a turn of the conversation: recorded) or `side` (an auxiliary call such
                  as a title or a memory summary: served, never recorded). Missing means `main`:
                  the original OpenClaw-RL server defaulted to `side`, so every client that sent no
                  header (most of them) was served but produced no training data at all.
  X-Session-Done  truthy (1/true/yes/on): after this request the session is over; its last turn
                  is closed with no next state.
  X-Train         falsy (0/false/no/off): this request is served, never recorded; the session's
                  pending turn is closed without it as next state (its words are the user's too).
  X-Session-Train falsy: the same for the whole session, from this request on (sticky: the id
                  stays opted out after the session ends, so send it on the session's first request).

Input (agent/proxy/request.py): a body over `max_body_bytes` (default 4 MB) is answered 413 before it is read; text that
UTF-8 cannot encode (a lone surrogate) anywhere in a request, and non-finite or out-of-range
sampling values, get 400 in OpenAI's error shape. Parsing, rendering and decoding run in worker
threads, never on the event loop.

Privacy (agent/privacy.py): emails, phone and card numbers and secrets (API keys, tokens,
passwords) are replaced by [REDACTED:<kind>] in every text of a record (messages, reply, next
state); the token ids stay the sampler's, and the response tokens that carry such a value are
listed in `meta["private_tokens"]`, which the learner's loss mask drops.

POST /v1/sessions/{id}/end ends a session without a request to answer; its optional body
{"message": {"role": "user", "content": ...}} is the last turn's next state (a user's closing
words, such as a simulated user's "thanks, that's it", that need no reply).

A main turn: the request's messages are rendered with the model's chat template into prompt
ids, the policy samples, and the turn keeps the sampler's own response ids and log-probs (the
reply is never re-tokenised). Its next state is the last message of the session's next main
request (role user -> kind "user_reply", tool -> "tool_result"); see agent/proxy/sessions.py
for pending turns and the TTL, agent/proxy/sink.py for where finished turns go. The at-least-one-turn-per-session rule
is the learner's; the proxy only records.

Weight updates: the proxy has no pause gate. The policy (the embedded engine or SGLang) queues
requests while it swaps weights, so users are never refused; each turn carries the policy
version that sampled it.

Streaming is emulated: a PolicyClient returns whole results, so the reply is sent as SSE chunks
once sampled. Non-streamed answers carry `Server-Timing: policy;dur=..,proxy;dur=..` (ms).

`python -m agent.proxy --policy-url URL --model NAME --port N --api-key KEY [--record-dir DIR] [--policy-api-key K]`, or
`--engine-port M` instead of --policy-url to run the embedded engine in the proxy's process (its SGLang routes
take the proxy's key; `--weights-dir DIR` lets them load weights from DIR).

The package: request.py (what a client sends, parsed and validated), openai_compat.py (the
OpenAI wire format), sessions.py (the session book: pending turns, close reasons, finished
Turns), sink.py (records and the consumer), server.py (`Proxy`, the HTTP layer), __main__.py
(the command line).
"""
from agent.proxy.server import Proxy

__all__ = ["Proxy"]
