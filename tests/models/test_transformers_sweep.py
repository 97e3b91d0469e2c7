"""The transformers sweep's config shrinking (``benchmarks.transformers_sweep.shrink``): pure dict logic."""
from benchmarks.transformers_sweep import HEAD_DIM, HIDDEN, LAYERS, RESERVED, VOCAB, shrink


def test_shrink_sizes_only_get_smaller():
    defaults = dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                    num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096, head_dim=128,
                    rms_norm_eps=1e-6, use_cache=True, num_local_experts=8, num_experts_per_tok=2,
                    dropout=0.1, tiny_field=1)
    out = shrink(defaults)
    assert out["num_hidden_layers"] == LAYERS and out["hidden_size"] == HIDDEN
    assert out["num_attention_heads"] == 4 and out["head_dim"] == HEAD_DIM
    assert out["num_key_value_heads"] == 2            # grouped attention stays grouped
    assert out["vocab_size"] == VOCAB and out["num_local_experts"] == 4
    assert "num_experts_per_tok" not in out           # 2 already: never enlarged, not passed
    assert not {"rms_norm_eps", "use_cache", "dropout", "tiny_field"} & set(out)
    assert shrink(dict(hidden_size=16, num_attention_heads=1)) == {}


def test_shrink_keeps_full_and_multi_query_attention():
    assert shrink(dict(num_attention_heads=32, num_key_value_heads=32))["num_key_value_heads"] == 4
    assert "num_key_value_heads" not in shrink(dict(num_attention_heads=32, num_key_value_heads=1))


def test_shrink_moves_special_ids_into_the_vocabulary():
    out = shrink(dict(vocab_size=50257, bos_token_id=50256, eos_token_id=50256, pad_token_id=0,
                      decoder_start_token_id=50257, image_token_id=[50300, 5], suppress_tokens=[1, 2]))
    assert out["bos_token_id"] == out["eos_token_id"] == VOCAB - 1     # one id per distinct value
    assert out["decoder_start_token_id"] == VOCAB - 2
    assert out["image_token_id"] == [VOCAB - 3, 5]
    assert "pad_token_id" not in out and out["suppress_tokens"] == []
    assert all(VOCAB - RESERVED <= out[k] < VOCAB for k in ("bos_token_id", "decoder_start_token_id"))


def test_shrink_hierarchical_vision_and_audio():
    out = shrink(dict(image_size=224, patch_size=4, embed_dim=96, depths=[2, 2, 6, 2],
                      num_heads=[3, 6, 12, 24], hidden_size=768))
    assert out["image_size"] == 32 and "patch_size" not in out     # 4 already small
    assert out["depths"] == [1, 1, 1, 1] and out["embed_dim"] == 16
    assert out["num_heads"] == [1, 2, 4, 8] and out["hidden_size"] == 128
    out = shrink(dict(image_size=224, patch_size=16, hidden_size=768))
    assert out == dict(image_size=32, patch_size=8, hidden_size=HIDDEN)
    out = shrink(dict(conv_dim=[512] * 7, conv_kernel=[10, 3, 3, 3, 3, 2, 2],
                      conv_stride=[5, 2, 2, 2, 2, 2, 2], num_feat_extract_layers=7,
                      num_conv_pos_embedding_groups=16))
    assert out["conv_dim"] == [32, 32] and out["num_feat_extract_layers"] == 2
    assert out["num_conv_pos_embedding_groups"] == 4


def test_shrink_layer_lists_and_sub_configs():
    out = shrink(dict(num_hidden_layers=24, layer_types=["mamba"] * 3 + ["attention"] + ["mamba"] * 20,
                      mlp_only_layers=[0, 5], text_config=dict(model_type="llama", hidden_size=4096),
                      rope_parameters=dict(rope_type="default", mrope_section=[16, 24, 24])))
    assert out["layer_types"] == ["mamba", "attention"] and out["num_hidden_layers"] == LAYERS
    assert out["mlp_only_layers"] == [0]
    assert out["text_config"] == dict(model_type="llama", hidden_size=HIDDEN)
    assert sum(out["rope_parameters"]["mrope_section"]) == HEAD_DIM // 2
