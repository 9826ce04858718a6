"""Writes a tiny Llama that a real vLLM serves with random weights: a config and a tokenizer,
nothing downloaded.

The tests and `bench/accuracy.py --through real-vllm` start vLLM's CPU build on it:

    python deploy/vllm-cpu/tiny_model.py ./tiny-llama python -m vllm.entrypoints.openai.api_server
    --model ./tiny-llama --load-format dummy --enforce-eager ...

`--load-format dummy` fills the weights at random, so no weight file is needed. The tokenizer is the
lab's byte tokenizer (deploy/loadgen/lab_tokenizer.py: one token per UTF-8 byte), so a prompt of N
ASCII characters is N tokens and a test sets prompt lengths exactly; random weights end a reply at
any token, so requests ask `ignore_eos` to set output lengths too. Sized for a 2-core machine: two
layers, a 64-wide head.
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "loadgen"))
from lab_tokenizer import byte_tokenizer  # noqa: E402

MAX_MODEL_LEN = 4096


def llama_config(vocab_size: int) -> dict:
    """The smallest Llama vLLM's CPU attention takes: head size 64 (a supported size), two
    layers."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": vocab_size, "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64,
        "max_position_embeddings": MAX_MODEL_LEN, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": vocab_size - 2, "eos_token_id": vocab_size - 1,
    }


def write(directory: pathlib.Path) -> None:
    tokenizer = byte_tokenizer()
    tokenizer.add_special_tokens({"bos_token": "<s>", "eos_token": "</s>"})
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% "
                               "endfor %}<|assistant|>\n")
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    config = llama_config(len(tokenizer))
    (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}
    (directory / "generation_config.json").write_text(json.dumps(generation) + "\n")


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python deploy/vllm-cpu/tiny_model.py DIRECTORY")
    write(pathlib.Path(sys.argv[1]))
    print(f"a tiny random-weight Llama (config and byte tokenizer) in {sys.argv[1]}")


if __name__ == "__main__":
    main()
