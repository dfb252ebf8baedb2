"""SGLang's own request and response schemas, from its package, checked on our bodies.

`python -m tests.sglang_schema` reads {"vocab_size": N, "items": [{"kind", "body"}]} on stdin
and writes one {"error", "normalized"} per item on stdout. It runs in a process of its own
because loading these modules on a machine without CUDA needs two stand-ins that must not
leak into a test session:
- SGLang's own Triton stub (`sglang._platform_stubs`, what SGLang installs on Apple Silicon,
  where Triton does not exist): `sglang.srt.utils` imports triton at module level.
- `sglang.srt.managers.schedule_batch` (the scheduler's batch, which pulls in the model
  runtime, torchvision and CUDA kernels): io_struct takes five names from it, used only in
  annotations and for batch requests (`get_return_hidden_states_mode`); the stand-in's
  function raises, so a batch body fails here instead of passing unchecked.
The `sglang` package itself is entered without its __init__ (the frontend language and
Hugging Face patches). Everything that judges a body is SGLang 0.5.23's code:
- api_types.GenerateRequest: the JSON contract its HTTP /generate route checks every body
  against (entrypoints/api_contract.py); nested sampling_params with unknown keys rejected.
- io_struct.GenerateReqInput(**body): the route's request object (a dataclass: an unknown key
  is a TypeError), then its normalize_batch_and_arguments().
- sampling_params.SamplingParams(**sampling_params).normalize(None).verify(vocab_size), as
  the tokenizer manager does (managers/tokenizer_manager.py, _create_tokenized_object).
- io_struct.UpdateWeightFromDiskReqInput: pydantic's parse of the route's Body() (SGLang's own
  core schema for it), and the struct built from the body (unknown key: TypeError).
- api_types.GenerateResponse / GetModelInfoResponse: the answers our client reads.
- server_args.ServerArgs.add_cli_args: the arguments a launch passes to sglang.launch_server.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import types
from typing import Any


def _bare_package(name: str) -> None:
    """Register a package without running its __init__ (its submodules import as usual)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed: run `bash scripts/setup.d/40-sglang.sh`")
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__spec__.submodule_search_locations = module.__path__
    sys.modules[name] = module


def _schedule_batch_stand_in() -> None:
    name = "sglang.srt.managers.schedule_batch"
    module = types.ModuleType(name)

    def get_return_hidden_states_mode(mode: Any) -> Any:
        raise NotImplementedError("schema-only load: batch requests (return_hidden_states per item) are not checked")

    module.get_return_hidden_states_mode = get_return_hidden_states_mode
    for attr in ("Modality", "MultimodalProcessorOutput", "ReturnHiddenStatesMode", "SamplingLogprobsMode"):
        setattr(module, attr, type(attr, (), {"__module__": name}))
    sys.modules[name] = module


def load() -> types.SimpleNamespace:
    """SGLang's schema modules: api_types, io_struct, sampling_params."""
    import torch  # noqa: F401  (first, as SGLang's stub expects: torch looks for Triton once, at import)

    _bare_package("sglang")
    from sglang import _platform_stubs

    if importlib.util.find_spec("triton") is None:
        sys.meta_path.insert(0, _platform_stubs._TritonFinder())  # every `import triton...` gets SGLang's mock
    _schedule_batch_stand_in()
    from sglang.api.v1 import api_types
    from sglang.srt.managers import io_struct
    from sglang.srt.sampling import sampling_params

    return types.SimpleNamespace(api=api_types, io=io_struct, sampling=sampling_params)


def check(sg: types.SimpleNamespace, kind: str, body: Any, vocab_size: int) -> dict[str, Any]:
    """What SGLang makes of `body` (normalized fields), or raises what SGLang raises."""
    import msgspec
    import pydantic

    if kind == "generate_request":
        sg.api.GenerateRequest.from_json_value(body)
        obj = sg.io.GenerateReqInput(**body)
        obj.normalize_batch_and_arguments()
        params = sg.sampling.SamplingParams(**obj.sampling_params)
        params.normalize(None)
        params.verify(vocab_size)
        return {"is_single": obj.is_single, "batch_size": obj.batch_size, "input_len": len(obj.input_ids),
                "return_logprob": obj.return_logprob, "logprob_start_len": obj.logprob_start_len,
                "sampling": {f: getattr(params, f) for f in ("max_new_tokens", "temperature", "top_p", "top_k",
                                                             "sampling_seed", "ignore_eos")}
                | {"stop_token_ids": sorted(params.stop_token_ids or [])}}
    if kind == "update_weights_request":
        parsed = pydantic.TypeAdapter(sg.io.UpdateWeightFromDiskReqInput).validate_json(json.dumps(body))
        sg.io.UpdateWeightFromDiskReqInput(**body)
        return {f: getattr(parsed, f) for f in ("model_path", "weight_version", "flush_cache", "abort_all_requests")}
    if kind == "update_weights_response":  # the route answers these three fields of the output struct
        out = sg.io.UpdateWeightFromDiskReqOutput(**body)
        return {"success": out.success, "message": out.message}
    if kind == "generate_response":
        resp = sg.api.GenerateResponse.from_json_value(body)
        unknown = set(body["meta_info"]) - set(sg.api.GenerateMetaInfo.__struct_fields__)
        if unknown:
            raise ValueError(f"meta_info fields SGLang never sends: {sorted(unknown)}")
        return {"finish_reason": type(resp.meta_info.finish_reason).__name__,
                "meta_info": msgspec.to_builtins(resp.meta_info)}
    if kind == "launch_args":  # what follows `-m sglang.launch_server`, parsed by ServerArgs' own CLI
        import argparse

        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
        ServerArgs.add_cli_args(parser)
        args, unknown = parser.parse_known_args(body)
        if unknown:
            raise ValueError(f"sglang.launch_server does not take {unknown}")
        return {k: getattr(args, k) for k in ("model_path", "host", "port", "tp_size", "dp_size", "context_length")}
    if kind == "model_info_response":
        return {"weight_version": sg.api.GetModelInfoResponse.from_json_value(body).weight_version}
    raise ValueError(f"unknown kind {kind!r}")


def main() -> None:
    request = json.load(sys.stdin)
    sg = load()
    results = []
    for item in request["items"]:
        try:
            results.append({"error": None, "normalized": check(sg, item["kind"], item["body"], int(request["vocab_size"]))})
        except (Exception, SystemExit) as e:  # SGLang's verdict on this body (argparse exits), per item
            results.append({"error": f"{type(e).__name__}: {e}", "normalized": None})
    json.dump(results, sys.stdout, default=repr)


if __name__ == "__main__":
    main()
