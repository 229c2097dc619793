"""The GPT: names, counts and initialisation as GPT-2's; causal; the key-value cache changes
nothing; a block and the whole model equal a from-first-principles port of OpenAI's GPT-2 code."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import decoding
from course_lib.gpt import (
    GPT,
    GPTConfig,
    KVCache,
    bits_per_byte,
    from_gpt2_state_dict,
    gpt_params,
    lm_loss,
    to_gpt2_state_dict,
)

pytestmark = pytest.mark.ch04

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TINY = GPTConfig(vocab_size=37, block_size=16, n_layer=2, n_head=4, n_embd=32)
# GPT-2 small's shapes (12 heads, MLP 4d, tied output, biases, eps 1e-5) at a tiny size.
SMALL_LIKE = GPTConfig(vocab_size=101, block_size=32, n_layer=2, n_head=12, n_embd=96)


def _randomised(config: GPTConfig, seed: int = 0, dtype: torch.dtype = torch.float64) -> GPT:
    """A model whose every parameter (biases, LayerNorm gains too) is random and non-trivial."""
    torch.manual_seed(seed)
    model = GPT(config).to(dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    return model


# --- names, counts, initialisation ------------------------------------------------------------

def test_parameter_names_are_gpt2_checkpoint_names() -> None:
    names = set(GPT(GPTConfig(vocab_size=7, block_size=4, n_layer=1, n_head=1, n_embd=4))
                .state_dict())
    block = [f"transformer.h.0.{m}.{p}" for m in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2",
                                                   "mlp.c_fc", "mlp.c_proj")
             for p in ("weight", "bias")]
    assert names == {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                     "transformer.ln_f.bias", "lm_head.weight", *block}


@pytest.mark.parametrize("config", [TINY, SMALL_LIKE, GPTConfig(vocab_size=5, block_size=3,
                                                                n_layer=3, n_head=2, n_embd=8,
                                                                bias=False)])
def test_parameter_count_equals_the_formula(config: GPTConfig) -> None:
    model = GPT(config)
    assert gpt_params(config)["total"] == sum(p.numel() for p in model.parameters())
    assert model.lm_head.weight is model.transformer.wte.weight  # tied: counted once


@pytest.mark.parametrize(("config", "published"), [
    (GPTConfig(), 124_439_808),                                    # GPT-2 small
    (GPTConfig(n_layer=24, n_head=16, n_embd=1024), 354_823_168),  # GPT-2 medium
])
def test_gpt2_sizes_built_on_the_meta_device(config: GPTConfig, published: int) -> None:
    with torch.device("meta"):  # shapes only: no memory, no time
        model = GPT(config)
    assert sum(p.numel() for p in model.parameters()) == gpt_params(config)["total"] == published


def test_initialisation_is_gpt2s() -> None:
    config = GPTConfig(vocab_size=500, block_size=256, n_layer=8, n_head=4, n_embd=128)
    torch.manual_seed(0)
    params = dict(GPT(config).named_parameters())
    assert params["transformer.wte.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    assert params["transformer.wpe.weight"].std().item() == pytest.approx(0.01, rel=0.05)
    assert params["transformer.h.3.mlp.c_fc.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    scaled = 0.02 / math.sqrt(2 * config.n_layer)
    for name in ("transformer.h.0.attn.c_proj.weight", "transformer.h.7.mlp.c_proj.weight"):
        assert params[name].std().item() == pytest.approx(scaled, rel=0.05), name
    assert all(p.abs().max() == 0 for n, p in params.items() if n.endswith("bias")
               and "ln" not in n)
    assert bool((params["transformer.h.0.ln_1.weight"] == 1).all())


# --- behaviour --------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_causal_a_future_token_never_changes_earlier_logits(device: str) -> None:
    model = _randomised(TINY).to(device)
    x = torch.randint(TINY.vocab_size, (2, 10), device=device)
    y = x.clone()
    y[:, 6] = (y[:, 6] + 1) % TINY.vocab_size
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=1e-12)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-3


def test_reference_and_fast_attention_paths_agree() -> None:
    fast = _randomised(TINY)
    ref = GPT(GPTConfig(**{**TINY.__dict__, "attn_impl": "reference"})).double().eval()
    ref.load_state_dict(fast.state_dict())
    x = torch.randint(TINY.vocab_size, (3, 12))
    torch.testing.assert_close(fast(x), ref(x), rtol=0, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_kv_cache_in_chunks_equals_the_whole_prefix(device: str) -> None:
    model = _randomised(TINY).to(device)
    x = torch.randint(TINY.vocab_size, (2, 13), device=device)
    full = model(x)
    cache = KVCache(TINY.n_layer)
    parts = [model(x[:, a:b], cache) for a, b in ((0, 5), (5, 8), (8, 9), (9, 13))]
    assert len(cache) == 13
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-10)


def test_cached_generation_equals_recomputing_the_prefix_at_every_step() -> None:
    model = _randomised(TINY)
    cached = model.cached_step()
    tokens = torch.randint(TINY.vocab_size, (3, 2))
    for _ in range(TINY.block_size + 4):  # past block_size: both crop / recompute
        with_cache, without = cached(tokens), model.step(tokens)
        torch.testing.assert_close(with_cache, without, rtol=0, atol=1e-10)
        tokens = torch.cat([tokens, with_cache.argmax(-1, keepdim=True)], dim=1)


def test_decoders_give_the_same_output_with_and_without_the_cache() -> None:
    model = _randomised(SMALL_LIKE)
    prompt = torch.randint(SMALL_LIKE.vocab_size, (2, 3))
    greedy = decoding.greedy_decode(model.step, prompt, 12)
    assert torch.equal(decoding.greedy_decode(model.cached_step(), prompt, 12), greedy)
    # Beam search reorders and duplicates rows: the cache follows them.
    a = decoding.beam_search(model.step, prompt[:1], 4, 10, eos_id=0)
    b = decoding.beam_search(model.cached_step(), prompt[:1], 4, 10, eos_id=0)
    assert torch.equal(a[0], b[0])
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=1e-10)


def test_a_cached_step_starts_over_on_an_unrelated_prefix() -> None:
    model = _randomised(TINY)
    step = model.cached_step()
    step(torch.tensor([[1, 2, 3]]))
    other = torch.tensor([[4, 5, 6, 7]])  # not an extension of [1, 2, 3]
    torch.testing.assert_close(step(other), model.step(other), rtol=0, atol=1e-10)


def test_too_long_input_and_bad_ids_are_clear_errors() -> None:
    model = GPT(TINY)
    with pytest.raises(ValueError, match="exceed block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="not divisible by n_head"):
        GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=3, n_embd=8))


def test_loss_and_bits_per_byte_by_hand() -> None:
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.125, 0.125, 0.75]]],
                                    dtype=torch.float64))
    loss = lm_loss(logits, torch.tensor([[0, 2]]))
    assert loss.item() == pytest.approx((math.log(2) + math.log(4 / 3)) / 2)
    assert bits_per_byte(2 * math.log(2), n_tokens=3, n_bytes=6) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="do not match"):
        lm_loss(logits, torch.tensor([[0, 2, 1]]))


# --- peer: a from-first-principles port of OpenAI's gpt-2/src/model.py ------------------------

def _norm(x, g, b, eps=1e-5):
    u = x.mean(-1, keepdim=True)
    s = ((x - u) ** 2).mean(-1, keepdim=True)
    return (x - u) / torch.sqrt(s + eps) * g + b


def _conv1d(x, w, b):  # GPT-2's Conv1D: weights (in, out)
    return x @ w + b


def _gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _attn(x, sd, prefix, n_head):
    B, T, d = x.shape
    c = _conv1d(x, sd[prefix + "attn.c_attn.weight"], sd[prefix + "attn.c_attn.bias"])
    q, k, v = c.split(d, dim=-1)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(B, T, n_head, d // n_head).permute(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    w = q @ k.transpose(-1, -2) / math.sqrt(d // n_head)
    b = torch.tril(torch.ones(T, T, dtype=w.dtype))
    w = w * b - 1e10 * (1 - b)  # OpenAI's mask_attn_weights
    a = torch.softmax(w, dim=-1) @ v
    a = a.permute(0, 2, 1, 3).reshape(B, T, d)
    return _conv1d(a, sd[prefix + "attn.c_proj.weight"], sd[prefix + "attn.c_proj.bias"])


def _block(x, sd, prefix, n_head):
    x = x + _attn(_norm(x, sd[prefix + "ln_1.weight"], sd[prefix + "ln_1.bias"]), sd, prefix,
                  n_head)
    h = _norm(x, sd[prefix + "ln_2.weight"], sd[prefix + "ln_2.bias"])
    h = _gelu(_conv1d(h, sd[prefix + "mlp.c_fc.weight"], sd[prefix + "mlp.c_fc.bias"]))
    return x + _conv1d(h, sd[prefix + "mlp.c_proj.weight"], sd[prefix + "mlp.c_proj.bias"])


def _gpt2_logits(idx, sd, config):
    h = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:idx.shape[1]]
    for i in range(config.n_layer):
        h = _block(h, sd, f"transformer.h.{i}.", config.n_head)
    h = _norm(h, sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"])
    return h @ sd["transformer.wte.weight"].t()


def test_a_block_equals_gpt2s_computation_from_first_principles() -> None:
    model = _randomised(SMALL_LIKE, seed=1)
    sd = to_gpt2_state_dict(model)
    x = torch.randn(2, 9, SMALL_LIKE.n_embd, dtype=torch.float64)
    for i in range(SMALL_LIKE.n_layer):
        ours = model.transformer.h[i](x)
        theirs = _block(x, sd, f"transformer.h.{i}.", SMALL_LIKE.n_head)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-10)


def test_the_model_equals_gpt2s_computation_and_loads_its_checkpoint_layout() -> None:
    model = _randomised(SMALL_LIKE, seed=2)
    sd = to_gpt2_state_dict(model)
    idx = torch.randint(SMALL_LIKE.vocab_size, (2, 20))
    torch.testing.assert_close(model(idx), _gpt2_logits(idx, sd, SMALL_LIKE), rtol=0, atol=1e-9)
    # A checkpoint in GPT-2's layout (Conv1D weights (in, out), mask buffers) loads back.
    sd["transformer.h.0.attn.bias"] = torch.ones(1, 1, 32, 32)
    loaded = from_gpt2_state_dict(sd, SMALL_LIKE).double().eval()
    torch.testing.assert_close(loaded(idx), model(idx), rtol=0, atol=1e-10)
    del sd["transformer.h.1.mlp.c_fc.bias"]
    with pytest.raises(ValueError, match="missing .*h.1.mlp.c_fc.bias"):
        from_gpt2_state_dict(sd, SMALL_LIKE)


def test_equals_hugging_face_gpt2() -> None:
    import transformers  # a development requirement (requirements-dev.txt), not course_lib's
    hf_config = transformers.GPT2Config(
        vocab_size=SMALL_LIKE.vocab_size, n_positions=SMALL_LIKE.block_size,
        n_embd=SMALL_LIKE.n_embd, n_layer=SMALL_LIKE.n_layer, n_head=SMALL_LIKE.n_head,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
        activation_function="gelu_new")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_config).double().eval()
    ours = from_gpt2_state_dict(hf.state_dict(), SMALL_LIKE).double().eval()
    idx = torch.randint(SMALL_LIKE.vocab_size, (2, 20))
    torch.testing.assert_close(ours(idx), hf(idx).logits, rtol=0, atol=1e-9)


def test_bits_per_byte_loss_by_hand_and_against_the_conversion() -> None:
    from course_lib.gpt import bits_per_byte_loss
    # Uniform over 4 tokens: 2 bits per token; the targets cover 1 + 3 = 4 bytes for 2 tokens.
    got = bits_per_byte_loss(torch.zeros(1, 2, 4), torch.tensor([[0, 3]]),
                             torch.tensor([1, 1, 1, 3]))
    assert abs(got.item() - 1.0) < 1e-6
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    targets = torch.randint(7, (3, 5), generator=g)
    lengths = torch.randint(1, 5, (7,), generator=g)
    expected = bits_per_byte(lm_loss(logits, targets).item(), 15, int(lengths[targets].sum()))
    assert abs(bits_per_byte_loss(logits, targets, lengths).item() - expected) < 1e-12
    assert bits_per_byte_loss(logits, targets, lengths).dtype == torch.float64
    with pytest.raises(ValueError, match="do not fit"):
        bits_per_byte_loss(logits, targets, lengths[:5])
