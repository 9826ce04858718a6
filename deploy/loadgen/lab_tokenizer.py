"""Writes a Hugging Face tokenizer directory that counts tokens as the lab's models do: one token
per UTF-8 byte.

Load generators (guidellm, genai-perf, vLLM's `bench serve`) size their synthetic prompts with a
tokenizer they load by name, and the lab's synthetic models have none. Give them this directory
instead:

    python deploy/loadgen/lab_tokenizer.py ./lab-tokenizer
    guidellm run --backend kind=openai_http,target=http://127.0.0.1:8000,model=model-0 \\
        --tokenizer kind=hf_auto,model=./lab-tokenizer --data
        kind=synthetic_text,prompt_tokens=256,output_tokens=64 ...

Its token ids are not the lab's (the lab adds 1 to each byte), only its counts are; a chat prompt
also carries the lab's template (docs/engines.md). Needs `tokenizers` and `transformers`, which
those tools install.
"""

from __future__ import annotations

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A BPE with the 256 byte symbols and no merges: every byte is one token, every text decodes
    back."""
    symbols = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={symbol: i for i, symbol in enumerate(symbols)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, model_max_length=1 << 20)


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python deploy/loadgen/lab_tokenizer.py DIRECTORY")
    tokenizer = byte_tokenizer()
    text = "héllo, lab"
    # a tokenizers release that merges anyway
    if len(tokenizer(text)["input_ids"]) != len(text.encode("utf-8")):
        sys.exit(f"this tokenizers release does not count {text!r} as its {len(text.encode())} bytes")
    tokenizer.save_pretrained(sys.argv[1])
    print(f"a byte tokenizer (one token per UTF-8 byte) in {sys.argv[1]}")


if __name__ == "__main__":
    main()
