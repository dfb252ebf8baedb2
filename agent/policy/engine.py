"""The embedded engine: a transformers causal LM served in-process with continuous batching.

One worker thread owns the model. Each loop it (1) swaps weights when an update is pending and
no sequence is running, (2) prefills newly arrived requests together (left-padded, masked) and
merges their KV caches into the running batch, left-padding the shorter side with masked zeros,
(3) runs one decode step for every running sequence, (4) drops finished (or cancelled) sequences
from the batch. Requests that arrive while a step runs join at the next step.

Log-probs: every reported log-prob is log_softmax of the model's raw logits, i.e. under the
temperature-1, unfiltered distribution, whatever temperature/top-p/top-k were used to sample.
That is what a teacher-forced forward pass (the learner's old log-probs) computes.

Weight updates drain: while an update is pending, new requests wait; running sequences finish on
the old weights; then the weights are swapped and the version bumped. So each result was sampled
by exactly one version, and nothing is lost or refused. An update comes as a folder
(`update_weights`), as tensors copied in (`load_weights`), or, where a learner in this process
trains tensors of the served dtype, by serving those very tensors (`share_weights`): the learner's
optimizer step then runs here, drained, as the update (`change_weights`), and the model is held once.

Prefix reuse: a finished sequence's KV (prompt + output, unpadded, on CPU) is kept in an LRU
cache bounded in bytes. A new request reuses the longest common prefix with any entry (sliced
from it), so a multi-turn episode or a group sharing a system prompt prefills only what is new.
A weight swap empties the cache: its entries were computed by the old weights.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import DynamicCache

from agent.policy.attention import PACKED_SDPA
from agent.policy.base import GenerateResult, SamplingParams
from agent.policy.kv_cache import RoomyCache
from agent.policy.models import load_model

log = logging.getLogger(__name__)

PREFILL_TOKENS = 16384  # padded prompt tokens per prefill forward
LOGIT_FLOATS = 64 * 1024 * 1024  # fp32 logits kept per prefill (256 MiB) for input log-probs
MIN_REUSE = 16  # shorter common prefixes are not worth a cache copy


class EngineClosed(RuntimeError):
    pass


@dataclasses.dataclass
class Request:
    """One /generate call. `logprob_start` follows SGLang's logprob_start_len: input log-probs
    cover input_ids[logprob_start:], the first entry None (-1 or None: no input log-probs)."""

    input_ids: list[int]
    sampling: SamplingParams
    ignore_eos: bool = False
    logprob_start: int | None = None


@dataclasses.dataclass
class Output:
    output_ids: list[int]
    output_logprobs: list[float]
    input_logprobs: list[float | None]
    finish_reason: str  # "stop" | "length"
    matched: int | None  # the stop token that ended it
    prompt_tokens: int
    weight_version: int


@dataclasses.dataclass
class _Seq:
    """A request in flight inside the worker."""

    req: Request
    future: concurrent.futures.Future
    stop_ids: frozenset[int]
    max_new: int
    generator: torch.Generator | None
    out_ids: list[int] = dataclasses.field(default_factory=list)
    out_lps: list[float] = dataclasses.field(default_factory=list)
    in_lps: list[float | None] = dataclasses.field(default_factory=list)
    n_ctx: int = 0  # real tokens in this sequence's KV cache (its next position id)
    past: torch.Tensor | None = None  # cached KV [layers, 2, heads, n, dim] of the prompt's first n tokens
    done: str = ""
    matched: int | None = None
    cancelled: bool = False


@dataclasses.dataclass
class _Swap:
    apply: Callable[[], None] | None  # changes the served weights; dropped once run (it may hold a model's worth of tensors)
    version: int | None
    future: concurrent.futures.Future


@dataclasses.dataclass
class _Entry:
    ids: torch.Tensor  # int64 [n]
    kv: torch.Tensor  # [layers, 2, heads, n, head_dim], contiguous, on CPU

    @property
    def nbytes(self) -> int:
        return _nbytes(self.ids) + _nbytes(self.kv)


class PrefixCache:
    """Finished sequences' KV, found by the longest common prefix of token ids; least recently
    used entries are evicted so that the held tensors (ids + KV) never exceed `budget` bytes.
    Only the worker thread touches entries; `stats()` may be read from any thread."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._next_key = 0
        self._stats = dict.fromkeys(("lookups", "hits", "tokens_reused", "tokens_prefilled", "bytes_used",
                                     "entries", "evictions"), 0)

    def stats(self) -> dict[str, int]:
        return {**self._stats, "budget_bytes": self.budget}

    def match(self, ids: list[int], limit: int) -> torch.Tensor | None:
        """A view of the KV of the longest prefix of ids[:limit] that an entry holds, or None."""
        self._stats["lookups"] += 1
        if limit < MIN_REUSE or not self._entries:
            return None
        query = torch.tensor(ids[:limit])
        best, key = max((_common_prefix(e.ids, query), k) for k, e in self._entries.items())
        if best < MIN_REUSE:
            return None
        self._entries.move_to_end(key)
        return self._entries[key].kv[:, :, :, :best]

    def put(self, ids: list[int], kv: torch.Tensor) -> None:
        """Keep `kv`, the KV of `ids`; entries it extends are dropped (it serves their lookups)."""
        entry = _Entry(torch.tensor(ids), kv)
        if entry.nbytes > self.budget:
            return
        for key, e in list(self._entries.items()):
            n = _common_prefix(e.ids, entry.ids)
            if n == len(entry.ids):  # an entry already holds these tokens
                self._entries.move_to_end(key)
                return
            if n == len(e.ids):
                self._drop(key)
        while self._stats["bytes_used"] + entry.nbytes > self.budget:
            self._drop(next(iter(self._entries)))
            self._stats["evictions"] += 1
        self._entries[self._next_key] = entry
        self._next_key += 1
        self._stats["bytes_used"] += entry.nbytes
        self._stats["entries"] += 1

    def record(self, reused: list[int], prefilled: list[int]) -> None:
        """Count one prefill's tokens per row: taken from the cache, and computed."""
        self._stats["hits"] += sum(n > 0 for n in reused)
        self._stats["tokens_reused"] += sum(reused)
        self._stats["tokens_prefilled"] += sum(prefilled)

    def clear(self) -> None:
        self._entries.clear()
        self._stats["bytes_used"] = self._stats["entries"] = 0

    def _drop(self, key: int) -> None:
        self._stats["bytes_used"] -= self._entries.pop(key).nbytes
        self._stats["entries"] -= 1


class Engine:
    """In-process PolicyClient over a transformers model (see the module docstring).
    `prefix_cache_mb` bounds the KV kept for reuse across requests (0 disables it; None: as many
    bytes as the served weights take, a budget that grows with the model instead of a fixed GB)."""

    def __init__(self, model_name_or_path: str = "tiny", dtype: str = "auto", device: str = "cpu",
                 max_batch: int = 32, seed: int = 0, idle_wait_s: float = 1.0,
                 prefix_cache_mb: float | None = None) -> None:
        model, tokenizer = load_model(model_name_or_path, dtype=dtype, seed=seed, device=device)
        if model.config._attn_implementation == "sdpa":
            model.set_attn_implementation(PACKED_SDPA)
        self.model = model
        self.tokenizer = tokenizer
        self.model_path = model_name_or_path
        self.device = torch.device(device)
        self.max_batch = max_batch
        self.weight_version = 0
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self._rng = torch.Generator().manual_seed(seed)
        if prefix_cache_mb is not None and prefix_cache_mb < 0:
            raise ValueError(f"prefix_cache_mb must be >= 0, got {prefix_cache_mb}")
        weight_bytes = sum(_nbytes(p) for p in model.parameters())
        self._prefix = PrefixCache(weight_bytes if prefix_cache_mb is None else int(prefix_cache_mb * 2**20))
        self._pending: queue.Queue[_Seq | _Swap] = queue.Queue()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._idle_wait_s = idle_wait_s  # every submit and close sets _wake, so this only bounds a lost wake-up
        self._thread = threading.Thread(target=self._loop, name="engine-worker", daemon=True)
        self._thread.start()

    # ---- public API (async, mirrors agent.policy.base.PolicyClient) ----

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        out = await self.run(Request(list(input_ids), sampling))
        return GenerateResult(out.output_ids, out.output_logprobs, out.finish_reason, out.weight_version,
                              self.decode(out.output_ids))

    async def score(self, input_ids: list[int], start: int) -> list[float]:
        if not 1 <= start <= len(input_ids):
            raise ValueError(f"score: start must be in [1, {len(input_ids)}], got {start}")
        out = await self.run(Request(list(input_ids), SamplingParams(max_new_tokens=0), logprob_start=start - 1))
        return [float(x) for x in out.input_logprobs[1:]]

    async def update_weights(self, model_path: str, weight_version: int | None = None) -> int:
        state = await asyncio.to_thread(self._read_weights, model_path)
        return await asyncio.wrap_future(self.change_weights(self._copier(state), weight_version))

    async def load_weights(self, state: Mapping[str, torch.Tensor], weight_version: int | None = None) -> int:
        """Take new weights from tensors in this process (a learner's own, by name): copied into
        the served model between batches, with no file and no second copy of the model. The
        caller must not change `state` until this returns."""
        self._check_fit(state, "the weights given")
        return await asyncio.wrap_future(self.change_weights(self._copier(dict(state)), weight_version))

    def can_share(self, state: Mapping[str, torch.Tensor]) -> bool:
        """Whether `share_weights` can serve these tensors as they are (same dtype and device)."""
        if self.model is None:
            return False
        own = dict(self.model.named_parameters())
        return all(k in state and state[k].dtype == p.dtype and state[k].device == p.device for k, p in own.items())

    async def share_weights(self, state: Mapping[str, torch.Tensor], weight_version: int | None = None) -> int:
        """Serve the given tensors themselves from now on (a learner's parameters, by name; see
        `can_share`): the model's own are freed. Whoever changes them must do it through
        `change_weights`, so that no batch runs on half-changed weights."""
        self._check_fit(state, "the weights given")
        if not self.can_share(state):
            raise ValueError("share_weights: the tensors' dtype or device differs from the served model's; use load_weights")
        params = dict(self.model.named_parameters())  # a tied weight once

        def rebind() -> None:
            for name, p in params.items():
                p.data = state[name]
        return await asyncio.wrap_future(self.change_weights(rebind, weight_version))

    def change_weights(self, apply: Callable[[], None], weight_version: int | None = None) -> concurrent.futures.Future:
        """Run `apply` (a change of the served weights in place, e.g. a learner's optimizer step on
        shared weights) on the worker between batches, drained, then serve as `weight_version`
        (default: the next). The future resolves to the version, or fails with what `apply` raised
        (or EngineClosed); callable from any thread."""
        return self._submit(_Swap(apply, weight_version, concurrent.futures.Future()))

    async def health(self) -> bool:
        return self._thread.is_alive() and not self._closed.is_set()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def run(self, req: Request) -> Output:
        """Validate and queue one request; awaits its result (cancelling drops it from the batch)."""
        seq = self._make_seq(req)
        try:
            return await asyncio.wrap_future(self._submit(seq))
        except asyncio.CancelledError:
            seq.cancelled = True  # the worker drops it at the next step
            raise

    def prefix_cache_stats(self) -> dict[str, int]:
        """Prefix reuse so far: requests that reused KV (hits), tokens reused and tokens computed
        by prefills, and the cache's bytes, entries and evictions against its budget."""
        return self._prefix.stats()

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of sampled ids; invalid UTF-8 (byte soup) becomes U+FFFD, never an error."""
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the worker; queued and running requests fail with EngineClosed. Once the worker
        has stopped, the model and the prefix cache go too: a closed engine can outlive its run's
        use of it (an HTTP app's handlers hold it, and their holders are not all visible to the
        garbage collector: a warm start's evaluation engine kept its 0.54 GB model through RL)."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        self._fail_pending()
        if not self._thread.is_alive():
            self.model = None
            self._prefix.clear()

    # ---- request intake ----

    def _make_seq(self, req: Request) -> _Seq:
        ids, sp = req.input_ids, req.sampling
        if not ids:
            raise ValueError("input_ids is empty")
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.vocab_size}): {bad[:5]}")
        if len(ids) >= self.max_positions:
            raise ValueError(f"prompt has {len(ids)} tokens; the model's context is {self.max_positions}")
        if sp.max_new_tokens < 0 or sp.temperature < 0 or not 0 < sp.top_p <= 1:
            raise ValueError("need max_new_tokens >= 0, temperature >= 0, 0 < top_p <= 1")
        if req.logprob_start is not None and not -1 <= req.logprob_start < len(ids):
            raise ValueError(f"logprob_start_len must be in [-1, {len(ids) - 1}], got {req.logprob_start}")
        stop = set(sp.stop_token_ids) | (set() if req.ignore_eos else set(self.eos_ids))
        gen = torch.Generator().manual_seed(sp.seed) if sp.seed is not None else None
        max_new = min(sp.max_new_tokens, self.max_positions - len(ids))
        return _Seq(req, concurrent.futures.Future(), frozenset(stop), max_new, gen)

    def _submit(self, item: _Seq | _Swap) -> concurrent.futures.Future:
        if self._closed.is_set():
            raise EngineClosed("engine is closed")
        self._pending.put(item)
        self._wake.set()
        if self._closed.is_set():  # closed while we queued: nobody waits forever
            self._fail_pending()
        return item.future

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                return
            _resolve(item.future, error=EngineClosed("engine is closed"))

    def _read_weights(self, model_path: str) -> dict[str, torch.Tensor]:
        files = sorted(Path(model_path).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors files in {model_path}")
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        self._check_fit(state, model_path)
        return state

    def _copier(self, state: Mapping[str, torch.Tensor]) -> Callable[[], None]:
        return lambda: self.model.load_state_dict(state, strict=False)

    def _check_fit(self, state: Mapping[str, torch.Tensor], source: str) -> None:
        """Raise unless `state` names exactly the served model's tensors, in their shapes."""
        if self.model is None:
            raise EngineClosed("engine is closed")
        own = self.model.state_dict()
        unexpected = sorted(set(state) - set(own))
        loaded_ptrs = {own[k].data_ptr() for k in state if k in own}
        missing = sorted(k for k in set(own) - set(state) if own[k].data_ptr() not in loaded_ptrs)  # tied weights are fine
        wrong = sorted(k for k in state if k in own and state[k].shape != own[k].shape)
        if unexpected or missing or wrong:
            raise ValueError(f"weights in {source} do not fit the served model: unexpected {unexpected[:3]}, "
                             f"missing {missing[:3]}, wrong shape {wrong[:3]}")

    # ---- worker ----

    def _loop(self) -> None:
        waiting: list[_Seq] = []
        swaps: list[_Swap] = []
        running: list[_Seq] = []
        try:
            with torch.inference_mode():
                self._serve(waiting, swaps, running)
        except BaseException:  # a bug must not leave callers waiting forever
            log.exception("engine worker crashed; failing every request")
        finally:
            self._closed.set()
            closed = EngineClosed("engine is closed")
            for item in [*running, *waiting, *swaps]:
                _resolve(item.future, error=closed)
            self._fail_pending()

    def _serve(self, waiting: list[_Seq], swaps: list[_Swap], running: list[_Seq]) -> None:
        """The scheduling loop; `waiting`, `swaps`, `running` are updated in place so that
        `_loop` can fail whatever is left when it ends."""
        cache: DynamicCache | None = None
        mask: torch.Tensor | None = None  # [B, T]: 1 = real token, 0 = left padding
        while not self._closed.is_set():
            while not self._pending.empty():
                item = self._pending.get_nowait()
                (swaps if isinstance(item, _Swap) else waiting).append(item)
            if swaps and not running:  # drained: apply every queued update in order
                for swap in swaps:
                    self._swap(swap)
                swaps.clear()
            admitted: list[_Seq] = []
            taken = 0  # admitted requests stay in `waiting` until merged, so a crash still fails them
            while not swaps and taken < len(waiting) and len(running) + len(admitted) < self.max_batch:
                seq = waiting[taken]
                taken += 1
                if seq.future.set_running_or_notify_cancel():  # False: cancelled while queued
                    seq.past = self._prefix.match(seq.req.input_ids, len(seq.req.input_ids) - _kept(seq))
                    admitted.append(seq)
            for group in self._prefill_groups(admitted):
                try:
                    new_cache, new_mask = self._prefill(group)
                except Exception as e:  # a bad group fails alone
                    log.exception("prefill failed")
                    for s in group:
                        _resolve(s.future, error=e)
                    continue
                self._retire(group, new_cache)
                live = [i for i, s in enumerate(group) if not s.done]
                if live:
                    if len(live) < len(group):
                        new_cache, new_mask = _select(new_cache, new_mask, live)
                    cache, mask = _merge(cache, mask, new_cache, new_mask)
                    running.extend(group[i] for i in live)
            del waiting[:taken]
            if not running:
                self._wake.wait(self._idle_wait_s)
                self._wake.clear()
                continue
            try:
                mask = self._decode_step(running, cache, mask)
            except Exception as e:
                log.exception("decode step failed")
                for s in running:
                    _resolve(s.future, error=e)
                running.clear()
                cache = mask = None
                continue
            self._retire(running, cache)
            keep = [i for i, s in enumerate(running) if not (s.done or s.cancelled)]
            if len(keep) < len(running):
                running[:] = [running[i] for i in keep]
                cache, mask = _select(cache, mask, keep)

    def _swap(self, swap: _Swap) -> None:
        self._prefix.clear()  # computed by the old weights (and a failed load may leave them half-changed)
        try:
            with torch.inference_mode(False):  # a shared learner's optimizer state must be ordinary tensors
                swap.apply()
            self.weight_version = swap.version if swap.version is not None else self.weight_version + 1
            _resolve(swap.future, self.weight_version)
        except Exception as e:
            _resolve(swap.future, error=e)
        finally:  # the loop's locals keep the last swap until the next one: not a whole model's worth of tensors
            swap.apply = None

    def _forward(self, ids: list[list[int]], cache: DynamicCache, mask: torch.Tensor, pos: torch.Tensor,
                 keep: int) -> torch.Tensor:
        dev = self.device
        out = self.model(input_ids=torch.tensor(ids, device=dev), attention_mask=mask.to(dev),
                         position_ids=pos.to(dev), past_key_values=cache, use_cache=True, logits_to_keep=keep)
        return out.logits.float().cpu()

    def _prefill_groups(self, seqs: list[_Seq]) -> list[list[_Seq]]:
        """Split newly admitted requests, fewest new tokens first, into prefill batches that bound
        the padded token count, padding waste (at most half) and the memory of the logits kept for
        input log-probs."""
        groups: list[list[_Seq]] = []
        for s in sorted(seqs, key=_fresh):
            trial = groups[-1] + [s] if groups else [s]
            padded = len(trial) * _fresh(s)  # sorted: s is the widest
            keep = max(_kept(t) for t in trial)
            if (groups and padded <= min(PREFILL_TOKENS, 2 * sum(map(_fresh, trial)))
                    and len(trial) * keep * self.vocab_size <= LOGIT_FLOATS):
                groups[-1] = trial
            else:
                groups.append([s])
        return groups

    def _prefill(self, seqs: list[_Seq]) -> tuple[DynamicCache, torch.Tensor]:
        """Forward the new tokens of left-padded prompts together on top of their reused KV; fill
        input log-probs where asked; sample each first token. Returns the group's cache and mask.

        Every row feeds its last `width` prompt tokens (all of a shorter prompt) and reuses KV
        for the rest: a row that reused more than it needs recomputes a few tokens where it would
        otherwise hold padding, so each row's real tokens stay contiguous at the right."""
        prompts = [s.req.input_ids for s in seqs]
        width = max(map(_fresh, seqs))
        total = max(map(len, prompts))
        mask = torch.tensor([[0] * (total - len(p)) + [1] * len(p) for p in prompts])
        pos = (mask.cumsum(1) - 1).clamp(min=0)[:, -width:]
        reused = [max(len(p) - width, 0) for p in prompts]
        cache = self._past_cache(seqs, reused, total - width)
        self._prefix.record(reused, [len(p) - n for p, n in zip(prompts, reused)])
        keep = max(_kept(s) for s in seqs)
        fed = [p[-width:] for p in prompts]
        logits = self._forward([[0] * (width - len(f)) + f for f in fed], cache, mask, pos, keep)
        sampling = []
        for i, s in enumerate(seqs):
            ids, start = s.req.input_ids, s.req.logprob_start
            if start is not None and start >= 0:  # row's last len-start logits sit at positions start..len-1
                rows = logits[i, keep - (len(ids) - start):-1]
                lps = torch.log_softmax(rows, dim=-1).gather(-1, torch.tensor(ids[start + 1:], dtype=torch.long)[:, None])
                s.in_lps = [None, *lps[:, 0].tolist()]
            s.n_ctx = len(ids)
            s.past = None  # let an evicted entry's memory go
            if s.max_new == 0:
                s.done = "length"
            else:
                sampling.append(i)
        if sampling:
            self._sample([seqs[i] for i in sampling], logits[sampling, -1])
        return cache, mask

    def _past_cache(self, seqs: list[_Seq], reused: list[int], width: int) -> DynamicCache:
        """A cache holding each row's first `reused[i]` prompt tokens' KV (from its match),
        left-padded to `width` columns."""
        cache = RoomyCache(self.model.config)
        if width == 0:
            return cache
        ref = next(s.past for s, n in zip(seqs, reused) if n)
        empty = ref[:, :, :, :0]
        rows = [_lpad(s.past[:, :, :, :n] if n else empty, width, dim=3) for s, n in zip(seqs, reused)]
        kv = torch.stack(rows, dim=2).to(self.device)  # [layers, 2, batch, heads, width, head_dim]
        for i, layer in enumerate(kv):
            cache.update(layer[0], layer[1], i)
        return cache

    def _retire(self, seqs: list[_Seq], cache: DynamicCache) -> None:
        """Finish the done sequences among the batch rows `seqs`, first keeping their KV for reuse
        (it covers prompt + output but the last sampled token, which was never fed)."""
        for i, s in enumerate(seqs):
            if not s.done:
                continue
            if self._prefix.budget and not s.cancelled:
                self._prefix.put((s.req.input_ids + s.out_ids)[:s.n_ctx], _row_kv(cache, i, s.n_ctx))
            self._finish(s)

    def _decode_step(self, running: list[_Seq], cache: DynamicCache, mask: torch.Tensor) -> torch.Tensor:
        """One token for every running sequence; returns the grown mask."""
        mask = torch.cat([mask, mask.new_ones(len(running), 1)], dim=1)
        pos = torch.tensor([[s.n_ctx] for s in running])
        logits = self._forward([[s.out_ids[-1]] for s in running], cache, mask, pos, 1)[:, -1]
        for s in running:
            s.n_ctx += 1
        self._sample(running, logits)
        return mask

    def _sample(self, seqs: list[_Seq], logits: torch.Tensor) -> None:
        """Sample one token per row; record its raw (temperature-1) log-prob."""
        logprobs = torch.log_softmax(logits, dim=-1)
        for i, s in enumerate(seqs):
            sp = s.req.sampling
            if sp.temperature == 0:
                tok = int(torch.argmax(logits[i]))
            else:
                probs = torch.softmax(_filter(logits[i] / sp.temperature, sp.top_k, sp.top_p), dim=-1)
                tok = int(torch.multinomial(probs, 1, generator=s.generator or self._rng))
            s.out_ids.append(tok)
            s.out_lps.append(float(logprobs[i, tok]))
            if tok in s.stop_ids:
                s.done, s.matched = "stop", tok
            elif len(s.out_ids) >= s.max_new:
                s.done = "length"

    def _finish(self, seq: _Seq) -> None:
        _resolve(seq.future, Output(seq.out_ids, seq.out_lps, seq.in_lps, seq.done, seq.matched,
                                    len(seq.req.input_ids), self.weight_version))


def _kept(seq: _Seq) -> int:
    """How many final positions' logits a prefill must keep for this request."""
    start = seq.req.logprob_start
    return len(seq.req.input_ids) - start if start is not None and start >= 0 else 1


def _fresh(seq: _Seq) -> int:
    """Prompt tokens a prefill must compute for this request (those its match does not cover)."""
    return len(seq.req.input_ids) - (seq.past.shape[3] if seq.past is not None else 0)


def _row_kv(cache: DynamicCache, row: int, n: int) -> torch.Tensor:
    """Batch row `row`'s last n KV columns (its real tokens) as one [layers, 2, heads, n, dim] CPU tensor."""
    return torch.stack([torch.stack([layer.keys[row, :, -n:], layer.values[row, :, -n:]])
                        for layer in cache.layers]).cpu()


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    m = min(len(a), len(b))
    differ = (a[:m] != b[:m]).nonzero()
    return int(differ[0]) if len(differ) else m


def _nbytes(x: torch.Tensor) -> int:
    return x.untyped_storage().nbytes()


def _resolve(fut: concurrent.futures.Future, result=None, error: BaseException | None = None) -> None:
    """Set a future's outcome unless its caller already gave up on it."""
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


def _filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask all but the top-k tokens and the smallest set whose probability reaches top_p."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop = cum - torch.softmax(sorted_logits, dim=-1) >= top_p  # keep up to and incl. the crossing token
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


def _merge(cache: DynamicCache | None, mask: torch.Tensor | None, new: DynamicCache,
           new_mask: torch.Tensor) -> tuple[DynamicCache, torch.Tensor]:
    """Append freshly prefilled rows to the running batch, left-padding whichever side is shorter."""
    if cache is None:
        return new, new_mask
    t = max(mask.shape[1], new_mask.shape[1])
    for old_layer, new_layer in zip(cache.layers, new.layers):
        old_layer.keys = torch.cat([_lpad(old_layer.keys, t), _lpad(new_layer.keys, t)], dim=0)
        old_layer.values = torch.cat([_lpad(old_layer.values, t), _lpad(new_layer.values, t)], dim=0)
    return cache, torch.cat([_lpad(mask, t, dim=1), _lpad(new_mask, t, dim=1)], dim=0)


def _lpad(x: torch.Tensor, t: int, dim: int = 2) -> torch.Tensor:
    short = t - x.shape[dim]
    if short == 0:
        return x
    shape = list(x.shape)
    shape[dim] = short
    return torch.cat([x.new_zeros(shape), x], dim=dim)


def _select(cache: DynamicCache, mask: torch.Tensor, keep: list[int]) -> tuple[DynamicCache | None, torch.Tensor | None]:
    """Keep rows `keep`; drop leading columns that are padding in every remaining row."""
    if not keep:
        return None, None
    idx = torch.tensor(keep)
    mask = mask[idx]
    lead = int((mask.cumsum(1) == 0).all(0).sum())
    mask = mask[:, lead:]
    for layer in cache.layers:
        layer.keys = layer.keys[idx, :, lead:]
        layer.values = layer.values[idx, :, lead:]
    return cache, mask
