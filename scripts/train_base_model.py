"""Train chapter 8's base model and ship it: ``course_lib/data/base_gpt.pt.xz`` (float16, xz).

Chapter 4's character-level GPT (2 layers, 4 heads, width 64, 83 characters) with a context of
128 characters, trained on the whole training split of the shipped Shakespeare corpus with
:data:`course_lib.finetune.BASE_RECIPE` (AdamW, warm-up then cosine decay, gradient clipping at
1, one thread). The file holds the recipe, the vocabulary, the weights in float16, and the
validation loss of the float16 weights on the recipe's fixed validation windows, which
``tests/test_finetune.py`` recomputes.

Run (about 4 minutes on one thread of a 2-core machine)::

    nice -n 10 .venv/bin/python scripts/train_base_model.py

``--steps`` and ``--out`` override the recipe's step count and the output (for smoke runs).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib import corpus, finetune, gpt, training


def train_base(recipe: finetune.BaseRecipe, log=print) -> tuple[gpt.GPT, list[str]]:
    """Train a base model with ``recipe``; return it (float32) and its vocabulary."""
    vocabulary = finetune.char_vocabulary()
    text = corpus.load_shakespeare("train")[:recipe.train_chars]
    ids = corpus.encode_chars(text, vocabulary)
    torch.manual_seed(recipe.seed)
    model = gpt.GPT(finetune.base_config(recipe, len(vocabulary)))
    g = torch.Generator().manual_seed(recipe.seed)

    def batches():
        while True:
            yield corpus.random_windows(ids, recipe.block_size, recipe.batch_size, g)

    config = training.TrainConfig(steps=recipe.steps, lr=recipe.lr,
                                  warmup_steps=recipe.warmup_steps, schedule="cosine",
                                  seed=recipe.seed, progress=False)
    history = training.train(model, batches(), lambda m, b: gpt.lm_loss(m(b[0]), b[1]), config)
    log(f"{recipe.steps} steps in {history.seconds:.1f} s; last training loss "
        f"{history.train_loss[-1]:.4f}")
    return model, vocabulary


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="override the recipe's steps")
    parser.add_argument("--out", type=Path, default=finetune.BASE_MODEL_PATH)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    recipe = finetune.BASE_RECIPE if args.steps is None else replace(finetune.BASE_RECIPE,
                                                                     steps=args.steps)
    print("command:", " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    print("recipe:", asdict(recipe))
    start = time.perf_counter()
    model, vocabulary = train_base(recipe)
    # The stated loss is that of the shipped float16 weights, loaded back.
    finetune.save_base_model(model, args.out, recipe, vocabulary, {"val_loss": 0.0})
    loaded, _ = finetune.load_base_model(path=args.out)
    val_loss = finetune.base_loss(loaded, finetune.validation_windows(recipe))
    finetune.save_base_model(model, args.out, recipe, vocabulary, {"val_loss": val_loss})
    print(f"validation loss {val_loss:.4f} nats per character (float16 weights); "
          f"{args.out} {args.out.stat().st_size:,} bytes; "
          f"total {time.perf_counter() - start:.1f} s")
    return val_loss


if __name__ == "__main__":
    main()
