"""The modern decoder (course_lib.llama): known answers, properties, and Hugging Face as the peer.

Hugging Face's ``LlamaForCausalLM``, ``MistralForCausalLM`` (sliding window) and
``MixtralForCausalLM`` (sparse MoE) are built from tiny configs (no download), their state dict is
loaded into ours with a plain ``load_state_dict``, and the logits agree to 1e-5 in float32 and 1e-10
in float64. Hugging Face computes RMSNorm, the rotary table and Mixtral's router softmax in float32
whatever the model's dtype (a downcast in float64), so the float64 comparison patches those three
to compute in the model's dtype: what is compared is then the architecture, not float32 rounding.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import llama
from course_lib.llama import KVCache, LlamaConfig, LlamaForCausalLM, generate

transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama  # noqa: E402
from transformers.models.mistral import modeling_mistral  # noqa: E402
from transformers.models.mixtral import modeling_mixtral  # noqa: E402

pytestmark = pytest.mark.ch07

V = 37


def _hf_config(kind: str, window: int | None = None):
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, rope_theta=10000.0, attn_implementation="sdpa",
                  tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None)
    if kind == "llama":
        return transformers.LlamaConfig(**common)
    if kind == "mistral":
        return transformers.MistralConfig(**common, sliding_window=window)
    return transformers.MixtralConfig(**common, sliding_window=window, num_local_experts=4,
                                      experts_implementation="eager",
                                      num_experts_per_tok=2)


def _ours_config(kind: str, window: int | None = None) -> LlamaConfig:
    return LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                       rope_theta=10000.0, sliding_window=window,
                       num_local_experts=4 if kind == "mixtral" else 0, num_experts_per_tok=2)


HF_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
              "mixtral": "MixtralForCausalLM"}


def _pair(kind: str, dtype: torch.dtype, window: int | None = None, seed: int = 0):
    torch.manual_seed(seed)
    hf = getattr(transformers, HF_CLASSES[kind])(_hf_config(kind, window)).eval()
    with torch.no_grad():  # weights large enough that the logits are of order one
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 1 / math.sqrt(p.shape[-1]))
    hf = hf.to(dtype)
    ours = LlamaForCausalLM(_ours_config(kind, window)).to(dtype).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)  # a plain copy: the names match
    return hf, ours


def _rms_forward(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _rotary_forward(self, x, position_ids):
    dim = self.inv_freq.shape[0] * 2
    inv = self.config.rope_parameters["rope_theta"] ** (
        -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = position_ids[..., None].double() * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _router_forward(self, hidden_states):
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(hidden_states, self.weight)
    top, idx = logits.softmax(-1).topk(self.top_k, dim=-1)
    return logits, top / top.sum(-1, keepdim=True), idx


@pytest.fixture
def hf_float64(monkeypatch):
    """Hugging Face's float32 islands computed in the model's dtype (see the module docstring)."""
    for mod, prefix in ((modeling_llama, "Llama"), (modeling_mistral, "Mistral"),
                        (modeling_mixtral, "Mixtral")):
        monkeypatch.setattr(getattr(mod, f"{prefix}RMSNorm"), "forward", _rms_forward)
        monkeypatch.setattr(getattr(mod, f"{prefix}RotaryEmbedding"), "forward", _rotary_forward)
    monkeypatch.setattr(modeling_mixtral.MixtralTopKRouter, "forward", _router_forward)


def logits_difference(kind: str, dtype: torch.dtype, window: int | None = None) -> float:
    hf, ours = _pair(kind, dtype, window)
    ids = torch.randint(V, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        return float((hf(ids).logits - ours(ids)).abs().max())


CASES = [("llama", None), ("mistral", 4), ("mixtral", None), ("mixtral", 5)]


@pytest.mark.parametrize("kind,window", CASES)
def test_same_logits_as_hugging_face_float32(kind, window):
    assert logits_difference(kind, torch.float32, window) < 1e-5


@pytest.mark.parametrize("kind,window", CASES)
def test_same_logits_as_hugging_face_float64(kind, window, hf_float64):
    assert logits_difference(kind, torch.float64, window) < 1e-10


@pytest.mark.parametrize("kind,window", [("llama", None), ("mistral", 4), ("mixtral", 5)])
def test_greedy_generation_equals_hugging_face_with_and_without_cache(kind, window):
    hf, ours = _pair(kind, torch.float64, window, seed=1)
    prompt = torch.randint(V, (1, 7), generator=torch.Generator().manual_seed(4))
    expected = hf.generate(prompt, max_new_tokens=15, do_sample=False, use_cache=True)
    assert torch.equal(hf.generate(prompt, max_new_tokens=15, do_sample=False, use_cache=False),
                       expected)
    assert torch.equal(generate(ours, prompt, 15, use_cache=True), expected)  # rolling if window
    assert torch.equal(generate(ours, prompt, 15, use_cache=False), expected)


def test_rolling_cache_memory_is_constant():
    model = LlamaForCausalLM(LlamaConfig(vocab_size=11, hidden_size=16, intermediate_size=32,
                                         num_attention_heads=2, num_key_value_heads=1,
                                         sliding_window=4))
    cache = model.new_cache()
    sizes = []
    for t in range(10):
        model(torch.tensor([[t % 11]]), cache)
        sizes.append(cache.nbytes())
    assert sizes[3:] == [sizes[3]] * 7 and sizes[0] < sizes[3]


def test_cache_bytes_formula_matches_the_cache():
    cfg = LlamaConfig(vocab_size=11, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(cfg)
    cache = model.new_cache()
    model(torch.randint(11, (2, 9)), cache)
    assert cache.nbytes() == llama.kv_cache_bytes(cfg, 9, batch_size=2, bytes_per_value=4)


def test_llama3_8b_cache_bytes():
    assert llama.kv_cache_bytes(llama.LLAMA3_8B, 8192) == 8192 * 131072  # 1 GiB
    assert llama.kv_cache_bytes(llama.LLAMA3_8B, 131072) == 16 * 2**30


def test_repeat_kv_order_is_hugging_faces():
    x = torch.randn(2, 3, 5, 4)
    assert torch.equal(llama.repeat_kv(x, 2), modeling_llama.repeat_kv(x, 2))


def test_rmsnorm_is_layernorm_on_centred_inputs():
    x = torch.randn(4, 16, dtype=torch.float64)
    x = x - x.mean(-1, keepdim=True)
    ln = torch.nn.functional.layer_norm(x, (16,), eps=1e-6)
    assert torch.allclose(llama.RMSNorm(16, eps=1e-6).double()(x), ln)


def test_swiglu_width_keeps_the_parameters():
    d = 96
    w = llama.swiglu_width(d)
    assert abs(3 * d * w - 2 * d * 4 * d) <= 3 * d


def test_sliding_window_receptive_field():
    """A token further back than L (W - 1) positions cannot change the last position's logits."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=11, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, sliding_window=4)
    model = LlamaForCausalLM(cfg).double()
    ids = torch.randint(11, (1, 20))
    base = model(ids)[0, -1]
    reach = cfg.num_hidden_layers * (cfg.sliding_window - 1)
    for back in range(1, 20):
        other = ids.clone()
        other[0, -1 - back] = (other[0, -1 - back] + 1) % 11
        changed = bool((model(other)[0, -1] - base).abs().max() > 0)
        assert changed == (back <= reach), back


def test_learned_and_sinusoidal_switches_run_with_a_cache():
    for position in ("learned", "sinusoidal"):
        cfg = LlamaConfig(vocab_size=11, hidden_size=16, intermediate_size=32, position=position,
                          norm="layer", mlp="gelu", max_position_embeddings=16)
        model = LlamaForCausalLM(cfg).double()
        ids = torch.randint(11, (1, 6))
        cache = KVCache(cfg.num_hidden_layers)
        steps = torch.stack([model(ids[:, t:t + 1], cache)[0, -1] for t in range(6)])
        assert torch.allclose(steps, model(ids)[0], atol=1e-12)


def test_bad_group_count_is_refused():
    with pytest.raises(ValueError, match="must divide"):
        LlamaForCausalLM(LlamaConfig(num_attention_heads=4, num_key_value_heads=3))


def test_shipped_runs_are_the_scripts_configuration():
    """The ladder's shipped runs (course_lib/data/modern_decoder_runs.json.xz) were made with the
    configurations that scripts/modern_decoder_runs.py defines now."""
    import importlib.util
    from dataclasses import asdict
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "modern_decoder_runs.py"
    spec = importlib.util.spec_from_file_location("modern_decoder_runs", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    runs = llama.load_runs()
    configs = {**script.RUNGS, **script.EXTRA}
    assert runs["rungs"] == list(script.RUNGS) and runs["seeds"] == list(script.SEEDS)
    assert len(runs["runs"]) == len(script.RUNGS) * len(script.SEEDS) + 4
    for run in runs["runs"]:
        assert run["config"] == asdict(configs[run["name"]]), run["name"]
        assert run["steps"] == script.STEPS
    long = runs["long"]  # the long ladder (--long): every rung and two sinusoidal seeds
    assert long["steps"] == script.LONG_STEPS and long["eval_every"] == script.LONG_EVAL_EVERY
    assert [(r["name"], r["seed"]) for r in long["runs"]] == \
        [(n, s) for n in script.RUNGS for s in script.SEEDS] + \
        [("sinusoidal", s) for s in script.SEEDS[:2]]
    for run in long["runs"]:
        assert run["config"] == asdict(configs[run["name"]]), run["name"]
        assert run["steps"] == script.LONG_STEPS
        assert len(run["loss_by_position"]) == max(script.EVAL_CONTEXTS)
    equal = runs["equal_time"]  # the equal-time ladder: steps = budget / the measured step cost
    assert equal["steps"] == script.equal_steps(equal["cost"]["cost"], equal["budget"])
    assert set(equal["cost"]["cost"]) == {name for name, _ in script.EQUAL_JOBS}
    for name, rounds in equal["cost"]["rounds"].items():  # the cost is the median of its rounds
        assert equal["cost"]["cost"][name] == sorted(rounds)[len(rounds) // 2]
    assert [(r["name"], r["seed"]) for r in equal["runs"]] == list(script.EQUAL_JOBS)
    for run in equal["runs"]:
        assert run["config"] == asdict(configs[run["name"]]), run["name"]
        assert run["steps"] == equal["steps"][run["name"]]
        assert len(run["curve"]) == script.EQUAL_POINTS and run["curve"][-1][0] == run["steps"]
        assert len(run["loss_by_position"]) == max(script.EVAL_CONTEXTS)
