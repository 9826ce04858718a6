"""KV cache metrics: capacity and use of blocks, fragmentation, access efficiency, read bandwidth."""

from __future__ import annotations

from stagelens.metrics.families import Scrape


def collect(out: Scrape, frame, _diagnosis) -> None:
    engine = frame.engine if frame else None
    if engine is None:
        return
    config, usage, kv, counters = engine.engine, engine.usage, engine.window.kv, engine.counters
    out.gauge("stagelens_kv_cache_capacity_bytes", "Bytes of device memory given to the KV cache.",
              config.kv_cache_bytes)
    out.gauge("stagelens_kv_block_size_tokens", "Tokens per KV block (--block-size).", config.block_size)
    if usage is not None:
        total, used = usage.num_blocks, usage.used_blocks
        known = total is not None and used is not None
        out.gauge("stagelens_kv_cache_blocks", "KV blocks in the cache.", total)
        out.gauge("stagelens_kv_cache_used_blocks", "KV blocks held by requests.", used)
        out.gauge("stagelens_kv_cache_free_blocks", "KV blocks free.", total - used if known else None)
        out.gauge("stagelens_kv_cache_unusable_free_blocks",
                  "Free KV blocks no request can use (contiguous extents too short).", usage.unusable_free_blocks)
        out.gauge("stagelens_kv_cache_largest_free_run_blocks", "The longest run of contiguous free KV blocks.",
                  usage.largest_free_run)
        out.gauge("stagelens_kv_cache_usage_ratio", "Share of KV blocks held by requests.",
                  used / total if known and total else None)
    out.gauge("stagelens_kv_fragmentation_ratio",
              "KV slots allocated but holding no token (plus unusable free memory) / slots allocated, over the window.",
              kv.fragmentation_ratio)
    out.gauge("stagelens_kv_access_efficiency_ratio",
              "Useful KV bytes read by attention / KV bytes actually moved, over the window.",
              kv.access_efficiency)
    out.gauge("stagelens_kv_read_bandwidth_bytes_per_second",
              "KV bytes moved per second of attention, over the window's decode steps.",
              kv.read_bandwidth_bytes_per_s)
    out.gauge("stagelens_kv_effective_bandwidth_ratio",
              "Useful KV bytes per second / what an ideal contiguous layout achieves for the same batch on this "
              "device, over the window's decode steps.", kv.effective_bandwidth_ratio)
    out.gauge("stagelens_kv_bandwidth_swing_ratio",
              "Coefficient of variation of decode-step KV read bandwidth over the window.",
              kv.bandwidth_swing_cv)
    out.gauge("stagelens_kv_gathered_ratio", "Share of moved KV bytes read by gathers over non-contiguous blocks.",
              kv.gathered_share)
    out.gauge("stagelens_kv_block_runs_per_sequence", "Contiguous block runs per sequence read, over the window.",
              kv.block_runs_per_sequence)
    out.gauge("stagelens_kv_attention_step_ratio", "Share of step time spent in attention, over the window.",
              kv.attention_share_of_step)
    out.counter("stagelens_kv_useful_bytes_total", "KV bytes attention needed.", counters.kv_useful_bytes_total)
    out.counter("stagelens_kv_moved_bytes_total", "KV bytes attention moved.", counters.kv_moved_bytes_total)
    out.counter("stagelens_kv_gathered_bytes_total", "KV bytes moved by gathers.", counters.kv_gathered_bytes_total)
    out.counter("stagelens_kv_attention_seconds_total", "Seconds spent in attention.", counters.attention_seconds_total)
    out.gauge("stagelens_kv_blocks_stored", "KV blocks the engine's KV events said were stored, over the window.",
              kv.blocks_stored)
    out.gauge("stagelens_kv_blocks_removed", "KV blocks the engine's KV events said were removed, over the window.",
              kv.blocks_removed)
    out.gauge("stagelens_kv_blocks_restored", "KV blocks stored again soon after their removal (KV recomputed), "
              "over the window, from the engine's KV events.", kv.blocks_restored)
    out.gauge("stagelens_kv_block_lifetime_p50_seconds", "Median store-to-removal time of the KV blocks removed in "
              "the window, from the engine's KV events.", kv.block_lifetime_p50_s)
