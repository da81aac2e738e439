"""HF config.json contents of the families the quantized-checkpoint tests build checkpoints from."""

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}
QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
             "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
             "vocab_size": 151936, "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
           "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 32768,
           "torch_dtype": "bfloat16"}
QWEN2_MOE = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
             "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
             "num_experts": 60, "num_experts_per_tok": 4, "num_attention_heads": 16, "num_key_value_heads": 16,
             "num_hidden_layers": 24, "vocab_size": 151936, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
