"""The model zoo: every config validates, covers the architecture families, and bad files are named."""

import json

import pytest

from solforge.errors import InputError
from solforge.extract.zoo import Arch, load_model_config, load_zoo


def test_zoo_has_40_models_across_families():
    zoo = load_zoo()
    assert len(zoo) >= 40
    archs = {c.arch for c in zoo}
    assert archs == set(Arch)
    assert any(c.mla for c in zoo) and any(c.moe and c.moe.n_group > 1 for c in zoo)
    for c in zoo:
        assert c.source.config_url.startswith("https://huggingface.co/")
        assert c.source.as_of[:2] == "20"


def test_published_values_spot_check():
    ds = load_model_config("deepseek-v3")
    assert (ds.moe.num_experts, ds.moe.top_k, ds.moe.n_group, ds.moe.topk_group) == (256, 8, 8, 4)
    assert (ds.mla.kv_lora_rank, ds.mla.qk_rope_head_dim, ds.mla.q_lora_rank) == (512, 64, 1536)
    ll = load_model_config("llama-3.1-8b")
    assert (ll.hidden_size, ll.attention.num_kv_heads, ll.mlp.intermediate_size) == (4096, 8, 14336)
    assert ll.rope.type == "llama3" and ll.rope.factor == 8.0


def test_shrunk_keeps_structure():
    for c in load_zoo():
        s = c.shrunk()
        assert s.arch == c.arch and s.norm == c.norm
        if c.attention:
            assert (s.attention.num_heads, s.attention.num_kv_heads) == (c.attention.num_heads, c.attention.num_kv_heads)
            assert s.attention.softmax_scale == pytest.approx(c.attention.softmax_scale)
        if c.moe:
            assert (s.moe.num_experts, s.moe.top_k) == (c.moe.num_experts, c.moe.top_k)


def test_bad_config_names_file_and_field(tmp_path):
    good = json.loads(load_model_config("llama-3.2-1b").model_dump_json())
    good["attention"]["num_kv_heads"] = 7  # 32 heads are not a multiple of 7
    f = tmp_path / "llama-3.2-1b.json"
    f.write_text(json.dumps(good))
    with pytest.raises(InputError) as e:
        load_zoo(tmp_path)
    assert e.value.file == str(f) and e.value.field.startswith("attention")
    good["attention"]["num_kv_heads"] = 8
    good["attn_heads_typo"] = 1
    f.write_text(json.dumps(good))
    with pytest.raises(InputError) as e:
        load_zoo(tmp_path)
    assert e.value.field == "attn_heads_typo"


def test_unknown_model_lists_the_zoo():
    with pytest.raises(InputError, match="llama-3.1-8b"):
        load_model_config("no-such-model")
