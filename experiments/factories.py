"""Build the run's parts from the resolved config: the env factory and the policy.

Misconfiguration fails here, before anything starts, with one line that says what to do.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import asyncio

import gymnasium
from omegaconf import DictConfig, OmegaConf

from agent.actors import Actor, ModelActor, OracleActor, RandomActor
from agent.branching import Branching
from agent.chat import ChatRenderer
from agent.policy.base import PolicyClient, SamplingParams
from agent.rollout import EpisodeJob, Runner
from envs.base import ENVS, AgentEnv, TaskSplit
from learner.compute_thread import on_learner_thread
from learner.evaluation import EpisodeEvaluator, PersonalizationEvaluator, merged, supports_personalization
from learner.judges import LLMJudge, RulesJudge
from learner.loop import Evaluator, LoopConfig, RolloutSource
from learner.runlog import RunLog
from learner.modes import Mode, mode as mode_of
from learner.protocol import Learner
from learner.scorer import NextStateScorer
from learner.training import Training

if TYPE_CHECKING:
    from envs.sandbox.fleet import Fleet  # imports the docker package: only where an env uses Docker

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A run misconfigured by the user; the message says what to do."""


_ENV_RESERVED = ("name", "id", "entry_point", "user_llm", "via_proxy")
# What an env's constructor raises for options it cannot use (a missing or malformed env.data,
# env.instances, env.tasks_dir): the user's to fix, so one line, not a traceback.
_ENV_OPTION_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def count(cfg: DictConfig, key: str) -> int:
    """The whole number >= 1 at top-level `key` (steps, n_envs, ...), or a ConfigError."""
    value = cfg.get(key)
    try:
        n = int(str(value))
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a whole number; give e.g. {key}=4") from None
    if n < 1:
        raise ConfigError(f"{key}={n}: must be at least 1")
    return n


def loop_config(cfg: DictConfig) -> LoopConfig:
    """The loop's counts, checked (n_envs too: the runner's) before the run writes anything."""
    count(cfg, "n_envs")
    return LoopConfig(steps=count(cfg, "steps"), tasks_per_step=count(cfg, "tasks_per_step"),
                      group_size=count(cfg, "group_size"), seed=int(cfg.seed), mix=mix_weights(cfg.env),
                      max_staleness=int(cfg.learner.get("max_staleness", 1)))


def run_mode(cfg: DictConfig) -> Mode:
    """The registry's entry (learner/modes.py) for `mode.name`."""
    try:
        return mode_of(str(cfg.mode.name))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def branching(cfg: DictConfig) -> Branching:
    """`rollout.branch`, checked against the mode and the env's path to the policy."""
    b = cfg.rollout.branch
    try:
        out = Branching(at=str(b.at), k=int(b.k), every=int(b.every))
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None
    mode = run_mode(cfg)
    if mode.name == "vine" and not out.on:
        raise ConfigError("mode=vine values each turn by its continuations: set rollout.branch.at=every (or every_k, disagree)")
    if out.needs_votes and not mode.prm:
        raise ConfigError(f"rollout.branch.at=disagree needs the judge's PRM votes, which mode={mode.name} does not score; "
                          "use mode=vine (or binary, combine, integrated) or at=every / every_k")
    if out.on and cfg.env.get("via_proxy"):
        raise ConfigError("rollout.branch cannot fork a conversation held by the live-user proxy: drop env.via_proxy=true")
    return out


def load_entry_point(entry_point: str) -> Any:
    mod_name, _, attr = entry_point.partition(":")
    if not attr:
        raise ConfigError(f"entry point {entry_point!r} must look like 'package.module:ClassName'")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot load {entry_point!r}: {e}") from e


def env_class(env_cfg: DictConfig) -> type:
    """The class `env.entry_point` (or `env.id`) names, checked to be an env this harness can run."""
    if env_cfg.get("entry_point"):
        cls = load_entry_point(str(env_cfg.entry_point))
    elif env_cfg.get("id"):
        try:
            cls = load_entry_point(str(gymnasium.spec(str(env_cfg.id)).entry_point))
        except gymnasium.error.Error as e:
            raise ConfigError(f"env id {env_cfg.id!r} is not registered ({e}); known envs: {', '.join(ENVS)}") from e
    else:
        raise ConfigError(f"env {env_cfg.get('name')!r} names neither an id nor an entry_point; known envs: {', '.join(ENVS)}, custom")
    if not (isinstance(cls, type) and issubclass(cls, gymnasium.Env)):
        raise ConfigError(f"{cls!r} is not a subclass of gymnasium.Env (envs.base.AgentEnv or any Gymnasium env with text actions)")
    if needs_adapter(cls):
        if cls.step is gymnasium.Env.step:
            raise ConfigError(f"{cls.__name__} does not implement step(action): a Gymnasium env needs reset and step")
        return cls
    missing = [h for h in _HOOKS if getattr(cls, h) is getattr(AgentEnv, h)]
    if missing:
        raise ConfigError(f"{cls.__name__} lacks the AgentEnv hooks {', '.join(missing)} and does not override both "
                          "reset and step: implement the hooks (docs/new_env.md) or reset/step the Gymnasium way")
    return cls


# What an AgentEnv subclass implements to run on the base class's reset/step.
_HOOKS = ("task_ids", "load_task", "_act")


def needs_adapter(cls: type) -> bool:
    """Whether `cls` runs through envs.gym_adapter: a Gymnasium env with its own reset and step
    that does not rely on the AgentEnv hooks (a plain gymnasium.Env, or an AgentEnv subclass
    that overrides reset and step instead of implementing the hooks)."""
    if issubclass(cls, AgentEnv):
        own_io = cls.reset is not AgentEnv.reset and cls.step is not AgentEnv.step
        return own_io and any(getattr(cls, h) is getattr(AgentEnv, h) for h in _HOOKS)
    return True


def _require_docker() -> None:
    from envs.sandbox import fleet

    if not fleet.available():
        raise ConfigError(f"sandbox=docker but no Docker engine answers ({fleet.describe()}): "
                          "start one with `bash scripts/setup.d/10-docker.sh` (as root), or run with sandbox=bwrap")


def use_fleet(docker: Fleet) -> None:
    """Place this process's Docker sandboxes as `docker` says (sandbox.hosts, sandbox.max_per_host)."""
    from envs.sandbox import fleet

    try:
        fleet.use(docker)
    except ValueError as e:
        raise ConfigError(f"sandbox: {e}") from e


@dataclasses.dataclass
class EnvMaker:
    """Builds the configured env. Picklable: a Ray actor builds its env with it in its own
    process, after placing that process's Docker sandboxes on the same hosts."""

    cls: type[AgentEnv]
    opts: dict[str, Any]
    docker: Fleet | None = None  # where its Docker sandboxes go, when the env uses Docker
    name: str = ""  # the user's class, when `cls` wraps it (the Gymnasium adapter)

    def __call__(self) -> AgentEnv:
        if self.docker is not None:
            use_fleet(self.docker)
        try:
            return self.cls(**self.opts)
        except _ENV_OPTION_ERRORS as e:  # an option's value the env refuses: its own one-line message
            raise ConfigError(f"env={self.name or self.cls.__name__}: {e}") from None


def sandbox_backend(name: str) -> str:
    """`auto` -> docker when an engine answers, else bwrap (checked once per run)."""
    if name not in ("auto", "docker", "bwrap"):
        raise ConfigError(f"unknown sandbox {name!r}; choose auto, docker or bwrap")
    if name != "auto":
        return name
    from envs.sandbox import fleet

    if fleet.available():
        return "docker"
    log.warning("no Docker engine answers: sandboxes use bubblewrap")
    return "bwrap"


def build_env(cfg: DictConfig, stack: AsyncExitStack) -> Callable[[], AgentEnv]:
    """The configured env's factory, with the simulated users' LLM for `env.user=llm` (call on the
    run's event loop; what stops the parts it starts goes on `stack`)."""
    extra = {}
    if cfg.env.get("user") == "llm":
        extra["complete"] = user_complete(cfg, asyncio.get_running_loop(), stack)
    return env_factory(cfg, extra, stack)


def env_factory(cfg: DictConfig, extra: dict[str, Any] | None = None,
                stack: AsyncExitStack | None = None) -> Callable[[], AgentEnv]:
    """A zero-argument constructor of the configured env (`env_maker`). With `cluster=ray` each
    env lives in a Ray actor (what stops Ray goes on `stack`)."""
    return on_cluster(cfg, env_maker(cfg, cfg.env, extra), stack)


def env_maker(cfg: DictConfig, env_cfg: DictConfig, extra: dict[str, Any] | None = None) -> EnvMaker:
    """The maker of the env `env_cfg` describes (the run's `env`, or one member of env=mix).
    Options under it are passed to the constructor (null means "the env's default"); `sandbox`
    is passed where accepted. A Gymnasium env without the AgentEnv hooks is wrapped in
    envs.gym_adapter.GymAdapter, whose own options (role, kind, outcome, ...) it takes first."""
    if env_cfg.get("members") is not None:
        return mix_maker(cfg, env_cfg, extra)
    cls = env_class(env_cfg)
    opts = {k: v for k, v in OmegaConf.to_container(env_cfg, resolve=True).items()
            if k not in _ENV_RESERVED and v is not None}
    adapter: dict[str, Any] | None = None  # the adapter's own options, when the class runs through it
    own: list[str] = []
    if needs_adapter(cls):
        from envs.gym_adapter import GymAdapter

        own = [p for p in inspect.signature(GymAdapter.__init__).parameters if p not in ("self", "env_class", "env_options")]
        adapter = {k: opts[k] for k in own if k in opts}
    params = inspect.signature(cls.__init__).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    docker = None
    if str(cfg.sandbox.name) != "bwrap" or opts.get("sandbox") == "docker":
        from envs.sandbox.fleet import Fleet

        docker = Fleet(tuple(str(h) for h in cfg.sandbox.get("hosts") or []), cfg.sandbox.get("max_per_host"))
        use_fleet(docker)  # here too: `auto` and the checks below ask these engines
    if "sandbox" in params and "sandbox" not in opts:
        opts["sandbox"] = sandbox_backend(str(cfg.sandbox.name))
    if opts.get("sandbox") == "docker":
        _require_docker()
    else:
        docker = None
    for k, v in (extra or {}).items():
        if k in params or accepts_any:
            opts.setdefault(k, v)
    if adapter is not None:  # an option both take (max_turns) goes to both
        opts = {k: v for k, v in opts.items() if k not in adapter or k in params}
    unknown = [k for k in opts if k not in params and not accepts_any]
    if unknown:
        known = [p for p in params if p != "self"] + own
        raise ConfigError(f"{cls.__name__} has no option {', '.join(unknown)}; it takes: {', '.join(known) or 'nothing'}")
    if adapter is not None:
        return EnvMaker(GymAdapter, {"env_class": cls, "env_options": opts, **adapter}, docker, name=cls.__name__)
    return EnvMaker(cls, opts, docker)


CONF_ENVS = Path(__file__).parent / "conf" / "env"


def mix_weights(env_cfg: DictConfig) -> dict[str, float]:
    """env=mix: each member's sampling weight (`weight`, default 1); {} for any other env."""
    members = env_cfg.get("members")
    if members is None:
        return {}
    if not members:
        raise ConfigError("env=mix needs members: env.members.NAME.env=WORD (or env.members.NAME.entry_point=module:Class), "
                          "optionally env.members.NAME.weight=W and the member's own options")
    weights = {}
    for name, m in members.items():
        try:
            weights[str(name)] = float(m.get("weight", 1.0))
        except (TypeError, ValueError, AttributeError):
            raise ConfigError(f"env.members.{name}: give the member's options, with weight a number (got {m!r})") from None
        if not weights[str(name)] > 0:
            raise ConfigError(f"env.members.{name}.weight={weights[str(name)]}: must be above 0")
    return weights


def member_env(cfg: DictConfig, name: str, member: DictConfig) -> DictConfig:
    """One member's env config: its env word's yaml (or `custom` for an entry point) with the
    member's own options over it, placed in a copy of the run's config (so `${model.path}`
    and the like resolve as they do for a single env)."""
    opts = {k: v for k, v in OmegaConf.to_container(member, resolve=True).items() if k != "weight"}
    word = str(opts.pop("env", "custom"))
    if word == "mix" or not (CONF_ENVS / f"{word}.yaml").is_file():
        known = sorted(f.stem for f in CONF_ENVS.glob("*.yaml") if f.stem != "mix")
        raise ConfigError(f"env.members.{name}.env={word!r}: choose one of {', '.join(known)}")
    base = OmegaConf.load(CONF_ENVS / f"{word}.yaml")
    if word == "custom" and not opts.get("entry_point"):
        raise ConfigError(f"env.members.{name}: give env.members.{name}.env=WORD or env.members.{name}.entry_point=module:Class")
    env = OmegaConf.merge(base, opts)
    if env.get("user") == "llm" or env.get("via_proxy"):
        raise ConfigError(f"env.members.{name}: a mixture's members cannot use env.user=llm or env.via_proxy "
                          "(they belong to the run's single env); run that env alone")
    root = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    root.env = env
    return root.env


def mix_maker(cfg: DictConfig, env_cfg: DictConfig, extra: dict[str, Any] | None = None) -> EnvMaker:
    """env=mix: one maker per member, each with its own options (its own sandbox and limits)."""
    from envs.mix import MixEnv

    makers = {}
    for name in mix_weights(env_cfg):
        member = member_env(cfg, name, env_cfg.members[name])
        try:
            makers[name] = env_maker(cfg, member, extra)
        except ConfigError as e:
            raise ConfigError(f"env.members.{name}: {e}") from None
    return EnvMaker(MixEnv, {"members": makers})


def on_cluster(cfg: DictConfig, make_env: Callable[[], AgentEnv],
               stack: AsyncExitStack | None = None) -> Callable[[], AgentEnv]:
    """`cluster=local`: `make_env` as it is; `cluster=ray`: envs built in Ray actors behind a proxy."""
    c = cfg.get("cluster") or {"name": "local"}
    if c["name"] == "local":
        return make_env
    if c["name"] != "ray":
        raise ConfigError(f"unknown cluster {c['name']!r}; choose local or ray")
    if cfg.env.get("user") == "llm":
        raise ConfigError("cluster=ray cannot run env.user=llm (the simulated user's LLM client lives in this process); "
                          "use cluster=local")
    from envs import remote

    runtime_env = OmegaConf.to_container(c.runtime_env, resolve=True) if c.get("runtime_env") else None
    try:
        stop = remote.connect(c.get("address"), int(c.num_cpus), int(c.object_store_mb), runtime_env)
    except Exception as e:
        raise ConfigError(f"cannot start or join the Ray cluster (cluster.address={c.get('address')}): {e}") from e
    if stack is not None:
        stack.callback(stop)
    return remote.remote_factory(make_env, float(c.actor_cpus), str(c.scheduling), float(cfg.timeouts.episode_s))


@dataclasses.dataclass
class Policy:
    """The serving side of a run: who acts, and (for model policies) the client and renderer."""

    name: str
    make_actor: Callable[[EpisodeJob], Actor]
    client: PolicyClient | None = None
    renderer: ChatRenderer | None = None
    tokenizer: Any = None
    # model policies: actors that sample with the given parameters (each job's seed)
    sampled: Callable[[SamplingParams], Callable[[EpisodeJob], Actor]] | None = None
    engine: Any = None  # policy=local: the engine in this process (weight updates go to it as tensors)

    def actor_maker(self, sampling: SamplingParams) -> Callable[[EpisodeJob], Actor]:
        """Actors that sample with `sampling` (the evaluation's temperature); oracle and random
        act as they always do."""
        return self.make_actor if self.sampled is None else self.sampled(sampling)


def sampling_params(cfg: DictConfig) -> SamplingParams:
    s = cfg.sampling
    return SamplingParams(max_new_tokens=int(s.max_new_tokens), temperature=float(s.temperature), top_p=float(s.top_p))


def prefix_cache_mb(value: Any) -> float | None:
    """`policy.prefix_cache_mb`: a number of MB, or `auto` (None: the served weights' size)."""
    if str(value).lower() == "auto":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"policy.prefix_cache_mb must be a number of MB or auto, got {value!r}") from None


def build_policy(cfg: DictConfig, stack: AsyncExitStack) -> Policy:
    """The configured policy; what stops its engine, server or client goes on `stack`."""
    name = str(cfg.policy.name)
    if name in ("oracle", "random") and run_mode(cfg).trains:
        raise ConfigError(f"policy={name} has no model to train; add mode=eval (or use policy=local)")
    if name == "oracle":
        return Policy(name, make_actor=lambda job: OracleActor())
    if name == "random":
        return Policy(name, make_actor=lambda job: RandomActor(job.seed))
    if name == "local":
        from agent.policy.engine import Engine
        from agent.policy.server import serve
        from agent.policy.sglang_client import SGLangClient

        try:
            engine = Engine(str(cfg.model.path), dtype=str(cfg.model.dtype), max_batch=int(cfg.policy.max_batch), seed=int(cfg.seed),
                            prefix_cache_mb=prefix_cache_mb(cfg.policy.prefix_cache_mb))
        except FileNotFoundError as e:  # a model word or folder that is not there
            raise ConfigError(str(e)) from e
        # a random key shared in-process; weights load only from this run's directory
        stack.callback(engine.close)
        server = serve(engine, host=str(cfg.policy.host), port=int(cfg.policy.port), weights_dirs=[str(cfg.run_dir)])
        stack.callback(server.stop)
        client = SGLangClient(server.url, timeout=float(cfg.timeouts.step_s), api_key=server.api_key)
        stack.push_async_callback(client.aclose)
        return _model_policy(cfg, name, client, engine.tokenizer, engine)
    if name == "sglang":
        from agent.policy.sglang_launch import connect_or_launch

        client, tokenizer = connect_or_launch(cfg, stack)
        return _model_policy(cfg, name, client, tokenizer)
    raise ConfigError(f"unknown policy {name!r}; choose local, sglang, oracle or random")


def _model_policy(cfg: DictConfig, name: str, client: PolicyClient, tokenizer: Any, engine: Any = None) -> Policy:
    renderer = ChatRenderer(tokenizer)
    max_context = int(cfg.max_context)

    def sampled(sampling: SamplingParams) -> Callable[[EpisodeJob], Actor]:
        return lambda job: ModelActor(client, renderer, dataclasses.replace(sampling, seed=job.seed), max_context)

    return Policy(name, make_actor=sampled(sampling_params(cfg)), client=client, renderer=renderer, tokenizer=tokenizer,
                  sampled=sampled, engine=engine)


def _runner_kw(cfg: DictConfig) -> dict[str, Any]:
    return dict(n_envs=int(cfg.n_envs), step_timeout_s=float(cfg.timeouts.step_s),
                episode_timeout_s=float(cfg.timeouts.episode_s), progress=bool(cfg.progress),
                max_failed_share=float(cfg.max_failed_share))


def build_runner(cfg: DictConfig, make_env: Callable[[], AgentEnv], policy: Policy, stack: AsyncExitStack,
                 branch: bool = True) -> RolloutSource:
    """The rollout runner; with `env.via_proxy=true`, episodes talk to the policy through a
    live-user proxy (started here, records in run_dir/proxy) and train on its records.
    `branch=False`: no episode trees whatever rollout.branch says (SFT's demonstrations)."""
    kw = _runner_kw(cfg)
    tree = branching(cfg) if branch else Branching()  # checked before the proxy starts
    if not cfg.env.get("via_proxy"):
        runner = Runner(make_env, policy.make_actor, **kw, branching=tree)
        stack.push_async_callback(asyncio.to_thread, runner.close)
        return runner
    if policy.client is None or not hasattr(policy.client, "url"):
        raise ConfigError(f"env.via_proxy=true needs a model behind an HTTP server: use policy=local or policy=sglang "
                          f"(not {cfg.policy.name})")
    from agent.proxy import Proxy
    from agent.via_proxy import ProxyActor, ProxyLink, ProxyRollouts, ProxyTurns, new_api_key

    key = new_api_key()
    joins = ProxyTurns()
    proxy = Proxy(policy.client.url, policy.tokenizer, str(cfg.model.path), key, record_dir=Path(cfg.run_dir) / "proxy",
                  on_turn=joins.from_proxy, max_tokens=int(cfg.sampling.max_new_tokens),
                  policy_api_key=getattr(policy.client, "api_key", None))
    proxy.start()
    stack.callback(proxy.stop)
    link = ProxyLink(proxy.url, key, str(cfg.model.path), float(cfg.timeouts.step_s), int(cfg.n_envs) + 8)
    stack.push_async_callback(link.aclose)
    sampling = sampling_params(cfg)
    runner = Runner(make_env, lambda job: ProxyActor(link, job.episode_id, dataclasses.replace(sampling, seed=job.seed)),
                    **kw)
    rollouts = ProxyRollouts(runner, joins)
    stack.push_async_callback(asyncio.to_thread, rollouts.close)
    return rollouts


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """`eval.*`: held-out tasks, the split's own seed, how often, samples per task, temperature."""

    n_tasks: int
    seed: int
    every: int
    k: int
    temperature: float

    @property
    def on(self) -> bool:
        return self.n_tasks > 0 and self.every > 0


def eval_settings(cfg: DictConfig) -> EvalSettings:
    e = cfg.eval
    try:
        s = EvalSettings(int(e.n_tasks), int(e.seed), int(e.every), int(e.k), float(e.temperature))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"eval.n_tasks, eval.seed, eval.every and eval.k take integers, eval.temperature a number ({err})") from err
    if s.n_tasks < 0 or s.every < 0 or s.k < 1 or s.temperature < 0:
        raise ConfigError(f"need eval.n_tasks >= 0, eval.every >= 0 (0: never), eval.k >= 1 and eval.temperature >= 0; "
                          f"got n_tasks={s.n_tasks} every={s.every} k={s.k} temperature={s.temperature}")
    return s


def build_eval_runner(cfg: DictConfig, make_env: Callable[[], AgentEnv], policy: Policy, stack: AsyncExitStack) -> Runner:
    """The evaluation's own runner: the same envs and policy as training, actors at
    eval.temperature, and no `on_turn` (no evaluation turn is ever scored or trained on; with
    env.via_proxy it talks to the policy directly, so the proxy records none either)."""
    s = eval_settings(cfg)
    if s.k > 1 and s.temperature == 0 and policy.sampled is not None:
        log.warning("eval.k=%d samples per task at eval.temperature=0 repeat one greedy episode (unless the env "
                    "draws at random); set eval.temperature=1.0 for pass@k", s.k)
    sampling = dataclasses.replace(sampling_params(cfg), temperature=s.temperature)
    runner = Runner(make_env, policy.actor_maker(sampling), **_runner_kw(cfg), label="held-out")
    stack.push_async_callback(asyncio.to_thread, runner.close)
    return runner


def build_personalization(cfg: DictConfig, policy: Policy, make_env: Callable[[], AgentEnv],
                          stack: AsyncExitStack) -> PersonalizationEvaluator | None:
    """The personalization score for envs that offer it (chat_sim), with a model policy."""
    s = eval_settings(cfg)
    if policy.client is None or policy.renderer is None or s.n_tasks <= 0:
        return None
    env = make_env()
    if not supports_personalization(env):
        env.close()
        return None
    stack.callback(env.close)
    sampling = dataclasses.replace(sampling_params(cfg), temperature=s.temperature, seed=s.seed)
    return PersonalizationEvaluator(env, policy.client, policy.renderer, sampling, n_tasks=s.n_tasks)


def build_evaluator(cfg: DictConfig, policy: Policy, make_env: Callable[[], AgentEnv], held_out: list[str],
                    stack: AsyncExitStack) -> Evaluator | None:
    """The held-out evaluation between updates: episodes on the `held_out` task ids (every env)
    and, where the env offers it, personalization. None when eval.every or eval.n_tasks is 0."""
    s = eval_settings(cfg)
    if not s.on:
        return None
    evaluators: list[Evaluator] = []
    if held_out:
        evaluators.append(EpisodeEvaluator(build_eval_runner(cfg, make_env, policy, stack), held_out, s.k, s.seed,
                                           members=list(mix_weights(cfg.env))))
    else:
        log.warning("env %s has too few tasks to hold any out: no held-out episodes", cfg.env.name)
    personalization = build_personalization(cfg, policy, make_env, stack)
    if personalization is not None:
        evaluators.append(personalization)
    return merged(evaluators)


def user_complete(cfg: DictConfig, loop: asyncio.AbstractEventLoop, stack: AsyncExitStack) -> Callable[[list[dict]], str]:
    """A blocking `complete(messages) -> str` for LLM-backed simulated users (envs are sync and
    run in worker threads; the client lives on the run's event loop)."""
    from agent.policy.chat_client import ChatClient

    uc = cfg.env.user_llm
    url, key = uc.get("url"), uc.get("api_key")
    if not url:
        from agent.policy.engine import Engine
        from agent.policy.server import serve

        engine = Engine(str(uc.model), dtype=str(cfg.model.dtype), seed=int(cfg.seed) + 2)
        stack.callback(engine.close)
        server = serve(engine, host="127.0.0.1", port=0)
        stack.callback(server.stop)
        url, key = server.url, server.api_key
    client = ChatClient(str(url), model=str(uc.model), api_key=key, timeout=float(cfg.timeouts.step_s))
    stack.push_async_callback(client.aclose)

    def complete(messages: list[dict]) -> str:
        fut = asyncio.run_coroutine_threadsafe(client.complete(messages, temperature=0.7, max_tokens=256), loop)
        return fut.result(timeout=float(cfg.timeouts.step_s))[0]

    return complete


async def build_training(cfg: DictConfig, policy: Policy, runner: RolloutSource, runlog: RunLog, stack: AsyncExitStack,
                         evaluator: Evaluator | None = None) -> Training:
    mode = str(cfg.mode.name)
    if policy.client is None or policy.renderer is None:
        raise ConfigError(f"mode={mode} trains a model: use policy=local or policy=sglang (not {cfg.policy.name})")
    signals = run_mode(cfg)
    scorer = None
    if signals.prm or signals.opd:
        judge = _build_judge(cfg, stack)
        teacher = None
        if signals.opd:
            teacher = _build_teacher(cfg, policy, stack)
        scorer = NextStateScorer(judge, teacher, policy.renderer, n_votes=int(cfg.judge.n_votes), mode=mode)
    learner = await on_learner_thread(_build_learner, cfg)
    stack.callback(learner.close)  # learner=megatron under torchrun: releases the other ranks
    m = cfg.mode
    return Training(mode, policy.client, runner, runlog, scorer, learner,
                    w_opd=float(m.get("w_opd", 1.0)), w_rl=float(m.get("w_rl", 1.0)), prm_coef=float(m.get("prm_coef", 1.0)),
                    checkpoint_every=int(cfg.learner.get("checkpoint_every", 1)), resume=bool(cfg.resume), evaluator=evaluator,
                    engine=policy.engine)


def demonstrable_split(cfg: DictConfig, make_env: Callable[[], AgentEnv]) -> tuple[TaskSplit, TaskSplit]:
    """The run's training / held-out split (eval.n_tasks, eval.seed) and the tasks on each side
    of it that the env's oracle can act out, from one env of their own."""
    env = make_env()
    try:
        split = env.task_split(int(cfg.eval.n_tasks), int(cfg.eval.seed))
        return split, TaskSplit([t for t in split.train if env.demonstrable(t)],
                                [t for t in split.held_out if env.demonstrable(t)])
    finally:
        env.close()


def build_sft(cfg: DictConfig, make_env: Callable[[], AgentEnv], runlog: RunLog, settings: DictConfig | None = None,
              splits: tuple[TaskSplit, TaskSplit] | None = None) -> tuple[Any, Policy]:
    """The SFT run of mode=sft (or of `settings`: warm_start=sft) and the policy whose actors act
    out oracle demonstrations; `splits`: the run's split and its demonstrable tasks
    (`demonstrable_split`), when the caller has them already."""
    from learner.sft import SFT, SFTConfig
    from learner.sft_demos import read_transcripts

    m = cfg.mode if settings is None else settings
    where = "mode" if settings is None else "warm_start"
    if str(cfg.learner.name) != "torch":
        raise ConfigError(f"{where}=sft trains with the torch learner only; use learner=torch (not learner={cfg.learner.name})")
    for key in ("n_demos", "epochs", "batch_size"):
        if m.get(key) is None or int(m[key]) < 1:
            raise ConfigError(f"{where}.{key} must be a positive number (got {m.get(key)})")
    source = str(m.demos)
    transcripts = None if source == "oracle" else read_transcripts(source, int(m.n_demos))
    split, demonstrable = splits or demonstrable_split(cfg, make_env)
    leaked = sorted({t.task_id for t in transcripts or [] if t.task_id in set(split.held_out)})
    if leaked:
        raise ConfigError(f"{source}: transcripts of held-out tasks {leaked[:3]} must not be trained on "
                          f"(held out: eval.n_tasks={cfg.eval.n_tasks}, eval.seed={cfg.eval.seed})")
    learner = _build_learner(cfg, lr=float(m.lr))
    sft = SFT(learner, ChatRenderer(learner.tokenizer), runlog, split,
              SFTConfig(n_demos=int(m.n_demos), epochs=int(m.epochs), batch_size=int(m.batch_size),
                        heldout_demos=int(m.heldout_demos), seed=int(cfg.seed), max_context=int(cfg.max_context),
                        max_new_tokens=int(cfg.sampling.max_new_tokens), keep_long_turns=bool(m.keep_long_turns)),
              transcripts, demonstrable)
    return sft, Policy("demos", make_actor=sft.make_actor)


def _build_learner(cfg: DictConfig, lr: float | None = None) -> Learner:
    """The configured learner; `lr` overrides learner.lr (SFT takes its own)."""
    name = str(cfg.learner.name)
    lc = cfg.learner
    if name == "torch":
        from agent.policy.models import learner_bf16  # torch and transformers: imported only when used
        from learner.torch_learner import TorchLearner

        return TorchLearner(str(cfg.model.path), lr=float(lc.lr if lr is None else lr), betas=tuple(lc.betas),
                            weight_decay=float(lc.weight_decay),
                            adam_eps=float(lc.adam_eps), optimizer_state_dtype=str(lc.optimizer_state_dtype),
                            max_tokens_per_micro_batch=int(lc.max_tokens_per_micro_batch),
                            bf16=learner_bf16(lc.bf16, str(cfg.model.dtype)),
                            gradient_checkpointing=bool(lc.gradient_checkpointing), kl_coef=float(lc.kl_coef),
                            old_logprobs=str(lc.old_logprobs), tis_cap=None if lc.tis_cap is None else float(lc.tis_cap),
                            seed=int(cfg.seed))
    if name == "megatron":
        from learner.megatron_learner import MegatronLearner

        return MegatronLearner.from_config(cfg)
    raise ConfigError(f"unknown learner {name!r}; choose torch or megatron")


def _build_judge(cfg: DictConfig, stack: AsyncExitStack) -> Any:
    name = str(cfg.judge.name)
    if name == "rules":
        return RulesJudge()
    if name == "llm":
        from agent.policy.chat_client import ChatClient

        url, key = cfg.judge.get("url"), cfg.judge.get("api_key")
        model = str(cfg.judge.model)
        if not url:  # an embedded engine on this machine serves the judge
            from agent.policy.engine import Engine
            from agent.policy.server import serve

            engine = Engine(model, dtype=str(cfg.model.dtype), seed=int(cfg.seed) + 1)
            stack.callback(engine.close)
            server = serve(engine, host="127.0.0.1", port=0)
            stack.callback(server.stop)
            url, key = server.url, server.api_key
        client = ChatClient(str(url), model=model, api_key=key, timeout=float(cfg.timeouts.step_s))
        stack.push_async_callback(client.aclose)
        return LLMJudge(client, n_votes=int(cfg.judge.n_votes), temperature=float(cfg.judge.temperature),
                        max_tokens=int(cfg.judge.max_tokens))
    raise ConfigError(f"unknown judge {name!r}; choose rules or llm")


def _build_teacher(cfg: DictConfig, policy: Policy, stack: AsyncExitStack) -> Any:
    which = str(cfg.mode.get("teacher", "frozen"))
    if which == "current":
        return policy.client
    if which == "frozen":  # the initial weights, never updated (as the paper's PRM engine)
        if cfg.mode.get("teacher_url"):  # a server that holds them (on GPU hosts: the PRM's SGLang)
            from agent.policy.sglang_client import SGLangClient

            client = SGLangClient(str(cfg.mode.teacher_url), timeout=float(cfg.timeouts.step_s),
                                  api_key=cfg.mode.get("teacher_api_key"))
            stack.push_async_callback(client.aclose)
            return client
        from agent.policy.engine import Engine

        engine = Engine(str(cfg.model.path), dtype=str(cfg.model.dtype), seed=int(cfg.seed))
        stack.callback(engine.close)
        return engine
    raise ConfigError(f"unknown teacher {which!r}; choose frozen or current")
