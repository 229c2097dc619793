"""Supervised fine-tuning (course_lib.finetune): the shipped base model, the task, the loss."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F

from course_lib import corpus, finetune, gpt

pytestmark = pytest.mark.ch08


def test_the_shipped_base_model_is_the_scripts_recipe_and_has_its_stated_loss() -> None:
    saved = finetune.read_base_file()
    assert saved["recipe"] == asdict(finetune.BASE_RECIPE)
    assert saved["vocabulary"] == finetune.char_vocabulary()
    assert all(t.dtype == torch.float16 for t in saved["state_dict"].values())
    assert finetune.BASE_MODEL_PATH.stat().st_size < 1_000_000
    model, _ = finetune.load_base_model()
    assert model.config == finetune.base_config()
    loss = finetune.base_loss(model)
    assert loss == pytest.approx(saved["val_loss"], abs=1e-4)
    assert loss < 2.0  # well below the uniform log 83 = 4.42: a trained model


def test_word_problems_have_the_right_answers() -> None:
    vocab = finetune.char_vocabulary()
    for question, answer in finetune.word_problems(200, seed=3):
        words = question.replace(".", " ").replace("?", " ").split()
        # "Q: <A> has <n> <fruit> and <B> has <m> <fruit>  How many <fruit> does <name> have"
        owners = {(words[1], words[4]): int(words[3]), (words[6], words[9]): int(words[8])}
        asked = (words[-3], words[-5])
        assert asked in owners and answer == f"{owners[asked]}\n"
        assert words[4] != words[9] and words[1] != words[6]  # two people, two fruits
        corpus.encode_chars(question + answer, vocab)  # every character is in the vocabulary


def test_encode_pairs_marks_exactly_the_answer_targets() -> None:
    vocab = finetune.char_vocabulary()
    pairs = finetune.word_problems(5, seed=0)
    x, y, mask = finetune.encode_pairs(pairs, vocab)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row, (_, a) in enumerate(pairs):
        assert "".join(vocab[i] for i in y[row][mask[row]].tolist()) == a


def test_answer_only_loss_equals_cross_entropy_on_the_selected_tokens() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 5, generator=g, dtype=torch.float64)
    targets = torch.randint(5, (3, 6), generator=g)
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[0, 4:], mask[1, 1:], mask[2, 5] = True, True, True
    peer = F.cross_entropy(logits[mask], targets[mask])  # only the answer tokens, one mean
    torch.testing.assert_close(finetune.answer_only_loss(logits, targets, mask), peer,
                               rtol=1e-12, atol=1e-12)
    # with every token selected it is the language-model loss
    torch.testing.assert_close(finetune.answer_only_loss(logits, targets, torch.ones_like(mask)),
                               gpt.lm_loss(logits, targets), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="no token"):
        finetune.answer_only_loss(logits, targets, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="bool"):
        finetune.answer_only_loss(logits, targets, mask.int())
    with pytest.raises(ValueError, match="fit together"):
        finetune.answer_only_loss(logits, targets[:, :5], mask)


def test_answer_accuracy_of_a_model_that_knows_the_answers() -> None:
    """A stand-in model whose next character is read from the true answers scores 1."""
    vocab = finetune.char_vocabulary()
    pairs = finetune.word_problems(12, seed=1)
    table = {q: a for q, a in pairs}

    class Oracle(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))
            self.config = gpt.GPTConfig(vocab_size=len(vocab), block_size=256)

        def cached_step(self):
            def step(tokens):
                out = torch.zeros(len(tokens), len(vocab))
                for b, row in enumerate(tokens.tolist()):
                    text = "".join(vocab[i] for i in row)
                    q = text[:text.index("A: ") + 3]
                    done = len(text) - len(q)
                    answer = table[q] + "\n\n"
                    out[b, vocab.index(answer[done])] = 1.0
                return out
            return step

    assert finetune.answer_accuracy(Oracle(), pairs, vocab) == 1.0
    wrong = [(q, "99\n") for q, _ in pairs]
    assert finetune.answer_accuracy(Oracle(), wrong, vocab) == 0.0


def test_the_shipped_comparison_is_the_scripts_configuration() -> None:
    runs = finetune.load_runs()
    assert runs["config"] == json.loads(json.dumps(asdict(finetune.FINETUNE_CONFIG)))
    assert list(runs["methods"]) == finetune.method_names()
    full = runs["methods"]["full"]
    assert full["trainable"] == sum(p.numel() for p in finetune.load_base_model()[0].parameters())
    for name, rank in zip(finetune.method_names()[1:], finetune.FINETUNE_CONFIG.ranks):
        m = runs["methods"][name]
        # two blocks: c_attn (64 -> 192), c_proj (64 -> 64), c_fc (64 -> 256), c_proj (256 -> 64)
        assert m["trainable"] == 2 * rank * ((64 + 192) + (64 + 64) + (64 + 256) + (256 + 64))
        assert m["adam_bytes"] == 8 * m["trainable"]  # two float32 moments per parameter
    stated = finetune.read_base_file()["val_loss"]
    assert runs["base_loss_before"] == pytest.approx(stated, abs=1e-4)


def test_measure_costs_counts_what_trains() -> None:
    model, vocab = finetune.load_base_model()
    costs = finetune.measure_costs(model, vocab, steps=1)
    assert costs["full"]["trainable"] == 113_600 and costs["full"]["adam_bytes"] == 8 * 113_600
    assert costs["LoRA r=4"]["trainable"] == 8 * 1024
    assert all(c["ms_per_step"] > 0 for c in costs.values())
    assert all(p.requires_grad for p in model.parameters())  # the base model is left as it was


def _script(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scripts_run_and_write_files_the_loaders_read(tmp_path, capsys) -> None:
    """Smoke runs of scripts/train_base_model.py and scripts/finetune_runs.py (two steps)."""
    out = tmp_path / "base.pt.xz"
    loss = _script("train_base_model").main(["--steps", "2", "--out", str(out)])
    saved = finetune.read_base_file(out)
    assert saved["recipe"]["steps"] == 2 and saved["val_loss"] == pytest.approx(loss)
    model, _ = finetune.load_base_model(path=out)
    assert finetune.base_loss(model) == pytest.approx(loss, abs=1e-4)
    runs_out = tmp_path / "runs.json.xz"
    results = _script("finetune_runs").main(["--steps", "2", "--out", str(runs_out)])
    assert finetune.load_runs(runs_out)["methods"].keys() == results["methods"].keys()
    assert "command:" in capsys.readouterr().out


def test_the_shipped_forgetting_sweep_is_the_scripts_configuration() -> None:
    """fine_tuning_forgetting.json.xz: FORGETTING_CONFIG's runs, in order, on FINETUNE_CONFIG."""
    sweep = finetune.load_forgetting()
    assert sweep["config"] == json.loads(json.dumps(asdict(finetune.FORGETTING_CONFIG)))
    assert sweep["finetune_config"] == json.loads(json.dumps(asdict(finetune.FINETUNE_CONFIG)))
    runs = sweep["runs"]
    assert [r["index"] for r in runs] == list(range(len(finetune.FORGETTING_CONFIG.runs)))
    for r, (method, rank, lr, mix) in zip(runs, finetune.FORGETTING_CONFIG.runs):
        assert (r["method"], r["rank"], r["lr"], r["mix_windows"]) == (method, rank, lr, mix)
        assert 0.0 <= r["accuracy"] <= 1.0 and r["base_loss"] > 1.0


def test_mixing_text_in_keeps_the_question_batches_and_adds_the_text_loss() -> None:
    """Two steps with and without the pretraining text mixed in: the first answer-only loss is
    the same (same questions, same start), and the mixed run reports the answer-only part."""
    from dataclasses import replace

    model, vocab = finetune.load_base_model()
    config = replace(finetune.FINETUNE_CONFIG, steps=2, n_test=4)
    _, plain = finetune.finetune_method(model, vocab, config, rank=4)
    _, mixed = finetune.finetune_method(model, vocab, config, rank=4, mix_windows=2)
    assert len(mixed["train_loss"]) == 2
    assert mixed["train_loss"][0] == pytest.approx(plain["train_loss"][0], abs=1e-6)
