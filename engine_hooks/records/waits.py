"""Why the scheduler left a request waiting in a step (torch-free: readers of timelines import
it)."""

NO_FREE_BLOCKS = "no_free_blocks"   # the KV cache had no block for it
TOKEN_BUDGET = "token_budget"       # the step's token budget was spent
MAX_NUM_SEQS = "max_num_seqs"       # the batch was full
MODEL_LOADING = "model_loading"     # its model is not resident yet
PREEMPTED = "preempted"             # it lost its KV blocks to make room, and waits to run again
