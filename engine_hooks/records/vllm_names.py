"""vLLM's vocabulary, written once: its Prometheus families and its per-request `llm_request` span
with the `gen_ai.*` attributes it carries (and the GenAI conventions' names our own spans use). The
bundled engine's vLLM face publishes them, agent/sources reads them back, agent/tracing names its
spans with them; the real captures (tests/fixtures/real) are the independent check that they are
vLLM's.

A counter's family is named without its `_total`, as prometheus_client registers it; the exposition
(and so the reader) has `total_name(name)`.
"""

# --- Prometheus families (vLLM V1) ----------------------------------------------------------------
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
NUM_REQUESTS_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
GPU_CACHE_USAGE_PERC = "vllm:gpu_cache_usage_perc"                # its name before 0.10
CACHE_CONFIG_INFO = "vllm:cache_config_info"
LORA_REQUESTS_INFO = "vllm:lora_requests_info"
NUM_PREEMPTIONS = "vllm:num_preemptions"                          # counters from here ...
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
GPU_PREFIX_CACHE_QUERIES = "vllm:gpu_prefix_cache_queries"        # its name before 0.10
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
GPU_PREFIX_CACHE_HITS = "vllm:gpu_prefix_cache_hits"              # its name before 0.10
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"                          # ... to here
# speculative decoding's counters (V1), read only: the bundled engine does not speculate
SPEC_DECODE_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_DECODE_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"              # histograms from here ...
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
REQUEST_PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"
# a histogram whose name ends in _total
ITERATION_TOKENS = "vllm:iteration_tokens_total"
TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY_SECONDS = "vllm:inter_token_latency_seconds"
# inter-token latency before 0.10
TIME_PER_OUTPUT_TOKEN_SECONDS = "vllm:time_per_output_token_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS = "vllm:request_time_per_output_token_seconds"
E2E_REQUEST_LATENCY_SECONDS = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME_SECONDS = "vllm:request_queue_time_seconds"
REQUEST_INFERENCE_TIME_SECONDS = "vllm:request_inference_time_seconds"
REQUEST_PREFILL_TIME_SECONDS = "vllm:request_prefill_time_seconds"
REQUEST_DECODE_TIME_SECONDS = "vllm:request_decode_time_seconds"  # ... to here
# families only vLLM's V0 engine published (V1 dropped swapping and the CPU cache): how V0 is told
# apart
NUM_REQUESTS_SWAPPED = "vllm:num_requests_swapped"
CPU_CACHE_USAGE_PERC = "vllm:cpu_cache_usage_perc"
GPU_PREFIX_CACHE_HIT_RATE = "vllm:gpu_prefix_cache_hit_rate"


def total_name(counter: str) -> str:
    """A counter family's sample name in the exposition."""
    return counter + "_total"


# --- the llm_request span -------------------------------------------------------------------------
LLM_REQUEST = "llm_request"
REQUEST_ID = "gen_ai.request.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
# vLLM's; the conventions now say input_tokens
USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
# vLLM's; the conventions now say output_tokens
USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
MAX_TOKENS = "gen_ai.request.max_tokens"
TEMPERATURE = "gen_ai.request.temperature"
REQUEST_N = "gen_ai.request.n"
TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
TIME_IN_MODEL_PREFILL = "gen_ai.latency.time_in_model_prefill"
TIME_IN_MODEL_DECODE = "gen_ai.latency.time_in_model_decode"
TIME_IN_MODEL_INFERENCE = "gen_ai.latency.time_in_model_inference"
E2E = "gen_ai.latency.e2e"
FINISH_REASONS = "gen_ai.response.finish_reasons"
# the GenAI conventions' names for the operation and who serves it (gen_ai.system: what older
# backends read)
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
