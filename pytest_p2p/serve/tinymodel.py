"""Write a tiny Llama model directory that vLLM can serve with ``--load-format dummy``.

P2P regression tests need a *model shape* (hidden size, layers, heads: they decide the
all-reduce sizes), not trained weights. With ``--load-format dummy`` vLLM fills random
weights, so a model directory needs only ``config.json`` and a tokenizer. This module
makes one on the spot — the tokenizer is a byte-level BPE trained in a second on a
built-in corpus with the ``tokenizers`` package — so no weights or binary files ever
have to be downloaded or committed, and an offline GPU runner can serve it.

    python -m pytest_p2p.serve.tinymodel DIR [--hidden 2048] [--layers 8] [--heads 16] [--kv-heads 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ServerError
from ..util import atomic_write_json

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + "
    "'\\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif "
    "message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def _corpus() -> list[str]:
    """Deterministic text: enough distinct byte pairs to fill a few thousand BPE merges."""
    words = ("peer access link nvlink pcie generation width lane retimer cable driver kernel module nccl "
             "channel transport cumem ipc shm socket ring tree all reduce gather scatter tensor parallel "
             "throughput latency token request stream server model weight cache prefill decode batch "
             "graph capture replay kernel launch stream event energy joule watt temperature clock").split()
    lines = []
    for i in range(4000):
        w = [words[(i * 7 + k * 13) % len(words)] for k in range(12)]
        lines.append(" ".join(w) + f" {i} {i * 31 % 997} {chr(65 + i % 26)}{chr(97 + i * 3 % 26)}.")
    return lines


def write_tiny_model(target: str | Path, *, hidden: int = 2048, layers: int = 8, heads: int = 16,
                     kv_heads: int = 8, intermediate: int | None = None, vocab: int = 8000,
                     max_positions: int = 4096) -> Path:
    """Create (or refresh) the model directory; returns its path."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    except ImportError:
        raise ServerError("writing a tiny model needs the 'tokenizers' package (it ships with vLLM and "
                          "transformers): pip install tokenizers") from None
    sizes = {"hidden": hidden, "layers": layers, "heads": heads, "kv_heads": kv_heads, "vocab": vocab,
             "max_positions": max_positions, "intermediate": 1 if intermediate is None else intermediate}
    bad = [f"{k} {x}" for k, x in sizes.items() if x < 1]
    if bad:
        raise ServerError(f"tiny model: sizes must be at least 1, got {', '.join(bad)}")
    if hidden % heads or heads % kv_heads:
        raise ServerError(f"tiny model: hidden {hidden} must divide by heads {heads}, heads by kv_heads {kv_heads}")
    out = Path(target)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.save(str(out / "tokenizer.json"))
    real_vocab = tok.get_vocab_size()
    ids = {name: tok.token_to_id(name) for name in SPECIALS}
    atomic_write_json(out / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": intermediate or int(hidden * 2.75), "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": hidden // heads,
        "max_position_embeddings": max_positions, "vocab_size": max(real_vocab, vocab), "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": False, "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"],
        "pad_token_id": ids["<pad>"], "torch_dtype": "bfloat16",
    })
    atomic_write_json(out / "generation_config.json", {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"],
                                                       "pad_token_id": ids["<pad>"], "do_sample": False})
    atomic_write_json(out / "special_tokens_map.json", {"bos_token": "<s>", "eos_token": "</s>",
                                                        "unk_token": "<unk>", "pad_token": "<pad>"})
    atomic_write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": max_positions, "chat_template": CHAT_TEMPLATE,
    })
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pytest_p2p.serve.tinymodel", description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8000)
    a = p.parse_args(argv)
    try:
        path = write_tiny_model(a.dir, hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                                vocab=a.vocab)
    except ServerError as exc:
        print(f"tinymodel: {exc}", file=sys.stderr)
        return 2
    print(f"tiny Llama (hidden {a.hidden}, {a.layers} layers, {a.heads} heads) written to {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
