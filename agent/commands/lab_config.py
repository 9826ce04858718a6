"""How a lab run's configuration and serving figures are shown."""

from __future__ import annotations


def config_dict(engine_cfg, workload_cfg) -> dict:
    return {
        "model": engine_cfg.model, "models": engine_cfg.models, "allocator": engine_cfg.allocator,
        "block_size": engine_cfg.block_size, "max_num_seqs": engine_cfg.max_num_seqs,
        "max_num_batched_tokens": engine_cfg.max_num_batched_tokens,
        "enable_chunked_prefill": engine_cfg.enable_chunked_prefill,
        "long_prefill_token_threshold": engine_cfg.long_prefill_token_threshold, "policy": engine_cfg.policy,
        "max_model_len": engine_cfg.max_model_len, "kv_cache_memory": engine_cfg.kv_cache_memory,
        "num_preload_models": engine_cfg.num_preload_models, "max_resident_models": engine_cfg.max_resident_models,
        "rate": workload_cfg.rate, "concurrency": workload_cfg.concurrency, "prompt_len": str(workload_cfg.prompt_len),
        "output_len": str(workload_cfg.output_len), "long_prompt_share": workload_cfg.long_prompt_share,
        "long_prompt_len": workload_cfg.long_prompt_len, "duration": workload_cfg.duration, "seed": workload_cfg.seed,
    }


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def render_figures(engine_cfg, workload_cfg, f: dict) -> str:
    load = (f"closed loop x{workload_cfg.concurrency}" if workload_cfg.concurrency
            else f"{workload_cfg.rate:g} req/s Poisson")
    rows = [
        ("engine", f"{engine_cfg.model} x{engine_cfg.models}, {engine_cfg.allocator} KV (block "
                   f"{engine_cfg.block_size}), batch {engine_cfg.max_num_seqs}, budget "
                   f"{engine_cfg.max_num_batched_tokens}, chunked prefill "
                   f"{'on' if engine_cfg.enable_chunked_prefill else 'off'}, {engine_cfg.policy}"),
        ("workload", f"{load}, prompt {workload_cfg.prompt_len}, output {workload_cfg.output_len}, "
                     f"{workload_cfg.duration:g} s"),
        ("requests", f"{f['requests_finished']} finished of {f['requests_submitted']}"),
        ("throughput", f"{f['throughput_tokens_per_s']:.1f} tokens/s"),
        ("TTFT p50 / p99", f"{_ms(f['ttft_p50_s'])} / {_ms(f['ttft_p99_s'])}"),
        ("TPOT p50 / p99", f"{_ms(f['tpot_p50_s'])} / {_ms(f['tpot_p99_s'])}"),
        ("latency p50 / p99", f"{_ms(f['latency_p50_s'])} / {_ms(f['latency_p99_s'])}"),
        ("preemptions", str(f["preemptions"])),
        ("KV waste", f"{f['kv_waste_ratio']:.1%} of reserved slots hold no token"),
        ("engine busy", f"{f['engine_busy_ratio']:.0%}"),
    ]
    if f.get("model_loads"):
        rows.append(("model loads", f"{f['model_loads']}, {f['model_load_seconds_mean']:.2f} s "
                                    f"mean / {f['model_load_seconds_max']:.2f} s max, "
                                    f"{f['model_load_bytes'] / 1e6:.0f} MB read from storage"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
